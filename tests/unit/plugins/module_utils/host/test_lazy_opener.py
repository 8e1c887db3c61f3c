# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""host/lazy_opener.py: the opener is built once, on its first use, with the handlers given."""
from __future__ import annotations

from unittest import mock

from ansible_collections.llmserve.sglang.plugins.module_utils.host import lazy_opener


def test_the_opener_is_built_on_first_use_and_then_kept():
    handler = object()
    with mock.patch.object(lazy_opener.urllib.request, "build_opener") as build:
        opener = lazy_opener.LazyOpener(handler)
        build.assert_not_called()
        opener.open("http://127.0.0.1:1/health", timeout=3)
        opener.open("http://127.0.0.1:1/metrics")
    build.assert_called_once_with(handler)
    assert build.return_value.open.call_args_list == [
        mock.call("http://127.0.0.1:1/health", timeout=3), mock.call("http://127.0.0.1:1/metrics")]

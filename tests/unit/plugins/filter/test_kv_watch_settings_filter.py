# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""kv_watch_settings: the sglang_service role's watch settings within their ranges (issue 32, item 9)."""
from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.llmserve.sglang.plugins.filter.kv_watch_settings import FilterModule

kv_watch_settings = FilterModule().filters()["kv_watch_settings"]
PREFIX = "sglang_service_kv_watch_"


def test_the_roles_defaults_pass_typed():
    assert kv_watch_settings({"interval": 5, "window": "300", "keep": 4032}, PREFIX) == {
        "interval": 5.0, "window": 300.0, "keep": 4032}


@pytest.mark.parametrize("settings, message", [
    ({"keep": 0}, "sglang_service_kv_watch_keep must lie in [1, 20160] windows (got 0)"),
    ({"interval": 0}, "sglang_service_kv_watch_interval must lie in [1, 300] seconds (got 0)"),
    ({"window": 1e9}, "sglang_service_kv_watch_window must lie in [1, 86400] seconds (got 1e+09)"),
    ({"interval": 10, "window": 5}, "sglang_service_kv_watch_window (5) must not be shorter than "
                                    "sglang_service_kv_watch_interval (10)"),
    ({"keep": "many"}, "sglang_service_kv_watch_keep must be a number, got 'many'"),
])
def test_a_setting_out_of_its_range_fails_naming_the_variable(settings, message):
    with pytest.raises(AnsibleFilterError) as error:
        kv_watch_settings(settings, PREFIX)
    assert message in str(error.value)

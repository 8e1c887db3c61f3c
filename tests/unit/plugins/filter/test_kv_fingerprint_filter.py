# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""kv_fingerprint_diff as users call it: errors as AnsibleFilterError."""
from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.llmserve.sglang.plugins.filter import kv_fingerprint_diff as fp_filter


def test_fingerprint_diff_names_the_changed_keys():
    diff = fp_filter.FilterModule().filters()["kv_fingerprint_diff"]
    old = {"versions": {"driver": "580.95.05", "sglang": "0.5.9"}, "gpu": {"count": 8}}
    new = {"versions": {"driver": "580.105.08", "sglang": "0.5.9"}, "gpu": {"count": 8}}
    assert diff(old, new) == ["versions.driver"]
    with pytest.raises(AnsibleFilterError):
        diff(None, new)

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""plugin_utils/plain.py: plain copies of what Jinja hands a filter, and a boolean argument read as Ansible reads it."""
from __future__ import annotations

import pytest

from ansible.errors import AnsibleFilterError
from ansible.utils.unsafe_proxy import wrap_var

from ansible_collections.llmserve.sglang.plugins.plugin_utils.plain import flag, plain


def test_a_copy_in_plain_types_that_leaves_the_original_alone():
    original = {"hosts": [wrap_var("gpu1"), (1, 2.5)], 3: {"ok": True, "none": None}}
    copied = plain(original)
    assert copied == {"hosts": ["gpu1", [1, 2.5]], "3": {"ok": True, "none": None}}
    assert copied["hosts"][0].__class__ is str   # not the tagged text Jinja hands over
    copied["hosts"].append("gpu2")
    assert len(original["hosts"]) == 2


@pytest.mark.parametrize("value, expected", [("false", False), ("yes", True), (True, True), (0, False)])
def test_a_flag_as_ansible_reads_one(value, expected):
    assert flag("kv_tune_force", value) is expected


def test_a_flag_that_is_no_boolean_is_refused_by_name():
    with pytest.raises(AnsibleFilterError, match="kv_tune_force must be a boolean, got 'maybe'"):
        flag("kv_tune_force", "maybe")

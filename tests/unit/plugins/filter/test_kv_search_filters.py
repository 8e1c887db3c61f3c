# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""kv_search_start / kv_search_record / kv_fingerprint_diff as the kv_tune role calls them: plain-dict state that
survives a round trip through facts, errors as AnsibleFilterError, inputs never changed."""
from __future__ import annotations

import copy
import json

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.llmserve.sglang.plugins.filter import kv_fingerprint as fp_filter
from ansible_collections.llmserve.sglang.plugins.filter import kv_search as search_filter

FILTERS = search_filter.FilterModule().filters()
START = FILTERS["kv_search_start"]
RECORD = FILTERS["kv_search_record"]


def test_field_case_converges_through_json_round_trips():
    state = START(94.04, f0=0.88, lo=0.232, cap=0.98, resolution=0.005, safety_gib=1.0, budget=6)
    assert state["next"] == 0.88
    state = json.loads(json.dumps(RECORD(state, {"f": 0.88, "outcome": "stable", "min_free_gib": 4.0,
                                                 "tokens": 159282})))
    assert state["next"] == 0.91  # 0.88 + (4.0 - 1.0) / 94.04 = 0.9119, rounded down to the grid
    before = copy.deepcopy(state)
    after = RECORD(state, {"f": 0.91, "outcome": "stable", "min_free_gib": 1.18, "tokens": 216000})
    assert state == before  # the fact the role holds is not changed in place
    assert after["done"] and after["best"] == 0.91 and after["reason"].startswith("converged")


def test_a_crash_above_the_best_bisects():
    state = START(94.04, f0=0.88)
    state = RECORD(state, {"f": 0.88, "outcome": "stable", "min_free_gib": 4.0})
    state = RECORD(state, {"f": 0.91, "outcome": "crash"})
    assert state["best"] == 0.88 and 0.88 < state["next"] < 0.91


@pytest.mark.parametrize("kwargs, message", [
    ({"f0": 1.2}, "f0"),
    ({"f0": 0.9, "cap": 0.85}, "below the start value"),
    ({"f0": 0.0}, "f0"),
])
def test_bad_input_is_a_filter_error(kwargs, message):
    with pytest.raises(AnsibleFilterError, match=message):
        START(94.04, **kwargs)


def test_record_refuses_an_unknown_outcome_and_a_foreign_state():
    state = START(94.04, f0=0.88)
    with pytest.raises(AnsibleFilterError, match="outcome"):
        RECORD(state, {"f": 0.88, "outcome": "fine"})
    with pytest.raises(AnsibleFilterError, match="kv_search_start"):
        RECORD({"f": 1}, {"f": 0.88, "outcome": "stable", "min_free_gib": 2})


def test_fingerprint_diff_names_the_changed_keys():
    diff = fp_filter.FilterModule().filters()["kv_fingerprint_diff"]
    old = {"versions": {"driver": "580.95.05", "sglang": "0.5.9"}, "gpu": {"count": 8}}
    new = {"versions": {"driver": "580.105.08", "sglang": "0.5.9"}, "gpu": {"count": 8}}
    assert diff(old, new) == ["versions.driver"]
    with pytest.raises(AnsibleFilterError):
        diff(None, new)


def test_the_lower_bound_comes_from_the_formula_and_the_token_target():
    state = START(94.04, f0=0.88, post_load_free_gib=21.71)
    assert state["floor"] == 0.77   # 1 - 21.71 / 94.04 = 0.7691, rounded up to the grid
    state = START(94.04, f0=0.88, post_load_free_gib=21.71, target_tokens=250000, cell_size_bytes=70272)
    assert state["floor"] == 0.945  # the field case needs f = 0.943 for 250,000 tokens (capacity report)
    state = START(94.04, f0=0.88, cap=0.9, post_load_free_gib=21.71, target_tokens=250000, cell_size_bytes=70272)
    assert state["floor"] == 0.895  # above the cap: one step below it, so one value is left to try

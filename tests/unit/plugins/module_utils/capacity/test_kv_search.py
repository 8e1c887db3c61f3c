# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""kv_search: the search's decisions from the cases in test_kv_search.yaml (trials in, next value out), the one
written form of the value, and bad inputs."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from ansible_collections.llmserve.sglang.plugins.module_utils.capacity import kv_search as ks

CASES = yaml.safe_load((Path(__file__).parent / "test_kv_search.yaml").read_text())
P = 94.04


@pytest.mark.parametrize("case", CASES, ids=[case["id"] for case in CASES])
def test_search_case(case):
    state = ks.new_state(**case["start"])
    assert ks.next_trial(state) == case["start"]["f0"]
    for number, step in enumerate(case["trials"], 1):
        # Every state survives JSON: the cases are data, and so are the states between trials.
        state = json.loads(json.dumps(ks.record(state, step["trial"])))
        expect = step["expect"]
        where = "%s, after trial %d: %s" % (case["id"], number, state)
        assert ks.next_trial(state) == expect["next"], where
        for key in ("best", "floor", "ceiling", "predicted"):
            if key in expect:
                actual = state["trials"][-1]["predicted"] if key == "predicted" else state[key]
                assert actual == expect[key], (key, where)
        if "reason" in expect:
            assert state["done"] and state["reason"].startswith(expect["reason"]), where
        else:
            assert not state["done"], where


def test_record_after_done_is_an_error():
    state = ks.new_state(P, 0.80, budget=1)
    state = ks.record(state, {"f": 0.80, "outcome": "stable", "min_free_gib": 20.0})
    assert state["done"]
    with pytest.raises(ks.KvSearchError, match="finished"):
        ks.record(state, {"f": 0.9, "outcome": "stable", "min_free_gib": 1.0})


def test_slope_is_the_formula_until_two_values_held():
    state = ks.new_state(P, 0.80, resolution=0.001)
    assert ks.slope(state) == P
    state = ks.record(state, {"f": 0.80, "outcome": "stable", "min_free_gib": 12.0, "growth": 1.1})
    assert ks.slope(state) == pytest.approx(P * 1.1)


@pytest.mark.parametrize("value, resolution, text", [
    (0.91, 0.005, "0.910"), (0.9125, 0.0005, "0.9125"), (0.9, 0.01, "0.90"), (0.88, None, "0.88"),
    (0.8825, None, "0.8825"), (0.1 + 0.7, None, "0.7999999999999999"),
])
def test_value_text_round_trips(value, resolution, text):
    assert ks.value_text(value, resolution) == text
    assert ks.same_value(ks.parse_value(text), value)


def test_every_grid_value_is_written_and_read_back_the_same():
    for resolution in (0.01, 0.005, 0.001, 0.0005, 0.0001):
        for step in range(1, int(round(1 / resolution))):
            value = ks.grid_down(step * resolution, resolution)
            assert ks.parse_value(ks.value_text(value, resolution)) == value, (resolution, step)


def test_value_off_its_grid_is_refused():
    with pytest.raises(ks.KvSearchError, match="not on the 0.005 grid"):
        ks.value_text(0.9125, 0.005)


@pytest.mark.parametrize("text", ["0.9x", "", "1.0", "0", "nan", None])
def test_parse_value_refuses(text):
    with pytest.raises(ks.KvSearchError):
        ks.parse_value(text)


def test_grid_helpers():
    assert ks.grid_down(0.9149, 0.005) == 0.91
    assert ks.grid_down(0.915, 0.005) == 0.915
    assert ks.grid_up(0.7701, 0.005) == 0.775
    assert ks.grid_up(0.77, 0.005) == 0.77
    assert ks.grid_down(0.9127, 0.001) == 0.912
    assert ks.decimals(0.005) == 3 and ks.decimals(0.0005) == 4 and ks.decimals(0.01) == 2


@pytest.mark.parametrize("resolution", [0, -0.01, 0.2, 0.00001, 1 / 3.0, True])
def test_resolution_must_be_a_decimal_step(resolution):
    with pytest.raises(ks.KvSearchError, match="resolution"):
        ks.check_resolution(resolution)


def test_lower_bound_from_the_formula():
    assert ks.lower_bound(94.04, 21.71) == pytest.approx(1 - 21.71 / 94.04)
    with_target = ks.lower_bound(94.04, 21.71, target_tokens=200000, cell_size_bytes=70272)
    assert with_target > 1 - 21.71 / 94.04
    with pytest.raises(ks.KvSearchError, match="post_load_free_gib"):
        ks.lower_bound(10, 20)


@pytest.mark.parametrize("kwargs,match", [
    ({"f0": 1.2}, "f0"), ({"f0": 0.0}, "f0"), ({"f0": "0.9"}, "f0"), ({"f0": True}, "f0"),
    ({"cap": 0.8}, "below the start"), ({"cap": 1.5}, "cap must be <= 1"),
    ({"resolution": 0}, "resolution"), ({"resolution": -0.01}, "resolution"),
    ({"budget": 0}, "budget"), ({"budget": 2.5}, "budget"),
    ({"pre_load_free_gib": 0}, "pre_load_free_gib"), ({"pre_load_free_gib": float("nan")}, "pre_load_free_gib"),
    ({"safety_gib": -1}, "safety_gib"), ({"lo": 0.99}, "lower bound"), ({"guess": 1.5}, "guess"),
])
def test_bad_inputs(kwargs, match):
    args = {"pre_load_free_gib": P, "f0": 0.88}
    args.update(kwargs)
    with pytest.raises(ks.KvSearchError, match=match):
        ks.new_state(**args)
    assert issubclass(ks.KvSearchError, ValueError)


@pytest.mark.parametrize("trial,match", [
    ({"f": 0.9, "outcome": "exploded"}, "outcome"), ({"f": 1.0, "outcome": "stable", "min_free_gib": 1}, "trial f"),
    ({"f": 0.9, "outcome": "stable"}, "min_free_gib"), ("stable", "dict"),
    ({"f": 0.9, "outcome": "runtime_oom", "oom_deficit_gib": -1}, "oom_deficit_gib"),
    ({"f": 0.9, "outcome": "stable", "min_free_gib": 2, "growth": 0.5}, "growth"),
])
def test_bad_trials(trial, match):
    with pytest.raises(ks.KvSearchError, match=match):
        ks.record(ks.new_state(P, 0.88), trial)

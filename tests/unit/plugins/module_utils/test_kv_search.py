# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""kv_search: every branch of the state machine (predict, clamp, grid, bisect, init OOM floor, stops) and bad
inputs. P = 94.04 GiB is the field case's free memory before weights (DESIGN.md)."""
from __future__ import annotations

import json

import pytest

from ansible_collections.llmserve.sglang.plugins.module_utils import kv_search as ks

P = 94.04


def stable(f, m, tokens=None):
    return {"f": f, "outcome": "stable", "min_free_gib": m, "tokens": tokens}


def fresh(f0=0.88, **kwargs):
    kwargs.setdefault("safety_gib", 1.0)
    return ks.new_state(P, f0, **kwargs)


def test_first_trial_is_the_current_value():
    state = fresh()
    assert ks.next_trial(state) == 0.88
    assert ks.best(state) is None
    assert "next 0.880" in ks.describe(state)


def test_predict_rounds_down_to_the_grid():
    state = ks.record(fresh(), stable(0.88, 4.27, 159282))
    # 0.88 + 3.27 / 94.04 = 0.91477 -> 0.910 on the 0.005 grid (never above what was measured)
    assert ks.next_trial(state) == 0.91
    assert ks.best(state) == 0.88
    assert state["trials"][0]["predicted"] == 0.91
    assert "159282 tokens" in ks.describe(state)


def test_grid_helpers():
    assert ks.grid_down(0.9149, 0.005) == 0.91
    assert ks.grid_down(0.915, 0.005) == 0.915
    assert ks.grid_up(0.7701, 0.005) == 0.775
    assert ks.grid_up(0.77, 0.005) == 0.77
    assert ks.grid_down(0.9127, 0.001) == 0.912


def test_prediction_clamped_to_cap():
    state = ks.record(fresh(cap=0.9), stable(0.88, 20.0))
    assert ks.next_trial(state) == 0.9
    state = ks.record(state, stable(0.9, 18.0))
    assert state["done"] and ks.best(state) == 0.9
    assert "bracket" in state["reason"]


def test_converged_when_headroom_below_one_step():
    state = ks.record(fresh(), stable(0.88, 4.27))
    state = ks.record(state, stable(0.91, 1.29))
    assert ks.next_trial(state) is None
    assert ks.best(state) == 0.91
    assert state["reason"].startswith("converged")
    assert "done (converged" in ks.describe(state)


def test_predict_again_when_headroom_remains():
    state = ks.record(fresh(resolution=0.001), stable(0.80, 6.0))
    first = ks.next_trial(state)
    state = ks.record(state, stable(first, 3.0))
    assert ks.next_trial(state) > first


def test_runtime_oom_bisects_between_stable_and_failed():
    state = ks.record(fresh(), stable(0.88, 4.27))
    state = ks.record(state, {"f": 0.91, "outcome": "runtime_oom"})
    assert ks.next_trial(state) == 0.895        # (0.885 + 0.905) / 2 on the grid
    state = ks.record(state, {"f": 0.895, "outcome": "capture_oom"})
    assert ks.next_trial(state) == 0.885
    state = ks.record(state, {"f": 0.885, "outcome": "crash"})
    assert state["done"] and ks.best(state) == 0.88
    assert "bracket" in state["reason"]


def test_stable_prediction_never_reaches_a_failed_value():
    state = ks.record(fresh(), stable(0.88, 4.27))
    state = ks.record(state, {"f": 0.91, "outcome": "timeout"})
    state = ks.record(state, stable(0.895, 3.0))
    # 0.895 + 2 / 94.04 = 0.916 but 0.91 failed: clamp below it
    assert ks.next_trial(state) == 0.905


def test_stable_below_the_margin_is_an_upper_bound():
    state = ks.record(fresh(0.84), stable(0.84, 8.25))
    state = ks.record(state, stable(0.915, 0.79))
    assert ks.best(state) == 0.84
    assert state["ceiling"] == 0.915
    assert ks.next_trial(state) == 0.91          # 0.915 - 0.21 / 94.04 rounded down


def test_init_oom_raises_the_floor():
    state = fresh(0.70, lo=0.5)
    state = ks.record(state, {"f": 0.70, "outcome": "init_oom"})
    assert state["floor"] == 0.705
    assert ks.next_trial(state) == 0.84          # halfway from the floor to the cap 0.98, on the grid
    state = ks.record(state, {"f": 0.84, "outcome": "init_oom"})
    assert state["floor"] == 0.845
    assert ks.next_trial(state) == 0.91
    assert ks.best(state) is None


def test_prediction_does_not_move():
    # stable at 0.88; 0.89 is stable but eats the margin and predicts 0.880: no grid point above the best
    state = ks.record(fresh(resolution=0.005), stable(0.88, 4.27))
    state = ks.record(state, stable(0.89, 0.5))
    assert state["done"] and state["reason"] == "prediction does not move"
    assert ks.best(state) == 0.88


def test_only_unstable_measurements_bisect_down_to_the_floor():
    state = ks.record(fresh(0.9, lo=0.895), stable(0.9, 0.0))
    assert ks.next_trial(state) == 0.895           # predicted 0.885, raised to the floor
    state = ks.record(state, stable(0.895, 0.0))
    assert state["done"] and ks.best(state) is None
    assert "best none" in ks.describe(state)


def test_no_move_when_candidate_already_tried():
    state = ks.record(fresh(0.9, lo=0.85), stable(0.9, 0.5))
    candidate = ks.next_trial(state)
    assert candidate == 0.89
    state["trials"].append({"f": 0.885, "outcome": "crash", "min_free_gib": None, "tokens": None})
    state = ks.record(state, stable(0.89, 0.99))
    assert state["done"] and state["reason"] == "prediction does not move"


def test_budget_spent():
    state = ks.record(fresh(budget=2), stable(0.80, 20.0))
    assert ks.next_trial(state) is not None
    state = ks.record(state, stable(ks.next_trial(state), 10.0))
    assert state["done"] and state["reason"] == "trial budget spent"
    assert "done (trial budget spent)" in ks.describe(state)
    with pytest.raises(ks.KvSearchError, match="finished"):
        ks.record(state, stable(0.9, 1.0))


def test_state_is_json():
    state = ks.record(fresh(), stable(0.88, 4.27, 159282))
    again = json.loads(json.dumps(state))
    assert ks.next_trial(again) == ks.next_trial(state)
    assert ks.record(again, stable(0.91, 1.29))["best"] == 0.91


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
    ({"safety_gib": -1}, "safety_gib"), ({"lo": 0.99}, "lower bound"),
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
])
def test_bad_trials(trial, match):
    with pytest.raises(ks.KvSearchError, match=match):
        ks.record(fresh(), trial)

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The search for the largest stable --mem-fraction-static, one trial at a time, and the one written form of the value.

Pure and stdlib only; the state is a plain JSON-serialisable dict (the unit tests feed it trials from JSON cases).

Why predict instead of stepping: raising f by d moves P * d GiB from headroom into the KV pool, and whatever SGLang
sizes from the pool grows with it (a classic EAGLE draft's own KV pool holds as many tokens as the target's). So the
free memory m left under a load that fills the pool falls by about ``s = P * growth`` per unit of f, where growth is
(target KV + draft KV) / target KV of the last boot. One measurement at f says how far f can go:
``f + (m - safety) / s``, rounded DOWN to the grid and kept inside the bracket. Once two trials at different values
held the load, their measured slope replaces s when it is steeper (never when it is flatter: the prior is what the
formula guarantees). One restart verifies each prediction.

Failures teach too:
- an init OOM (the KV budget A - P(1-f) was <= 0) means f was too LOW: the floor rises to the formula's minimum
  from that boot's own P and A (and the next grid point above the failed value); with nothing stable yet the next
  trial is the caller's ``guess`` (the last-known-good value, or SGLang's default), else the middle of the bracket;
- a startup or runtime OOM whose torch message says how much was missing (``oom_deficit_gib`` = tried - free)
  means m was about -deficit there: the next value is predicted from that (with the last stable trial, as a
  secant), not bisected blind;
- a timeout or a crash says nothing about memory: bisect between the best value and the failed one.

A stable trial "keeps the margin" when m >= safety; the best value is the highest such one. A stable trial whose m
is below the margin is healthy but too close to the edge: it is an upper bound, and the prediction goes down.

    state = new_state(p_gib, f0, lo=..., cap=0.98, resolution=0.005, safety_gib=1.0, budget=6, guess=None)
    while (f := next_trial(state)) is not None:
        state = record(state, {"f": f, "outcome": "stable", "min_free_gib": 3.1, "tokens": 201000})
    best(state)
"""
from __future__ import annotations

import math
from typing import Any, cast

from ansible_collections.llmserve.sglang.plugins.module_utils import checks
from ansible_collections.llmserve.sglang.plugins.module_utils.capacity import kv_pool

# Outcomes of a trial, by the phase in which it ended (tuner.classify_trial decides them):
# init_oom (no KV pool: f too low), startup_oom (after the pool, before the first answer: capture, warm-up),
# runtime_oom (under load), timeout (never answered), crash (died with little memory free), stable (held the load),
# fatal (a failure that is not about memory: no value of f can fix it, the search ends).
OUTCOMES = ("stable", "init_oom", "startup_oom", "runtime_oom", "timeout", "crash", "fatal")
TOO_HIGH = ("startup_oom", "runtime_oom", "timeout", "crash")
DEFAULT_CAP = 0.98
DEFAULT_RESOLUTION = 0.005
DEFAULT_BUDGET = 6

# One tolerance for "the same value": far below any grid step (MIN_RESOLUTION), far above float noise.
TOLERANCE = 1e-9
MIN_RESOLUTION = 0.0001


class KvSearchError(checks.InvalidInput):
    """A bad input to the search: the message names the field and the value."""


# --------------------------------------------------------------------------------------------------------------
# The value: one grid, one written form, one tolerance
# --------------------------------------------------------------------------------------------------------------

def decimals(resolution: float) -> int:
    """Decimal places of the grid's points: 0.005 -> 3, 0.0005 -> 4, 0.01 -> 2."""
    text = ("%.10f" % resolution).rstrip("0")
    return len(text.split(".")[1]) if "." in text else 0


def check_resolution(resolution: Any) -> float:
    """The grid step as a float: a decimal step in [MIN_RESOLUTION, 0.1] (0.005, 0.0005, 0.01; not 1/3)."""
    res = checks.number("resolution", resolution, KvSearchError, minimum=MIN_RESOLUTION, maximum=0.1)
    if abs(round(res, decimals(res)) - res) > TOLERANCE:
        raise KvSearchError("resolution must be a decimal step such as 0.005 or 0.0005, got %r" % (resolution,))
    return res


def same_value(left: float, right: float) -> bool:
    """Whether two values of --mem-fraction-static are the same (TOLERANCE)."""
    return abs(float(left) - float(right)) <= TOLERANCE


def grid_down(value: float, resolution: float) -> float:
    """The largest grid point <= value: a prediction never exceeds what the measurement allows."""
    return round(math.floor(value / resolution + TOLERANCE) * resolution, decimals(resolution))


def grid_up(value: float, resolution: float) -> float:
    """The smallest grid point >= value: a lower bound stays a value that can start."""
    return round(math.ceil(value / resolution - TOLERANCE) * resolution, decimals(resolution))


def on_grid(value: float, resolution: float) -> bool:
    return same_value(value, round(round(value / resolution) * resolution, decimals(resolution)))


def value_text(value: Any, resolution: float | None = None) -> str:
    """The one written form of a --mem-fraction-static: on a grid, exactly its decimals ("0.910", "0.9125"), which
    read back as the same float; without a grid (a value an operator wrote), the shortest text that round-trips
    ("0.88"). A value off the grid it claims is a bug upstream, not something to round quietly."""
    value = checks.fraction("mem_fraction_static", value, KvSearchError)
    if resolution is None:
        return repr(value)
    if not on_grid(value, resolution):
        raise KvSearchError("%r is not on the %r grid" % (value, resolution))
    return "%.*f" % (decimals(resolution), value)


def parse_value(text: Any) -> float:
    """A --mem-fraction-static read back as text (a command line, a log, a drop-in) as a float in (0, 1)."""
    return checks.fraction("mem_fraction_static",
                           checks.parse_number("mem_fraction_static", text, float, KvSearchError), KvSearchError)


# --------------------------------------------------------------------------------------------------------------
# The search
# --------------------------------------------------------------------------------------------------------------

def lower_bound(pre_load_free_gib: float, post_load_free_gib: float, target_tokens: int | None = None,
                cell_size_bytes: float | None = None, page_size: int = 1, mm_reservation_gib: float = 0.0) -> float:
    """The lowest f worth trying: above the f at which the KV budget (less a multimodal model's reservation) is 0
    (SGLang refuses to start) and, with a target (e.g. the required context length in tokens) and the cell size, the
    smallest f that gives it. The capacity report's lowest f: kv_pool.lowest_viable_fraction."""
    try:
        return kv_pool.lowest_viable_fraction(pre_load_free_gib, post_load_free_gib,
                                              mm_reservation_gib=mm_reservation_gib, target_tokens=target_tokens,
                                              cell_size_bytes=cell_size_bytes, page_size=page_size)
    except kv_pool.KvModelError as exc:
        raise KvSearchError(str(exc)) from exc


def new_state(pre_load_free_gib: float, f0: float, lo: float | None = None, cap: float = DEFAULT_CAP,
              resolution: float = DEFAULT_RESOLUTION, safety_gib: float = 1.0, budget: int = DEFAULT_BUDGET,
              guess: float | None = None) -> dict[str, Any]:
    """A fresh search. ``f0`` = the first value measured (the running value may lie off the grid; every later one
    is on it). ``lo`` = the lowest viable f (lower_bound()), None for "anything above 0"; ``cap`` = the highest f
    ever tried; ``budget`` = trials in all, the first measurement included; ``guess`` = a value believed to start
    (the last-known-good one), tried after an init OOM while nothing has held the load yet."""
    p = checks.number("pre_load_free_gib", pre_load_free_gib, KvSearchError, above=0)
    f0 = checks.fraction("f0 (mem_fraction_static)", f0, KvSearchError)
    res = check_resolution(resolution)
    cap = checks.number("cap", cap, KvSearchError, maximum=1)
    if cap < f0:
        raise KvSearchError("cap (%r) is below the start value f0 (%r)" % (cap, f0))
    lo = res if lo is None else checks.number("lo", lo, KvSearchError)
    if lo >= cap:
        raise KvSearchError("the lower bound lo (%r) is not below cap (%r)" % (lo, cap))
    safety = checks.number("safety_gib", safety_gib, KvSearchError, minimum=0)
    budget = checks.integer("budget", budget, KvSearchError, minimum=1)
    if guess is not None:
        guess = checks.fraction("guess", guess, KvSearchError)
    return {
        "p_gib": p, "f0": f0, "cap": grid_down(cap, res), "resolution": res, "safety_gib": safety,
        "budget": budget, "guess": guess,
        "growth": 1.0,                            # KV-like GiB per GiB of KV budget (draft pools), last boot's
        "floor": max(grid_up(lo, res), res),      # lowest f that may start (raised by init_oom)
        "ceiling": None,                          # lowest f known to be too high (unstable or under the margin)
        "best": None,                             # highest f stable with the margin kept
        "trials": [], "next": f0, "done": False, "reason": None,
    }


def _optional(trial: dict[str, Any], name: str, minimum: float | None = None) -> float | None:
    value = trial.get(name)
    return None if value is None else checks.number("trial %s" % name, value, KvSearchError, minimum=minimum)


def _check_trial(trial: Any) -> dict[str, Any]:
    if not isinstance(trial, dict):
        raise KvSearchError("a trial must be a dict with f and outcome, got %r" % (trial,))
    f = checks.fraction("trial f", trial.get("f"), KvSearchError)
    outcome = trial.get("outcome")
    if outcome not in OUTCOMES:
        raise KvSearchError("trial outcome must be one of %s, got %r" % (", ".join(OUTCOMES), outcome))
    out: dict[str, Any] = {
        "f": f, "outcome": outcome, "min_free_gib": None, "tokens": trial.get("tokens"),
        "growth": _optional(trial, "growth", minimum=1.0),
        "oom_deficit_gib": _optional(trial, "oom_deficit_gib", minimum=0.0),
        "pre_load_free_gib": _optional(trial, "pre_load_free_gib"),
        "post_load_free_gib": _optional(trial, "post_load_free_gib")}
    if outcome == "stable":
        out["min_free_gib"] = checks.number("min_free_gib of a stable trial", trial.get("min_free_gib"), KvSearchError)
    return out


def stop(state: dict[str, Any], reason: str | None) -> dict[str, Any]:
    """End the search now (the caller knows why: a class's value verified). Returns the state."""
    state["next"] = None
    state["done"] = True
    state["reason"] = reason
    return state


_finish = stop


def _upper(state: dict[str, Any]) -> float:
    """The highest f still worth trying: one step below the lowest known-bad value, or the cap."""
    res = state["resolution"]
    if state["ceiling"] is None:
        return state["cap"]
    return min(state["cap"], grid_down(state["ceiling"] - res, res))


def _lower(state: dict[str, Any]) -> float:
    """The lowest f still worth trying: one step above the best, or the floor."""
    if state["best"] is None:
        return state["floor"]
    return max(state["floor"], grid_up(state["best"] + state["resolution"], state["resolution"]))


def _stable(state: dict[str, Any]) -> list[dict[str, Any]]:
    """The stable trials, highest value first."""
    return sorted((t for t in state["trials"] if t["outcome"] == "stable"), key=lambda t: -t["f"])


def slope(state: dict[str, Any]) -> float:
    """GiB of free memory under load lost per unit of f: the formula's P * growth, or the measured slope of the two
    highest stable trials when it is steeper."""
    prior = state["p_gib"] * state["growth"]
    stable = _stable(state)
    if len(stable) >= 2 and stable[0]["f"] - stable[1]["f"] > TOLERANCE:
        measured = (stable[1]["min_free_gib"] - stable[0]["min_free_gib"]) / (stable[0]["f"] - stable[1]["f"])
        return max(prior, measured)
    return prior


def _predict(state: dict[str, Any], trial: dict[str, Any]) -> float | None:
    """The next value from what the trials measured, or None when they say nothing about memory (bisect)."""
    res, safety = state["resolution"], state["safety_gib"]
    stable = _stable(state)
    ref = stable[0] if stable else None
    s = slope(state)
    if trial["outcome"] == "stable":
        ref = cast("dict[str, Any]", ref)   # the trial itself is among the stable ones
        return grid_down(ref["f"] + (ref["min_free_gib"] - safety) / s, res)
    if trial["outcome"] in ("startup_oom", "runtime_oom") and trial["oom_deficit_gib"] is not None:
        # Under the load (or the capture) at f, about -deficit GiB was free.
        missing = trial["oom_deficit_gib"]
        if ref is not None and ref["f"] < trial["f"]:
            s = max(s, (ref["min_free_gib"] + missing) / (trial["f"] - ref["f"]))
            return grid_down(ref["f"] + (ref["min_free_gib"] - safety) / s, res)
        return grid_down(trial["f"] - (missing + safety) / s, res)
    if trial["outcome"] == "init_oom" and ref is not None:
        return grid_down(ref["f"] + (ref["min_free_gib"] - safety) / s, res)
    guess = None if state["guess"] is None else grid_down(state["guess"], res)
    if (trial["outcome"] == "init_oom" and guess is not None and guess >= state["floor"] - TOLERANCE
            and not any(same_value(t["f"], guess) for t in state["trials"])):
        return guess
    return None


def _bisect(state: dict[str, Any]) -> float:
    """Midpoint (grid, rounded down) of the open bracket."""
    low, high = _lower(state), _upper(state)
    return max(low, grid_down((low + high) / 2, state["resolution"]))


def _learn(state: dict[str, Any], trial: dict[str, Any]) -> None:
    """What one trial says about the bracket, the floor and the growth of memory with f."""
    res = state["resolution"]
    if trial["growth"] is not None:
        state["growth"] = trial["growth"]
    if trial["pre_load_free_gib"] and trial["post_load_free_gib"]:
        # The formula's exact minimum from this boot's own P and A (where the budget turns positive): no value below
        # it can start, whatever failed.
        state["floor"] = max(state["floor"], grid_up(1 - trial["post_load_free_gib"] / trial["pre_load_free_gib"]
                                                     + TOLERANCE, res))
    if trial["outcome"] == "init_oom":
        state["floor"] = max(state["floor"], grid_up(trial["f"] + res, res))
    elif trial["outcome"] in TOO_HIGH:
        state["ceiling"] = trial["f"] if state["ceiling"] is None else min(state["ceiling"], trial["f"])
    elif trial["min_free_gib"] >= state["safety_gib"]:
        if state["best"] is None or trial["f"] > state["best"]:
            state["best"] = trial["f"]
    else:
        state["ceiling"] = trial["f"] if state["ceiling"] is None else min(state["ceiling"], trial["f"])


def record(state: dict[str, Any], trial: Any) -> dict[str, Any]:
    """Add one trial's result and decide the next value (state["next"], None when done). Returns the state."""
    if state.get("done"):
        raise KvSearchError("the search is finished (%s); no more trials to record" % state.get("reason"))
    trial = _check_trial(trial)
    state["trials"].append(trial)
    if trial["outcome"] == "fatal":
        trial["predicted"] = None
        return _finish(state, "a failure that is not about memory: no value of --mem-fraction-static fixes it")
    _learn(state, trial)
    predicted = _predict(state, trial)
    trial["predicted"] = predicted
    if (trial["outcome"] == "stable" and state["best"] is not None and same_value(state["best"], trial["f"])
            and predicted is not None and predicted < trial["f"] + state["resolution"] - TOLERANCE):
        return _finish(state, "converged: the headroom left is below one grid step")
    low, high = _lower(state), _upper(state)
    if low > high + TOLERANCE:
        if state["best"] is None:
            return _finish(state, "nothing above the floor held the load with the margin")
        if same_value(state["best"], state["cap"]):
            return _finish(state, "reached the cap")
        return _finish(state, "no value left to try between the best and the lowest failure")
    if len(state["trials"]) >= state["budget"]:
        return _finish(state, "the trial budget is spent")
    if predicted is None:
        candidate = _bisect(state)
    else:
        candidate = min(max(predicted, state["floor"]), high)
        if candidate < low - TOLERANCE:
            return _finish(state, "the prediction does not move")
    if any(same_value(t["f"], candidate) for t in state["trials"]):
        return _finish(state, "the prediction does not move")
    state["next"] = candidate
    return state


def next_trial(state: dict[str, Any]) -> float | None:
    """The next f to try, or None when the search is done."""
    return None if state.get("done") else state.get("next")


def best(state: dict[str, Any]) -> float | None:
    """The highest f that was stable and kept the safety margin (None: no such trial; keep last-known-good)."""
    return state.get("best")

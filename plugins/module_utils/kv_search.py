# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The tuning search for --mem-fraction-static (DESIGN.md, "The tuning search"), one trial at a time.

Pure and stdlib only (plus kv_memory for the lower bound): the kv_tune role restarts the server, runs kv_stress and
feeds each trial's result back here; the state is a plain JSON-serialisable dict because it lives in Ansible facts
between tasks.

Why predict instead of stepping: raising f by d moves P * d GiB from headroom into the KV pool, so a measurement
of the free memory left under a load that fills the pool (m, min over GPUs) says how far f can go:
``f1 = f + (m - safety) / P``, rounded DOWN to the resolution grid (never above what was measured) and clamped to
[lo, cap]. One restart verifies it. A failure above the last stable value (capture/runtime OOM, crash, timeout)
bisects between the two; an init OOM means the value was too LOW (the KV budget was <= 0) and raises the floor.

    state = new_state(p_gib, f0, lo=..., cap=0.98, resolution=0.005, safety_gib=1.0, budget=5)
    while (f := next_trial(state)) is not None:
        state = record(state, {"f": f, "outcome": "stable", "min_free_gib": 3.1, "tokens": 201000})
    best(state)

A stable trial "keeps the margin" when m >= safety; best() is the highest such value. A stable trial whose m is
below the safety margin is healthy but too close to the edge: it is treated as an upper bound and predicted down.
"""
from __future__ import annotations

import math

from ansible_collections.llmserve.sglang.plugins.module_utils import checks

OUTCOMES = ("stable", "init_oom", "capture_oom", "runtime_oom", "timeout", "crash")
UNSTABLE = ("capture_oom", "runtime_oom", "timeout", "crash")
DEFAULT_CAP = 0.98
DEFAULT_RESOLUTION = 0.005
DEFAULT_BUDGET = 6
_EPS = 1e-9


class KvSearchError(ValueError):
    """A bad input to the search: the message names the field and the value."""


def _number(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise KvSearchError("%s must be a finite number, got %r" % (name, value))
    return float(value)


def _fraction(name, value):
    value = _number(name, value)
    if not 0 < value < 1:
        raise KvSearchError("%s must be in (0, 1), got %r" % (name, value))
    return value


# One tolerance for "the same value": far below any grid step (MIN_RESOLUTION), far above float noise.
TOLERANCE = 1e-9
MIN_RESOLUTION = 0.0001


def decimals(resolution):
    """Decimal places of the grid's points: 0.005 -> 3, 0.0005 -> 4, 0.01 -> 2."""
    text = ("%.10f" % resolution).rstrip("0")
    return len(text.split(".")[1]) if "." in text else 0


def check_resolution(resolution):
    """The grid step as a float: a decimal step in [MIN_RESOLUTION, 0.1] (0.005, 0.0005, 0.01; not 1/3)."""
    res = checks.number("resolution", resolution, KvSearchError, minimum=MIN_RESOLUTION, maximum=0.1)
    if abs(round(res, decimals(res)) - res) > TOLERANCE:
        raise KvSearchError("resolution must be a decimal step such as 0.005 or 0.0005, got %r" % (resolution,))
    return res


def same_value(left, right):
    """Whether two values of --mem-fraction-static are the same (TOLERANCE)."""
    return abs(float(left) - float(right)) <= TOLERANCE


def on_grid(value, resolution):
    return same_value(value, round(round(value / resolution) * resolution, decimals(resolution)))


def value_text(value, resolution=None):
    """The one written form of a --mem-fraction-static: on a grid, exactly its decimals ("0.910", "0.9125"), which
    read back as the same float; without a grid (a value an operator wrote), the shortest text that round-trips
    ("0.88"). A value off the grid it claims is a bug upstream, not something to round quietly."""
    value = checks.fraction("mem_fraction_static", value, KvSearchError)
    if resolution is None:
        return repr(value)
    if not on_grid(value, resolution):
        raise KvSearchError("%r is not on the %r grid" % (value, resolution))
    return "%.*f" % (decimals(resolution), value)


def parse_value(text):
    """A --mem-fraction-static read back as text (a command line, a log, a drop-in) as a float in (0, 1)."""
    return checks.fraction("mem_fraction_static", checks.parse_number("mem_fraction_static", text, float,
                                                                      KvSearchError), KvSearchError)


def grid_down(value, resolution):
    """The largest grid point <= value: a prediction must never exceed what the measurement allows."""
    return round(math.floor(value / resolution + TOLERANCE) * resolution, decimals(resolution))


def grid_up(value, resolution):
    """The smallest grid point >= value: a lower bound must stay a value that can start."""
    return round(math.ceil(value / resolution - TOLERANCE) * resolution, decimals(resolution))


def lower_bound(pre_load_free_gib, post_load_free_gib, target_tokens=None, cell_size_bytes=None, page_size=1,
                mm_reservation_gib=0.0):
    """The lowest f worth trying: above the f at which the KV budget (less a multimodal model's reservation) is 0
    (SGLang refuses to start) and, with a target (e.g. the required context length in tokens) and the cell size, the
    smallest f that gives it. The capacity report's lowest f: kv_pool.lowest_viable_fraction."""
    # Imported here so the pure search above stays importable without the collection's package path.
    from ansible_collections.llmserve.sglang.plugins.module_utils import kv_pool
    try:
        return kv_pool.lowest_viable_fraction(pre_load_free_gib, post_load_free_gib,
                                              mm_reservation_gib=mm_reservation_gib, target_tokens=target_tokens,
                                              cell_size_bytes=cell_size_bytes, page_size=page_size)
    except kv_pool.KvModelError as exc:
        raise KvSearchError(str(exc)) from exc


def new_state(pre_load_free_gib, f0, lo=None, cap=DEFAULT_CAP, resolution=DEFAULT_RESOLUTION, safety_gib=1.0,
              budget=DEFAULT_BUDGET):
    """A fresh search. f0 = the value the host runs now (the first trial measures it, even when it is below lo:
    the formula can be wrong and the measurement is what the prediction starts from). lo = the lowest viable f
    (lower_bound()), None for "anything above 0"; cap = the highest f ever tried; budget = trials in all,
    the initial measurement included."""
    p = _number("pre_load_free_gib", pre_load_free_gib)
    if p <= 0:
        raise KvSearchError("pre_load_free_gib must be > 0, got %r" % (pre_load_free_gib,))
    f0 = _fraction("f0 (mem_fraction_static)", f0)
    res = _number("resolution", resolution)
    if not 0 < res < 1:
        raise KvSearchError("resolution must be in (0, 1), got %r" % (resolution,))
    cap = _number("cap", cap)
    if cap > 1:
        raise KvSearchError("cap must be <= 1, got %r" % (cap,))
    if cap < f0:
        raise KvSearchError("cap (%r) is below the start value f0 (%r)" % (cap, f0))
    lo = res if lo is None else _number("lo", lo)
    if lo >= cap:
        raise KvSearchError("the lower bound lo (%r) is not below cap (%r)" % (lo, cap))
    safety = _number("safety_gib", safety_gib)
    if safety < 0:
        raise KvSearchError("safety_gib must be >= 0, got %r" % (safety_gib,))
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
        raise KvSearchError("budget must be an integer >= 1, got %r" % (budget,))
    return {
        "p_gib": p, "f0": f0, "cap": grid_down(cap, res), "resolution": res, "safety_gib": safety,
        "budget": budget,
        "floor": max(grid_up(lo, res), res),   # lowest f that may start (raised by init_oom)
        "ceiling": None,                          # lowest f known to be too high (unstable or under the margin)
        "best": None,                             # highest f stable with the margin kept
        "trials": [], "next": f0, "done": False, "reason": None,
    }


def _check_trial(trial):
    if not isinstance(trial, dict):
        raise KvSearchError("a trial must be a dict with f and outcome, got %r" % (trial,))
    f = _fraction("trial f", trial.get("f"))
    outcome = trial.get("outcome")
    if outcome not in OUTCOMES:
        raise KvSearchError("trial outcome must be one of %s, got %r" % (", ".join(OUTCOMES), outcome))
    out = {"f": f, "outcome": outcome, "min_free_gib": None, "tokens": trial.get("tokens")}
    if outcome == "stable":
        out["min_free_gib"] = _number("min_free_gib of a stable trial", trial.get("min_free_gib"))
    return out


def _finish(state, reason):
    state["next"] = None
    state["done"] = True
    state["reason"] = reason
    return state


def _upper(state):
    """The highest f still worth trying: one step below the lowest known-bad value, or the cap."""
    res = state["resolution"]
    if state["ceiling"] is None:
        return state["cap"]
    return min(state["cap"], grid_down(state["ceiling"] - res, res))


def _lower(state):
    """The lowest f still worth trying: one step above the best, or the floor."""
    if state["best"] is None:
        return state["floor"]
    return max(state["floor"], grid_up(state["best"] + state["resolution"], state["resolution"]))


def _bisect(state):
    """Midpoint (grid, rounded down) of the open bracket; None when no grid point is left in it."""
    low, high = _lower(state), _upper(state)
    if low > high + _EPS:
        return None
    return max(low, grid_down((low + high) / 2, state["resolution"]))


def record(state, trial):
    """Add one trial's result and decide the next value (state["next"], None when done). Returns the state."""
    if state.get("done"):
        raise KvSearchError("the search is finished (%s); no more trials to record" % state.get("reason"))
    trial = _check_trial(trial)
    state["trials"].append(trial)
    f, res, p = trial["f"], state["resolution"], state["p_gib"]
    predicted = None
    if trial["outcome"] == "init_oom":
        state["floor"] = max(state["floor"], grid_up(f + res, res))
    elif trial["outcome"] in UNSTABLE:
        state["ceiling"] = f if state["ceiling"] is None else min(state["ceiling"], f)
    else:
        headroom = trial["min_free_gib"] - state["safety_gib"]
        if headroom >= 0:
            if state["best"] is None or f > state["best"]:
                state["best"] = f
        else:
            state["ceiling"] = f if state["ceiling"] is None else min(state["ceiling"], f)
        predicted = grid_down(f + headroom / p, res)
        trial["predicted"] = predicted
        if 0 <= headroom < res * p and state["best"] == f:
            return _finish(state, "converged: headroom below one resolution step")
    if len(state["trials"]) >= state["budget"]:
        return _finish(state, "trial budget spent")
    low, high = _lower(state), _upper(state)
    if low > high + _EPS:
        return _finish(state, "bracket below the resolution")
    if predicted is not None:
        candidate = min(max(predicted, state["floor"]), high)
        if candidate < low - _EPS:
            return _finish(state, "prediction does not move")
    else:
        candidate = _bisect(state)
    if candidate is None or any(abs(t["f"] - candidate) < _EPS for t in state["trials"]):
        return _finish(state, "prediction does not move")
    state["next"] = candidate
    return state


def next_trial(state):
    """The next f to try, or None when the search is done."""
    return None if state.get("done") else state.get("next")


def best(state):
    """The highest f that was stable and kept the safety margin (None: no such trial; keep last-known-good)."""
    return state.get("best")


def describe(state):
    """One line for progress output."""
    trials = state["trials"]
    head = "trial %d/%d" % (len(trials), state["budget"])
    if trials:
        last = trials[-1]
        head += ": f %.3f %s" % (last["f"], last["outcome"])
        if last["min_free_gib"] is not None:
            head += " (min free %.2f GiB" % last["min_free_gib"]
            head += ", %s tokens)" % last["tokens"] if last.get("tokens") is not None else ")"
    best_f = state["best"]
    tail = "best %s" % ("none" if best_f is None else "%.3f" % best_f)
    if state["done"]:
        return "%s; done (%s), %s" % (head, state["reason"], tail)
    return "%s; %s, next %.3f" % (head, tail, state["next"])

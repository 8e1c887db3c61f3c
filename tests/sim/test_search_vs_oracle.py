# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""kv_search against the simulator's ground truth, without processes.

Each trial is decided by sglang_sim.memory.plan(), the very arithmetic the simulated server applies at start
(init OOM, capture OOM) and under the stress load (a full prefill chunk and a full decode batch with the pool full:
stress_headroom() is what kv_stress's minimum free memory would read). The search must end on a value the
oracle (sglang_sim.oracle.search, same safety margin) calls stable, at most one resolution step below the oracle's
maximum, within 4 restarts after the initial measurement.
"""
from __future__ import annotations

import os
import sys

import pytest

import simlib

from ansible_collections.llmserve.sglang.plugins.module_utils import kv_search

if simlib.SIM_SRC not in sys.path:
    sys.path.insert(0, simlib.SIM_SRC)

from sglang_sim import args as server_args  # noqa: E402  (needs SIM_SRC on sys.path)
from sglang_sim import hostspec, memory, oracle  # noqa: E402
from sglang_sim.model import load_model  # noqa: E402

GIB = 2 ** 30
SAFETY_GIB = 1.0
RESOLUTION = 0.005
MAX_RESTARTS = 4
ROWS = []


def setup(profile):
    """host, model, draft and resolved args of a profile's default launch, as the server and oracle build them."""
    host = hostspec.Host(simlib.profile_host(profile), os.path.join(simlib.PROFILES, profile, "host.json"))
    args = server_args.parse(simlib.launch_args(profile))
    model = load_model(args.model_path)
    server_args.resolve(args, host, model, memory.era(host.sglang_version) == memory.ERA_CURRENT)
    draft = None
    if args.speculative_algorithm in memory.SPEC_WITH_DRAFT and args.speculative_draft_model_path:
        draft = load_model(args.speculative_draft_model_path)
    return host, model, draft, args


def trial(sim, fraction):
    """One restart at ``fraction`` and a stress run: the result kv_tune would record, plus P (GiB)."""
    host, model, draft, args = sim
    args.mem_fraction_static = fraction
    plan = memory.plan(host, model, draft, args)
    p_gib = min(replica.p for replica in plan.replicas if replica.p is not None) / GIB
    if plan.failure is not None:
        kind = plan.failure.kind
        outcome = {"init_oom": "init_oom", "pool_too_small": "init_oom", "capture_oom": "capture_oom",
                   "oom": "capture_oom"}.get(kind, "crash")
        return {"f": fraction, "outcome": outcome}, p_gib
    headroom = plan.stress_headroom()
    if headroom < 0:
        return {"f": fraction, "outcome": "runtime_oom"}, p_gib
    return {"f": fraction, "outcome": "stable", "min_free_gib": headroom / GIB,
            "tokens": plan.replicas[0].tokens}, p_gib


def tune(sim, start):
    """Drive the search from ``start``; returns (state, trials run)."""
    first, p_gib = trial(sim, start)
    state = kv_search.new_state(p_gib, start, resolution=RESOLUTION, safety_gib=SAFETY_GIB,
                                budget=MAX_RESTARTS + 1)
    state = kv_search.record(state, first)
    print("  " + kv_search.describe(state))
    while kv_search.next_trial(state) is not None:
        result = trial(sim, kv_search.next_trial(state))[0]
        state = kv_search.record(state, result)
        print("  " + kv_search.describe(state))
    return state


@pytest.fixture(scope="module", autouse=True)
def table():
    """Print the results table once all cases ran (pytest -s)."""
    yield
    print("\n%-18s %6s %10s %6s %7s %s" % ("profile", "start", "oracle max", "found", "trials", "KV tokens"))
    for row in ROWS:
        print("%-18s %6.3f %10.3f %6.3f %7d %s" % row)


@pytest.mark.parametrize("profile,start", [
    ("field", 0.88), ("h100-llama70b", None), ("h200-deepseek-v3", None), ("single-gpu", None),
    ("field", 0.70)])
def test_search_reaches_oracle(profile, start):
    sim = setup(profile)
    host, model, draft, args = sim
    default_f = args.mem_fraction_static
    start = default_f if start is None else start
    truth = oracle.search(host, model, draft, args, SAFETY_GIB, 0.001)
    oracle_max = truth["max_mem_fraction_static"]
    assert oracle_max is not None
    print(f"\n{profile} from {start:.3f} (oracle max {oracle_max:.3f} at {SAFETY_GIB:.1f} GiB margin)")
    state = tune(sim, start)
    found = kv_search.best(state)
    restarts = len(state["trials"]) - 1
    assert found is not None, kv_search.describe(state)
    final = trial(sim, found)[0]
    assert final["outcome"] == "stable" and final["min_free_gib"] >= SAFETY_GIB, final
    assert oracle_max - RESOLUTION - 1e-9 <= found <= oracle_max + 1e-9, (found, oracle_max)
    assert restarts <= MAX_RESTARTS, state["trials"]
    if start != 0.70:
        assert state["trials"][0]["outcome"] == "stable"
    else:
        assert state["trials"][0]["outcome"] == "init_oom"
    ROWS.append((profile, start, oracle_max, found, len(state["trials"]), "%s" % final["tokens"]))

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""faults.load_contention_mib: another process takes memory on a GPU while the server loads its weights and gives
it back once the server has sized its pools (a transient neighbour on a shared GPU).

SGLang logs the weights' mem usage as free-before minus free-after, so the neighbour's memory shows up in it; A is
smaller by it, and so is the pool SGLang sizes from A; once the neighbour is gone the server has that much more
headroom. nvidia-smi shows the neighbour while it holds the memory. The oracle gives a clean host's truth.
"""
from __future__ import annotations

import json
import os
import sys
import time

import pytest

import simlib

from ansible_collections.llmserve.sglang.plugins.module_utils.capacity import kv_capacity_report
from ansible_collections.llmserve.sglang.plugins.module_utils.service import server_args as product_args
from ansible_collections.llmserve.sglang.plugins.module_utils.startup.boot_trust import pool_findings
from ansible_collections.llmserve.sglang.plugins.module_utils.host.nvidia_smi import probe_nvidia_smi
from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner.pool_model import pool_residual_gib
from ansible_collections.llmserve.sglang.plugins.module_utils.startup.startup_log import parse_startup_log

if simlib.SIM_SRC not in sys.path:
    sys.path.insert(0, simlib.SIM_SRC)

from sglang_sim import args as server_args  # noqa: E402  (needs SIM_SRC on sys.path)
from sglang_sim import hostspec, memory  # noqa: E402
from sglang_sim.hostspec import GIB, MIB, SimConfigError  # noqa: E402
from sglang_sim.model import load_model  # noqa: E402

HYBRID = "single-gpu-hybrid"
NEIGHBOUR_PID = 91000


def _contended(mib: dict, **faults) -> dict:
    return dict(faults, load_contention_mib=mib)


def _plan(profile, faults, contention=True, **host_overrides):
    """(clean plan, plan with the host's faults) of a profile's default launch."""
    host = hostspec.Host(simlib.profile_host(profile, faults=faults, **host_overrides), profile)
    model = load_model(os.path.join(simlib.PROFILES, profile, "model"))
    args = server_args.parse(simlib.launch_args(profile))
    server_args.resolve(args, host, model, memory.era(host.sglang_version) == memory.ERA_CURRENT)
    draft = None
    if args.speculative_algorithm in memory.SPEC_WITH_DRAFT and args.speculative_draft_model_path:
        draft = load_model(args.speculative_draft_model_path)
    return memory.plan(host, model, draft, args), memory.plan(host, model, draft, args, contention=contention)


def _by_tag(facts):
    return {rank["tag"]: rank for rank in facts["ranks"]}


# -- the plan ---------------------------------------------------------------------------------------------------

def test_plan_takes_during_load_and_gives_back_after_the_pools():
    clean, plan = _plan(HYBRID, _contended({"0": 30000}))
    assert clean.failure is None and plan.failure is None
    taken = 30000 * MIB
    rank = plan.ranks[0]
    names = [step[0] for step in rank.steps]
    assert names.index("init") < names.index("neighbour") < names.index("weights")
    assert names.index("kv") < names.index("neighbour_gone") < names.index("workspace")
    assert rank.neighbour == 0 and rank.used == sum(size for name, size, _b, _a in rank.steps
                                                    if name not in memory.NEIGHBOUR_STEPS)
    replica, clean_replica = plan.replicas[0], clean.replicas[0]
    assert replica.p == clean_replica.p and replica.a == clean_replica.a - taken
    assert 0 < replica.tokens < clean_replica.tokens and 0 < replica.mamba_slots < clean_replica.mamba_slots
    # The pools are smaller by about the neighbour's memory, which the server has as headroom afterwards.
    assert plan.min_headroom() > clean.min_headroom() + taken * 0.98


def test_from_the_pool_it_takes_after_the_weights_and_the_log_of_the_weights_is_clean():
    # load_contention_from "pool": SGLang measures the free memory again to size its pools, after "Load weight end".
    clean, plan = _plan("field", _contended({"3": 2048}, load_contention_from="pool"))
    names = [step[0] for step in plan.ranks[3].steps]
    assert names.index("weights") < names.index("neighbour") < names.index("req_to_token")
    weights = [[step for step in rank.steps if step[0] == "weights"] for rank in (plan.ranks[3], clean.ranks[3])]
    assert weights[0] == weights[1]
    # A is the MIN over the ranks: GPU 3's free memory after the weights, less the neighbour's
    after_weights = weights[1][0][3]
    assert plan.replicas[0].a == after_weights - 2048 * MIB < clean.replicas[0].a
    assert 0 < plan.replicas[0].tokens < clean.replicas[0].tokens


@pytest.mark.parametrize("value", ["profile", None, 1])
def test_a_phase_the_simulator_does_not_know_is_refused(value):
    with pytest.raises(SimConfigError, match=r"faults.load_contention_from must be one of \['load', 'pool', 'idle'\]"):
        hostspec.Host(simlib.profile_host("field", faults={"load_contention_from": value}), "host.json")


def test_idle_takes_nothing_while_the_server_starts():
    clean, plan = _plan("field", _contended({"3": 2048}, load_contention_from="idle"))
    assert [rank.steps for rank in plan.ranks] == [rank.steps for rank in clean.ranks]


def test_the_oracle_plan_and_the_gates_ignore_it():
    clean, plan = _plan("field", _contended({"3": 2048}), contention=False)
    assert [rank.steps for rank in plan.ranks] == [rank.steps for rank in clean.ranks]
    # field runs 0.5.9 at f = 0.88: a gate from 0.9, or for 0.5.10 only, spares it.
    for faults in (_contended({"3": 2048}, from_mem_fraction_static=0.9),
                   _contended({"3": 2048}, for_sglang_versions=["0.5.10"])):
        clean, plan = _plan("field", faults)
        assert plan.replicas[0].tokens == clean.replicas[0].tokens
        assert "neighbour" not in [step[0] for step in plan.ranks[3].steps]
    clean, plan = _plan("field", _contended({"3": 2048}, from_mem_fraction_static=0.88,
                                            for_sglang_versions=["0.5.9"]))
    assert plan.replicas[0].tokens < clean.replicas[0].tokens


def test_weights_oom_when_the_neighbour_leaves_too_little():
    """field: P = 94.04 GiB, W = 72.33 GiB: a 30000 MiB neighbour leaves the weights no room on GPU 3."""
    _clean, plan = _plan("field", _contended({"3": 30000}))
    failure = plan.failure
    assert failure.kind == "oom" and failure.stage == "weights" and failure.ranks == [3]
    # More than is free: the neighbour's own allocation fails, it holds nothing.
    clean, plan = _plan("field", _contended({"3": 200000}))
    assert plan.failure is None and plan.replicas[0].tokens == clean.replicas[0].tokens


@pytest.mark.parametrize("value, message", [
    ({"8": 1024}, r"faults.load_contention_mib names GPU '8', the host has GPUs 0-7"),
    ({"-1": 1024}, r"faults.load_contention_mib names GPU '-1'"),
    ({"gpu0": 1024}, r"faults.load_contention_mib names GPU 'gpu0'"),
    ({"0": -5}, r"faults \(GPU 0\): load_contention_mib must be a number >= 0, got -5"),
    ({"0": 1.5}, r"faults \(GPU 0\): load_contention_mib must be an integer, got 1.5"),
    ({"0": "30000"}, r"load_contention_mib must be a number >= 0, got '30000'"),
    ({"0": True}, r"load_contention_mib must be a number >= 0, got True"),
    ([30000], r"faults.load_contention_mib must be an object of GPU index -> MiB"),
    (30000, r"faults.load_contention_mib must be an object of GPU index -> MiB"),
])
def test_bad_values_are_refused(value, message):
    with pytest.raises(SimConfigError, match=message):
        hostspec.Host(simlib.profile_host("field", faults={"load_contention_mib": value}), "host.json")


def test_a_bad_value_stops_the_server(make_sim):
    server = make_sim("single-gpu", faults={"load_contention_mib": {"1": 4096}}).start(
        simlib.launch_args("single-gpu"))
    assert server.wait_exit(30) == 1
    assert "faults.load_contention_mib names GPU '1', the host has GPUs 0-0" in server.log


# -- the server -------------------------------------------------------------------------------------------------

def test_server_logs_the_neighbour_in_mem_usage_and_sizes_smaller_pools(make_sim):
    """Qwen3.5-9B on one H100 with 30000 MiB taken during the load: mem usage 29.30 GB higher, avail mem as much
    lower, smaller Mamba and KV pools, as much more headroom after them; nvidia-smi shows the neighbour only then."""
    clean = make_sim(HYBRID).start(simlib.launch_args(HYBRID))
    assert clean.wait_ready(), clean.log
    clean_facts = parse_startup_log(clean.log)
    clean.stop()
    sim = make_sim(HYBRID, faults=_contended({"0": 30000}, slow_start_s=2))
    server = sim.start(simlib.launch_args(HYBRID))
    seen = None
    deadline = time.time() + 20
    while seen is None and time.time() < deadline and server.proc.poll() is None:
        if "Load weight begin" in server.log:
            gpu = probe_nvidia_smi(sim.smi_runner())["gpus"][0]
            neighbours = [process for process in gpu["compute_processes"] if process["pid"] == NEIGHBOUR_PID]
            # The probe is three nvidia-smi queries, each of its own moment: the process list may show the
            # neighbour before the memory query counts it; the next poll sees both.
            if neighbours and gpu["memory_used_bytes"] >= 30000 * MIB + 520 * MIB:
                seen = gpu, neighbours[0]
                assert "Load weight end" not in server.log
        time.sleep(0.1)
    assert seen is not None, server.log
    gpu, neighbour = seen
    assert neighbour["used_memory_bytes"] == 30000 * MIB
    assert gpu["memory_used_bytes"] >= 30000 * MIB + 520 * MIB
    assert server.wait_ready(), server.log
    facts = parse_startup_log(server.log)
    assert facts["failure"] is None and facts["ready"]
    assert facts["pre_load_free_gib"] == clean_facts["pre_load_free_gib"]
    assert facts["weights_gib"] == pytest.approx(clean_facts["weights_gib"] + 30000 / 1024, abs=0.011)
    assert facts["post_load_free_gib"] == pytest.approx(clean_facts["post_load_free_gib"] - 30000 / 1024,
                                                        abs=0.011)
    assert 0 < facts["kv_tokens"] < clean_facts["kv_tokens"] * 0.5
    assert 0 < facts["mamba_cache_size"] < clean_facts["mamba_cache_size"]
    # Memory pool end: still with the neighbour, about P * (1 - f) free as on a clean host; then it is gone.
    assert facts["memory_pool_end_free_gib"] == pytest.approx(clean_facts["memory_pool_end_free_gib"], abs=0.25)
    assert facts["available_gpu_mem_gib"] > clean_facts["available_gpu_mem_gib"] + 29.0
    # The neighbour is gone: nvidia-smi shows the server alone, its free memory the server's headroom.
    gpu = probe_nvidia_smi(sim.smi_runner())["gpus"][0]
    assert [process["pid"] for process in gpu["compute_processes"]] == [server.proc.pid]
    assert abs(gpu["memory_free_bytes"] / GIB - facts["post_capture_free_gib"]) < 0.02
    assert simlib.request(server.url + "/health_generate")[0] == 200


def test_an_unlisted_neighbour_is_in_the_gpus_used_memory_under_no_process(make_sim):
    """faults.load_contention_unlisted: the neighbour of another container, whose process nvidia-smi does not list,
    still takes the memory; only memory.used shows it, on the GPUs named and there only."""
    sim = make_sim("h100-llama70b", faults=_contended({"2": 4096, "5": 4096}, slow_start_s=2,
                                                      load_contention_unlisted=[5]))
    server = sim.start(simlib.launch_args("h100-llama70b"))
    seen = unlisted = None
    deadline = time.time() + 20
    while seen is None and time.time() < deadline and server.proc.poll() is None:
        if "Load weight begin" in server.log and "Load weight end" not in server.log:
            gpus = probe_nvidia_smi(sim.smi_runner())["gpus"]
            listed = {gpu["index"]: sum(p["used_memory_bytes"] for p in gpu["compute_processes"]) for gpu in gpus}
            unlisted = {gpu["index"]: gpu["memory_used_bytes"] - listed[gpu["index"]] for gpu in gpus}
            # The probe is two nvidia-smi commands (memory, then processes) and the weights grow in between: only a
            # probe whose GPUs without a hidden process add up (0 and 2) shows one moment on 5 too.
            if (any(process["pid"] == NEIGHBOUR_PID + 2 for process in gpus[2]["compute_processes"])
                    and unlisted[0] == 0 and unlisted[2] == 0):
                seen = gpus
        time.sleep(0.1)
    assert seen is not None, (unlisted, server.log)
    assert NEIGHBOUR_PID + 5 not in [process["pid"] for process in seen[5]["compute_processes"]]
    assert unlisted[5] == 4096 * MIB
    assert server.wait_ready(), server.log
    ranks = _by_tag(parse_startup_log(server.log))    # taken on both GPUs, listed or not
    assert ranks["TP5"]["weights_gib"] == pytest.approx(ranks["TP2"]["weights_gib"], abs=0.011)
    assert ranks["TP5"]["weights_gib"] == pytest.approx(ranks["TP0"]["weights_gib"] + 4.0, abs=0.011)


def test_idle_after_a_load_the_neighbour_takes_its_memory_and_keeps_it(make_sim):
    """load_contention_from "idle": a start and a load are clean; once a load that reserved half the pool has ended
    and the server is asked for its info (kv_stress's last call), the other process holds its memory, listed, until
    the server exits."""
    sim = make_sim("single-gpu", faults=_contended({"0": 2048}, load_contention_from="idle"))
    server = sim.start(simlib.launch_args("single-gpu", max_total_tokens=16384))
    assert server.wait_ready(), server.log

    def neighbour():
        gpu = probe_nvidia_smi(sim.smi_runner())["gpus"][0]
        return [process["used_memory_bytes"] for process in gpu["compute_processes"] if process["pid"] == NEIGHBOUR_PID]

    # A generation is no load (a 9,000-token request alone is 55% of the pool: a short one is not half).
    assert simlib.flood(server.url, 2, 100, 4) == [200] * 2
    assert simlib.request(server.url + "/get_server_info")[0] == 200
    time.sleep(hostspec.CONTENTION_AFTER_INFO_S + 0.5)
    assert neighbour() == []
    assert simlib.flood(server.url, 3, 9000, 16) == [200] * 3
    time.sleep(hostspec.CONTENTION_AFTER_INFO_S + 0.5)
    assert neighbour() == []    # idle after the load, not yet asked
    assert simlib.request(server.url + "/get_server_info")[0] == 200
    deadline = time.time() + 10
    while not neighbour() and time.time() < deadline:
        time.sleep(0.2)
    assert neighbour() == [2048 * MIB]
    time.sleep(1)
    assert neighbour() == [2048 * MIB]
    server.stop()
    assert neighbour() == []


@pytest.mark.parametrize("value", [[8], [-1], ["5"], [True], {"5": 1}, 5])
def test_bad_unlisted_gpus_are_refused(value):
    with pytest.raises(SimConfigError, match=r"faults.load_contention_unlisted must be a list of GPU indexes 0-7"):
        hostspec.Host(simlib.profile_host("field", faults={"load_contention_unlisted": value}), "host.json")


def test_tp_server_a_neighbour_on_one_gpu_shrinks_every_ranks_pool(make_sim):
    """field (TP8, 0.5.9): 2 GiB taken on GPU 3 during the load: only TP3's Load weight end shows it, A is the MIN
    over the ranks, so every rank's pool is smaller, and the collection predicts that pool from the log."""
    clean = make_sim("field").start(simlib.launch_args("field"))
    assert clean.wait_ready(), clean.log
    clean_facts = parse_startup_log(clean.log)
    clean.stop()
    server = make_sim("field", faults=_contended({"3": 2048})).start(simlib.launch_args("field"))
    assert server.wait_ready(), server.log
    facts = parse_startup_log(server.log)
    ranks, clean_ranks = _by_tag(facts), _by_tag(clean_facts)
    for tag, rank in ranks.items():
        extra = 2.0 if tag == "TP3" else 0.0
        assert rank["pre_load_free_gib"] == clean_ranks[tag]["pre_load_free_gib"]
        assert rank["weights_gib"] == pytest.approx(clean_ranks[tag]["weights_gib"] + extra, abs=0.011)
        assert rank["post_load_free_gib"] == pytest.approx(clean_ranks[tag]["post_load_free_gib"] - extra,
                                                           abs=0.011)
        assert rank["kv_tokens"] == facts["kv_tokens"]
    assert facts["kv_tokens"] < clean_facts["kv_tokens"] * 0.85
    # The collection's boot check names it (tests/simhosts runs the tuner only on what a host's GPU watch shows).
    assert clean_facts["untrusted"] == []
    assert any(finding.startswith("ranks that load the same shards report different weights")
               for finding in facts["untrusted"]), facts["untrusted"]
    config = _field_config()
    predicted = kv_capacity_report.capacity(config, 0.88, facts["pre_load_free_gib"], facts["post_load_free_gib"],
                                            tp_size=8, sglang_version="0.5.9",
                                            speculative_algorithm="EAGLE3")["max_total_num_tokens"]
    assert abs(facts["kv_tokens"] - predicted) / predicted < 0.002


def _field_config() -> dict:
    with open(os.path.join(simlib.PROFILES, "field", "model", "config.json"), encoding="utf-8") as handle:
        return json.load(handle)


def test_tp_server_a_neighbour_on_every_gpu_while_the_pool_is_sized_moves_the_pool_off_the_formula(make_sim):
    """field (TP8): 2 GiB taken on every GPU after the weights are logged: every rank reads clean and even, and only
    the pool, 2 GiB short of the formula at the log's own P, A and f, shows it (the tuner's pool check, against the
    run's first start)."""
    clean = make_sim("field").start(simlib.launch_args("field"))
    assert clean.wait_ready(), clean.log
    clean_facts = parse_startup_log(clean.log)
    clean.stop()
    server = make_sim("field", faults=_contended({str(gpu): 2048 for gpu in range(8)}, load_contention_from="pool")
                      ).start(simlib.launch_args("field"))
    assert server.wait_ready(), server.log
    facts = parse_startup_log(server.log)
    assert facts["untrusted"] == [] and facts["kv_tokens"] < clean_facts["kv_tokens"]
    residuals = [pool_residual_gib(_field_config(), product_args.memory_args(boot["server_args"]), "0.5.9", {}, boot)
                 for boot in (clean_facts, facts)]
    assert residuals[1] - residuals[0] == pytest.approx(2.0, abs=0.05), residuals
    found = pool_findings(residuals[1], residuals[0])
    assert len(found) == 1 and found[0].startswith("the pool SGLang logged is 2.0"), found


def test_gated_server_and_the_oracle_are_unchanged(make_sim):
    """Started below from_mem_fraction_static the server logs what a clean host gives; the oracle always does."""
    clean_sim = make_sim("single-gpu")
    clean = clean_sim.start(simlib.launch_args("single-gpu"))
    assert clean.wait_ready(), clean.log
    clean_facts = parse_startup_log(clean.log)
    clean.stop()
    sim = make_sim("single-gpu", faults=_contended({"0": 2000}, from_mem_fraction_static=0.95))
    server = sim.start(simlib.launch_args("single-gpu"))
    assert server.wait_ready(), server.log
    facts = parse_startup_log(server.log)
    for key in ("weights_gib", "post_load_free_gib", "kv_tokens", "available_gpu_mem_gib"):
        assert facts[key] == clean_facts[key], key
    server.stop()
    flags = simlib.launch_args("single-gpu")
    answers = [dict(simlib.oracle(each, flags, 1.0), host=None)
               for each in (make_sim("single-gpu", faults=_contended({"0": 2000})), clean_sim)]
    assert answers[0] == answers[1]


def test_tp_server_a_neighbour_on_one_gpu_while_the_pool_is_sized_shows_only_at_the_pool_end(make_sim):
    """field (TP8): 2 GiB taken on GPU 3 after the weights are logged: every rank's weights and A read clean, the pool
    is smaller, and only TP3's Memory pool end is 2 GiB short; the collection's boot check names it."""
    clean = make_sim("field").start(simlib.launch_args("field"))
    assert clean.wait_ready(), clean.log
    clean_facts = parse_startup_log(clean.log)
    clean.stop()
    server = make_sim("field", faults=_contended({"3": 2048}, load_contention_from="pool")).start(
        simlib.launch_args("field"))
    assert server.wait_ready(), server.log
    facts = parse_startup_log(server.log)
    ranks, clean_ranks = _by_tag(facts), _by_tag(clean_facts)
    for tag, rank in ranks.items():
        clean_rank = clean_ranks[tag]
        assert rank["weights_gib"] == clean_rank["weights_gib"]
        assert rank["post_load_free_gib"] == clean_rank["post_load_free_gib"]
    assert facts["kv_tokens"] < clean_facts["kv_tokens"]
    assert clean_facts["untrusted"] == []
    assert len(facts["untrusted"]) == 1 and facts["untrusted"][0].startswith(
        "ranks that build the same pools lost different memory between the weights and the pool's end besides the "
        "pools: TP3 ")

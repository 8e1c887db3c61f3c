# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The simulator's startup, read back through the collection's own log grammar and KV model.

Two independent implementations must agree: the simulator (tools/sglang_sim, re-derived from SGLang's code) logs
a KV pool, and the collection's kv_capacity_report.capacity predicts it from the P and A in that same log.
"""
from __future__ import annotations

import json
import os

import simlib

from ansible_collections.llmserve.sglang.plugins.module_utils.capacity import kv_capacity_report, kv_defaults
from ansible_collections.llmserve.sglang.plugins.module_utils.startup.startup_log import parse_startup_log

FIELD_TOKENS = 159277   # "KV Cache is allocated. #tokens: 159277" in the field (reference/sglang-memory.md)


def _config(profile):
    with open(os.path.join(simlib.PROFILES, profile, "model", "config.json"), encoding="utf-8") as handle:
        return json.load(handle)


def _predicted(facts, profile, fraction, **kwargs):
    return kv_capacity_report.capacity(_config(profile), fraction, facts["pre_load_free_gib"],
                                       facts["post_load_free_gib"], **kwargs)["max_total_num_tokens"]


def test_field_at_088_matches_the_field_and_the_collection(make_sim):
    server = make_sim("field").start(simlib.launch_args("field"))
    assert server.wait_ready(), server.log
    facts = parse_startup_log(server.log)
    assert facts["failure"] is None and facts["ready"] and facts["format"] == "classic"
    assert facts["tp_size"] == 8 and [rank["tag"] for rank in facts["ranks"]] == ["TP%d" % i for i in range(8)]
    assert abs(facts["pre_load_free_gib"] - 94.04) <= 0.01
    assert abs(facts["weights_gib"] - 72.33) <= 0.01 and abs(facts["draft_weights_gib"] - 1.55) <= 0.01
    tokens = facts["kv_tokens"]
    assert tokens == facts["max_total_num_tokens"]
    assert abs(tokens - FIELD_TOKENS) / FIELD_TOKENS < 0.002
    predicted = _predicted(facts, "field", 0.88, tp_size=8, sglang_version="0.5.9", speculative_algorithm="EAGLE3")
    assert abs(tokens - predicted) / predicted < 0.002
    assert 7.2 <= facts["available_gpu_mem_gib"] <= 7.6
    status, info = simlib.request(server.url + "/get_server_info")
    assert status == 200 and info["mem_fraction_static"] == 0.88 and info["max_total_num_tokens"] == tokens
    assert info["internal_states"][0]["memory_usage"]["token_capacity"] == tokens
    assert simlib.request(server.url + "/health_generate")[0] == 200


def test_field_at_075_fails_at_init_with_sglangs_message(make_sim):
    server = make_sim("field").start(simlib.launch_args("field", mem_fraction_static=0.75))
    assert server.wait_exit(30) not in (None, 0)
    log = server.log
    assert "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: " \
           "self.server_args.mem_fraction_static=0.75" in log
    assert "Received sigquit from a child process. It usually means the child failed." in log
    assert parse_startup_log(log)["failure"]["kind"] == "init_oom"


def test_field_at_097_cannot_even_start(make_sim):
    """0.97 leaves 0.03 * 94 = 2.8 GiB outside the pool, less than the field's 3.9 GiB of graphs, request table
    and EAGLE draft: SGLang runs out of memory loading the draft (its idle window ends near 0.958)."""
    server = make_sim("field").start(simlib.launch_args("field", mem_fraction_static=0.97))
    assert server.wait_exit(30) not in (None, 0)
    assert "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate" in server.log
    assert parse_startup_log(server.log)["failure"]["kind"] == "runtime_oom"


def test_occupied_gpu_lowers_p_for_every_rank(make_sim):
    sim = make_sim("field", faults={"gpu_occupied_mib": {"3": 4096}})
    server = sim.start(simlib.launch_args("field"))
    assert server.wait_ready(), server.log
    facts = parse_startup_log(server.log)
    by_tag = {rank["tag"]: rank for rank in facts["ranks"]}
    assert abs(by_tag["TP3"]["pre_load_free_gib"] - (94.04 - 4.0)) <= 0.01
    assert by_tag["TP0"]["pre_load_free_gib"] >= 94.03
    assert facts["pre_load_free_gib"] == by_tag["TP3"]["pre_load_free_gib"]
    tokens = facts["kv_tokens"]
    assert all(rank["kv_tokens"] == tokens for rank in facts["ranks"])
    assert tokens < FIELD_TOKENS * 0.7      # (P - 4) * 0.88 - W: 3.5 GiB less KV budget
    predicted = _predicted(facts, "field", 0.88, tp_size=8, sglang_version="0.5.9", speculative_algorithm="EAGLE3")
    assert abs(tokens - predicted) / predicted < 0.002


def test_occupied_gpu_beyond_ten_percent_is_unbalanced(make_sim):
    sim = make_sim("field", faults={"gpu_occupied_mib": {"5": 16384}})
    server = sim.start(simlib.launch_args("field"))
    assert server.wait_exit(30) not in (None, 0)
    assert "RuntimeError: The memory capacity is unbalanced. Some GPUs may be occupied by other processes." in server.log
    assert parse_startup_log(server.log)["failure"]["kind"] == "unbalanced_memory"


def test_current_log_format_and_default_fraction(make_sim):
    server = make_sim("h100-llama70b").start(simlib.launch_args("h100-llama70b"))
    assert server.wait_ready(), server.log
    log = server.log
    assert "Init parallel ends." in log and "Capture target decode CUDA graph end. bs=[1, 2, 4," in log
    facts = parse_startup_log(log)
    assert facts["format"] == "current" and facts["failure"] is None
    assert facts["server_args"]["mem_fraction_static"] == kv_defaults.default_mem_fraction_static(
        81559, 8, sglang_version="0.5.9")
    predicted = _predicted(facts, "h100-llama70b", facts["server_args"]["mem_fraction_static"], tp_size=8,
                           sglang_version="0.5.9")
    assert abs(facts["kv_tokens"] - predicted) / predicted < 0.002
    assert facts["cuda_graph_gib"] > 0


def test_fp8_kv_cache_on_h200(make_sim):
    server = make_sim("h200-deepseek-v3").start(simlib.launch_args("h200-deepseek-v3"))
    assert server.wait_ready(), server.log
    facts = parse_startup_log(server.log)
    assert "Using KV cache dtype: torch.float8_e4m3fn" in server.log
    fraction = facts["server_args"]["mem_fraction_static"]
    predicted = _predicted(facts, "h200-deepseek-v3", fraction, tp_size=8, sglang_version="0.5.9",
                           kv_cache_dtype="fp8_e4m3")
    assert abs(facts["kv_tokens"] - predicted) / predicted < 0.002


def test_single_gpu_lines_have_no_rank_tag(make_sim):
    server = make_sim("single-gpu").start(simlib.launch_args("single-gpu"))
    assert server.wait_ready(), server.log
    assert "] Load weight begin. avail mem=" in server.log and " TP0]" not in server.log
    facts = parse_startup_log(server.log)
    assert facts["tp_size"] == 1 and facts["ranks"][0]["tag"] == ""
    predicted = _predicted(facts, "single-gpu", facts["server_args"]["mem_fraction_static"],
                           sglang_version="0.5.5.post3")
    assert abs(facts["kv_tokens"] - predicted) / predicted < 0.002


def test_data_parallel_replicas_each_log_their_pool(make_sim):
    server = make_sim("h100-llama70b").start(simlib.launch_args("h100-llama70b", tp_size=4, dp_size=2))
    assert server.wait_ready(), server.log
    facts = parse_startup_log(server.log)
    assert [replica["tag"] for replica in facts["replicas"]] == ["DP0 TP0", "DP1 TP0"]
    assert "[" not in "".join(rank["tag"] for rank in facts["ranks"]) and len(facts["ranks"]) == 8
    status, info = simlib.request(server.url + "/server_info")
    assert status == 200 and len(info["internal_states"]) == 2


def test_faults_for_an_sglang_version_spare_the_others(make_sim):
    """faults.for_sglang_versions: a crash at startup hits servers of the listed SGLang versions only (a release that
    does not start on a host, which a rollout must roll back)."""
    faults = {"crash_at_startup": True, "for_sglang_versions": ["0.5.10"]}
    old = make_sim("field", faults=faults, sglang_version="0.5.9").start(simlib.launch_args("field"))
    assert old.wait_ready(), old.log
    old.stop()
    new = make_sim("field", faults=faults, sglang_version="0.5.10").start(simlib.launch_args("field"))
    assert new.wait_exit(30) not in (None, 0)
    assert "RuntimeError: CUDA error: an illegal memory access was encountered" in new.log
    assert "Received sigquit from a child process." in new.log


def test_faults_from_a_value_up_spare_the_lower_values(make_sim):
    """faults.from_mem_fraction_static: the hang hits servers started at 0.9 and above only (the tuner's fault
    tests back off from such a value to the last-known-good one below it)."""
    sim = make_sim("field", faults={"hang_at_startup": True, "from_mem_fraction_static": 0.9})
    low = sim.start(simlib.launch_args("field", mem_fraction_static=0.88))
    assert low.wait_ready(), low.log
    low.stop()
    high = sim.start(simlib.launch_args("field", mem_fraction_static=0.9))
    assert not high.wait_ready(3)
    assert high.wait_exit(0.1) is None  # still hanging, not dead


def test_a_release_that_needs_more_memory_fails_a_pin_verified_on_the_one_before(make_sim):
    """memory_for_sglang_versions: 0.5.10 reserves 6 GiB more for its CUDA graphs, so the largest value that starts
    on 0.5.9 runs out of memory in 0.5.10's graph capture (what a rollout must re-tune, not roll back), and a lower
    value starts there."""
    more = {"memory_for_sglang_versions": {"0.5.10": {"graph_mib_base": 6144}}}
    old = make_sim("field", sglang_version="0.5.9", **more)
    highest = simlib.oracle(old, simlib.launch_args("field"), 1.0)["max_start_mem_fraction_static"]
    server = old.start(simlib.launch_args("field", mem_fraction_static=highest))
    assert server.wait_ready(), server.log
    server.stop()
    new = make_sim("field", sglang_version="0.5.10", **more)
    server = new.start(simlib.launch_args("field", mem_fraction_static=highest))
    assert server.wait_exit(30) not in (None, 0)
    facts = parse_startup_log(server.log)
    assert facts["failure"]["kind"] == "capture_oom", facts["failure"]
    lower = simlib.oracle(new, simlib.launch_args("field"), 1.0)["max_start_mem_fraction_static"]
    assert lower < highest - 0.02
    server = new.start(simlib.launch_args("field", mem_fraction_static=lower))
    assert server.wait_ready(), server.log

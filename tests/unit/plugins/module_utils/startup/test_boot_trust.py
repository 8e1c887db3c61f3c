# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Boots whose memory numbers cannot be trusted: real docs-CI boots on a GPU that other notebooks shared."""
from __future__ import annotations

from pathlib import Path

import pytest

from ansible_collections.llmserve.sglang.plugins.module_utils.startup.boot_trust import (
    add_sample, checkpoint_bytes, findings, look_findings, needs_second_read, pool_window_gib, settled_read, start_findings,
    unlisted_bytes)
from ansible_collections.llmserve.sglang.plugins.module_utils.startup.startup_log import parse_startup_log

LOGS = Path(__file__).resolve().parents[4] / "fixtures" / "logs"
LLAMA2_7B = 13476839424    # meta-llama/Llama-2-7b-chat-hf, model.safetensors.index.json total_size (fp16)
LLAMA31_8B = 16060522496   # meta-llama/Meta-Llama-3.1-8B-Instruct (bf16)
# Qwen/Qwen2.5-VL-7B-Instruct: what the same model took in a clean load of the same docs build (15.70 GB), in place of
# its checkpoint's total_size, which no fixture holds
QWEN25_VL_7B_CLEAN = int(15.70 * 2 ** 30)


def facts(name):
    return parse_startup_log((LOGS / name).read_text())


@pytest.mark.parametrize("log, size, weights, excess", [
    # 62.82 GB "used" for a 12.55 GiB fp16 model: about 50 GiB were another process's
    ("shared_gpu_llama2_7b_eagle_docs_ci_62gb.log", LLAMA2_7B, 62.82, 50.27),
    ("shared_gpu_llama31_8b_lora_docs_ci.log", LLAMA31_8B, 59.90, 44.94),
    ("multimodal_reduce_qwen25vl7b_shared_gpu_docs_ci.log", QWEN25_VL_7B_CLEAN, 25.03, 9.33),
])
def test_weights_far_above_the_checkpoint(log, size, weights, excess):
    boot = facts(log)
    assert boot["weights_gib"] == weights
    found = findings(boot, size)
    assert len(found) == 1
    assert "the weights took %.2f GiB per GPU" % weights in found[0]
    assert "%.2f GiB were taken by something else" % excess in found[0]


@pytest.mark.parametrize("log, size", [
    ("multimodal_reduce_qwen25vl7b_docs_ci.log", QWEN25_VL_7B_CLEAN),
    ("classic_tp1_llama31_8b_eagle3_h100.log", LLAMA31_8B),
])
def test_clean_loads_are_trusted(log, size):
    assert findings(facts(log), size) == []


def test_without_the_checkpoint_only_the_ranks_are_compared():
    assert findings(facts("shared_gpu_llama2_7b_eagle_docs_ci_62gb.log")) == []
    assert facts("shared_gpu_llama2_7b_eagle_docs_ci_62gb.log")["untrusted"] == []


def test_ranks_of_one_stage_that_loaded_different_amounts():
    lines = (LOGS / "hybrid_gdn_qwen35_9b_tp2_rtx4090.log").read_text().replace(
        "TP1] Load weight end. elapsed=5.46 s, type=Qwen3_5ForConditionalGeneration, avail mem=14.08 GB, mem usage=8.85",
        "TP1] Load weight end. elapsed=5.46 s, type=Qwen3_5ForConditionalGeneration, avail mem=9.08 GB, mem usage=13.85")
    boot = parse_startup_log(lines)
    assert boot["untrusted"][0] == (
        "ranks that load the same shards report different weights: TP1 13.85 GiB, TP0 8.85 GiB: free memory moved on "
        "some GPUs during the load (another process?), so P and A are not what SGLang's pool will see next time")
    # The edit leaves TP1's "Memory pool end" as it was, so its pool window is 5 GiB short too.
    assert boot["untrusted"][1].startswith("ranks that build the same pools lost different memory between the weights "
                                           "and the pool's end besides the pools: TP0 0.11 GiB, TP1 -4.89 GiB")
    # the real boot: both ranks 8.85
    assert facts("hybrid_gdn_qwen35_9b_tp2_rtx4090.log")["untrusted"] == []


@pytest.mark.parametrize("log", ["field_kimi_k25_rtx6000_tp8_eagle3.log", "v058_tp8_glm5_fp8kv_mi355x_capture_crash.log",
                                 "v058_tp8_kimi_k25_mi355x_capture_crash.log", "current_dp4_tp4_ep4_qwen3moe_excerpt.log",
                                 "hybrid_gdn_qwen35_9b_tp2_rtx4090.log"])
def test_real_ranks_of_one_stage_report_the_same_weights(log):
    # The evidence for RANK_SPREAD_GIB: every real multi-rank boot in the fixtures prints the same figure on every rank.
    ranks = [rank["weights_gib"] for rank in facts(log)["ranks"] if rank.get("weights_gib") is not None]
    assert len(ranks) >= 2 and max(ranks) - min(ranks) < 0.01 and findings(facts(log)) == []


def test_4_gib_taken_on_one_gpu_of_eight_while_the_weights_load():
    # Issue 18's field host: another process took 4 GiB on the GPU of TP3 during the load (5.5% of its 72.33 GiB, under
    # any ratio a bound could afford): that rank's "mem usage" grows by it and its avail mem shrinks by it.
    text = (LOGS / "field_kimi_k25_rtx6000_tp8_eagle3.log").read_text().replace(
        "TP3] Load weight end. type=KimiK25ForConditionalGeneration, dtype=torch.bfloat16, avail mem=21.71 GB, "
        "mem usage=72.33 GB.", "TP3] Load weight end. type=KimiK25ForConditionalGeneration, dtype=torch.bfloat16, "
        "avail mem=17.71 GB, mem usage=76.33 GB.")
    boot = parse_startup_log(text)
    assert boot["untrusted"] == [
        "ranks that load the same shards report different weights: TP3 76.33 GiB, TP0 72.33 GiB: free memory moved on "
        "some GPUs during the load (another process?), so P and A are not what SGLang's pool will see next time"]


@pytest.mark.parametrize("log, window", [
    ("v058_tp8_glm5_fp8kv_mi355x_capture_crash.log", 3.25), ("v058_tp8_kimi_k25_mi355x_capture_crash.log", 4.09),
    ("current_dp4_tp4_ep4_qwen3moe_excerpt.log", 0.09), ("hybrid_gdn_qwen35_9b_tp2_rtx4090.log", 0.11)])
def test_real_ranks_of_one_stage_lose_the_same_memory_between_the_weights_and_the_pool(log, window):
    # The evidence that the pool window is a rank-invariant: their free memory differs, this figure does not.
    windows = [pool_window_gib(rank) for rank in facts(log)["ranks"] if pool_window_gib(rank) is not None]
    assert len(windows) >= 2 and max(windows) - min(windows) < 0.02
    assert min(windows) == pytest.approx(window, abs=0.01)


def test_memory_taken_on_one_gpu_while_sglang_sizes_the_pool():
    # 2 GiB taken on TP5's GPU after "Load weight end" was printed and still held at "Memory pool end": the weights'
    # figures are clean, the pool was sized on less than A, and that rank's free memory after the pool is 2 GiB short.
    text = (LOGS / "v058_tp8_kimi_k25_mi355x_capture_crash.log").read_text().replace(
        "TP5] Memory pool end. avail mem=45.30 GB", "TP5] Memory pool end. avail mem=43.30 GB")
    boot = parse_startup_log(text)
    assert boot["untrusted"] == [
        "ranks that build the same pools lost different memory between the weights and the pool's end besides the "
        "pools: TP5 6.09 GiB, TP4 4.09 GiB: memory moved on some GPUs while SGLang sized the pool (another process?), "
        "so the pool and the headroom of this start are not what the next start will see"]
    # a rank whose log ends before its pool does not count
    clean = facts("v058_tp8_kimi_k25_mi355x_capture_crash.log")
    assert pool_window_gib(dict(clean["ranks"][0], memory_pool_end_free_gib=None)) is None


def test_pipeline_stages_are_compared_within_a_stage():
    boot = {"weights_gib": 40.0, "ranks": [{"tag": "PP0 TP0", "weights_gib": 40.0}, {"tag": "PP0 TP1", "weights_gib": 40.1},
                                           {"tag": "PP1 TP0", "weights_gib": 30.0}, {"tag": "PP1 TP1", "weights_gib": 30.0}]}
    assert findings(boot) == []


@pytest.mark.parametrize("index, size", [
    ({"metadata": {"total_size": 13476839424}, "weight_map": {}}, 13476839424),
    ({"weight_map": {}}, None),
    ({"metadata": {"total_size": "x"}}, None),
    ([], None),
])
def test_checkpoint_bytes(index, size):
    assert checkpoint_bytes(index) == size


# --- what other processes hold on the GPUs while a server starts (sglang_ready's watch) -----------------------------

GIB = 2 ** 30


def sample(*gpus):
    """GPU dicts as gpu_probe gives them: (index, [(pid, bytes), ...]) each."""
    def processes(procs):
        return [{"pid": pid, "name": "python3", "used_memory_bytes": used} for pid, used in procs]
    return [{"index": index, "compute_processes": processes(procs)} for index, procs in gpus]


def test_a_start_watch_keeps_the_least_and_most_memory_outside_the_server():
    seen = {}
    add_sample(seen, sample((0, [(100, 60 * GIB)]), (1, [(101, 60 * GIB)]), (2, [(900, GIB)])), {0, 1}, {100, 101})
    add_sample(seen, sample((0, [(100, 60 * GIB), (91000, 4 * GIB)]), (1, [(101, 60 * GIB)])), {0, 1}, {100, 101})
    add_sample(seen, sample((0, [(100, 70 * GIB)]), (1, [(101, 70 * GIB)])), {0, 1}, {100, 101})
    assert sorted(seen) == [0, 1]     # GPU 2 is not the unit's
    assert (seen[0]["min_bytes"], seen[0]["max_bytes"]) == (0, 4 * GIB) and seen[1]["max_bytes"] == 0
    assert seen[0]["processes"] == {91000: {"pid": 91000, "name": "python3", "max_bytes": 4 * GIB}}


def watched(index, low, high, procs=()):
    return {"gpu": index, "min_bytes": low, "max_bytes": high,
            "processes": [{"pid": pid, "name": "python3", "max_bytes": used} for pid, used in procs]}


def test_memory_that_appears_or_goes_away_during_a_start_makes_it_untrusted():
    appeared = start_findings([watched(0, 0, 2 * GIB, [(91000, 2 * GIB)]), watched(1, 0, 0)], {0: 0, 1: 0})
    assert appeared == ["another process held up to 2.00 GiB on GPU 0 while the server started (pid 91000 python3), "
                        "against 0.00 GiB at the first look: P, A and the pool of this start are not what the next "
                        "start will see"]
    gone = start_findings([watched(3, 0, 4 * GIB, [(555, 4 * GIB)])], {3: 4 * GIB})
    assert gone == ["memory other processes held on GPU 3 at the first look (4.00 GiB) was given back while the "
                    "server started (0.00 GiB at the least): this start had memory the next one may not have"]


@pytest.mark.parametrize("seen, before", [
    ([watched(0, 0, int(0.2 * GIB), [(7, int(0.2 * GIB))])], {0: 0}),     # a CUDA context's worth
    ([watched(0, GIB, GIB, [(7, GIB)])], {0: GIB}),                       # held all along (a monitoring agent)
    (None, {0: 0}),                                                       # nothing watched
    ([], {}),
])
def test_memory_outside_the_server_that_did_not_move_is_no_finding(seen, before):
    assert start_findings(seen, before) == []


# --- memory no process is listed for: a GPU's total less its listed processes ---------------------------------------

def totalled(used, *procs):
    """One GPU 0 sample whose memory.used is ``used`` and whose listed processes are ``procs`` ((pid, bytes) each)."""
    return [dict(sample((0, list(procs)))[0], memory_used_bytes=used)]


def test_unlisted_bytes_is_the_total_less_the_listed_processes():
    assert unlisted_bytes(totalled(70 * GIB, (100, 60 * GIB), (7, GIB))[0]) == 9 * GIB
    assert unlisted_bytes(totalled(59 * GIB, (100, 60 * GIB))[0]) == 0        # read before the server grew
    assert unlisted_bytes(sample((0, [(100, GIB)]))[0]) is None             # no total: not known


def test_memory_a_process_held_as_it_exited_between_the_two_reads_of_one_look_is_not_unlisted():
    # CI, under load: the unit's server (73 GiB on GPU 0) died between the totals and the process list of one look;
    # counted as memory no process held, every trial of the run was judged against it and untrusted.
    dying = totalled(75 * GIB, (7, GIB))                 # totals with the server, list without it
    after = totalled(GIB, (7, GIB))
    assert needs_second_read(dying) and not needs_second_read(after)
    assert unlisted_bytes(settled_read(dying, after)[0]) == 0
    # memory another container holds is there in both reads, and stays
    held = totalled(10 * GIB, (7, GIB))
    assert unlisted_bytes(settled_read(held, totalled(10 * GIB, (7, GIB)))[0]) == 9 * GIB
    # per GPU: each keeps its own read with the less memory no process held; a GPU only one read has keeps it
    two = [dict(dying[0]), dict(totalled(10 * GIB, (8, GIB))[0], index=1)]
    again = [dict(totalled(10 * GIB, (8, GIB))[0], index=1, memory_used_bytes=12 * GIB), after[0]]
    assert [(gpu["index"], unlisted_bytes(gpu)) for gpu in settled_read(two, again)] == [(0, 0), (1, 9 * GIB)]
    assert settled_read(two, again[:1])[0] is two[0]


def test_memory_no_process_is_listed_for_counts_when_two_samples_in_a_row_agree():
    def watch(pairs):
        seen = {}
        for used, server in pairs:
            add_sample(seen, totalled(used * GIB, (100, server * GIB)), {0}, {100})
        return seen[0]
    # 1, 1, 5, 1, 1 GiB unlisted: the lone 5 is the server shrinking between the two reads of one sample.
    jitter = watch(((61, 60), (62, 61), (66, 61), (62, 61), (63, 62)))
    assert (jitter["unlisted_min_bytes"], jitter["unlisted_max_bytes"]) == (1 * GIB, 1 * GIB)
    # 1, 4, 4, 4 then 0, 0 GiB: another container's process held 4 GiB for three samples, then gave them back.
    held = watch(((61, 60), (72, 68), (79, 75), (80, 76), (76, 76), (77, 77)))
    assert (held["unlisted_min_bytes"], held["unlisted_max_bytes"]) == (0, 4 * GIB)
    assert held["max_bytes"] == 0       # no process outside the server is listed
    one = {}
    add_sample(one, totalled(70 * GIB, (100, 60 * GIB)), {0}, {100})
    assert one[0]["unlisted_max_bytes"] is None and one[0]["unlisted_min_bytes"] is None   # one sample: no pair


def test_memory_no_process_is_listed_for_that_appears_or_goes_away_makes_a_start_untrusted():
    def entry(low, high):
        return dict(watched(2, 0, 0), unlisted_min_bytes=low, unlisted_max_bytes=high)
    appeared = start_findings([entry(int(0.1 * GIB), 2 * GIB)], {2: 0}, unlisted_before={2: int(0.1 * GIB)})
    assert appeared == ["GPU 2 used up to 2.00 GiB that no process was listed for while the server started, against "
                        "0.10 GiB at the first look (a process of another container, or one NVML does not attribute): "
                        "P, A and the pool of this start are not what the next start will see"]
    gone = start_findings([entry(0, 3 * GIB)], {2: 0}, "during the load", unlisted_before={2: 3 * GIB})
    assert gone == ["memory no process was listed for on GPU 2 at the first look (3.00 GiB) was given back during "
                    "the load (0.00 GiB at the least): this start had memory the next one may not have"]


@pytest.mark.parametrize("low, high, before", [
    (int(0.3 * GIB), int(0.5 * GIB), {2: int(0.3 * GIB)}),   # a driver's reserve that moved by less than the slack
    (0, 8 * GIB, None),                                      # no first look to compare with
    (0, 8 * GIB, {3: 0}),                                    # the first look did not see this GPU
    (None, None, {2: 0}),                                    # one sample, or no totals
])
def test_unlisted_memory_that_did_not_move_or_cannot_be_compared_is_no_finding(low, high, before):
    seen = [dict(watched(2, 0, 0), unlisted_min_bytes=low, unlisted_max_bytes=high)]
    assert start_findings(seen, {2: 0}, unlisted_before=before) == []


def test_one_look_after_the_load_judges_the_watched_gpus_against_the_first_look():
    # kv_fingerprint's gpu_memory after a trial's load: GPU 1 holds 2 GiB of another process and GPU 2 gave 3 GiB
    # that no process was listed for back; GPU 5 (not the unit's) is not judged, nor is a GPU the first look missed.
    look = [{"index": 1, "other_bytes": 2 * GIB, "unlisted_bytes": 0, "other_processes": [{"pid": 7, "name": "x"}]},
            {"index": 2, "other_bytes": 0, "unlisted_bytes": 0, "other_processes": []},
            {"index": 5, "other_bytes": 9 * GIB, "unlisted_bytes": 9 * GIB, "other_processes": []}]
    before, unlisted = {1: 0, 2: 0, 5: 0}, {1: 0, 2: 3 * GIB, 5: 0}
    assert look_findings(look, [1, 2], before, unlisted) == [
        "another process held up to 2.00 GiB on GPU 1 between the load and the commit (pid 7 x), against 0.00 GiB at "
        "the first look: P, A and the pool of this start are not what the next start will see",
        "memory no process was listed for on GPU 2 at the first look (3.00 GiB) was given back between the load and "
        "the commit (0.00 GiB at the least): this start had memory the next one may not have"]
    assert len(look_findings(look, None, before, unlisted)) == 4   # GPUs unknown: every GPU is the unit's
    assert look_findings(look, [1, 2], {1: 2 * GIB, 2: 0}, {1: 0, 2: 0}) == []   # nothing moved
    assert look_findings(None, [1], before, unlisted) == []

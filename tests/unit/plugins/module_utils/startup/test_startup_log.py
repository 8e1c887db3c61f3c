# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""startup_log: the SGLang startup-log grammar on real logs (tests/fixtures/logs, sources in SOURCES.md).

Every number asserted here is printed in the fixture named by the test; the few inline texts are marked as
built for the test and reuse lines of those fixtures.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from ansible_collections.llmserve.sglang.plugins.module_utils.startup import startup_log as sl


LOGS = Path(__file__).resolve().parents[4] / "fixtures" / "logs"


def text(name: str) -> str:
    return (LOGS / name).read_text()


def facts(name: str) -> dict:
    return sl.parse_startup_log(text(name))


def rank(result: dict, tag: str) -> dict:
    return next(r for r in result["ranks"] if r["tag"] == tag)


ALL_FIXTURES = sorted(p.name for p in LOGS.glob("*.log"))


def test_fixture_directory_is_not_empty():
    assert len(ALL_FIXTURES) >= 12


@pytest.mark.parametrize("name", ALL_FIXTURES)
def test_every_fixture_parses_to_json(name):
    result = facts(name)
    assert json.loads(json.dumps(result)) == result
    for key in ("format", "boots", "pre_load_free_gib", "weights_gib", "post_load_free_gib", "kv_tokens",
                "kv_size_gib", "kv_dtype", "max_total_num_tokens", "max_running_requests", "context_len",
                "chunked_prefill_size", "max_prefill_tokens", "available_gpu_mem_gib", "cuda_graph_gib",
                "swa_tokens", "mamba_cache_size", "mamba_size_gib", "mem_fraction_static", "mem_fraction_static_logged",
                "mem_fraction_static_source", "ready", "failure", "server_args", "ranks", "tp_size"):
        assert key in result
    assert result["format"] in ("classic", "current")
    assert result["failure"] is None or set(result["failure"]) - {"oom"} == {"kind", "line", "advice"}


@pytest.mark.parametrize("name", ALL_FIXTURES)
def test_every_fixture_has_a_source_section(name):
    assert "## %s" % name in text("SOURCES.md")


def test_classic_tp1_qwen25_ready():
    result = facts("classic_tp1_qwen25_7b_h100.log")
    assert result["format"] == "classic"
    assert result["boots"] == 1 and result["ready"] is True and result["failure"] is None
    assert result["pre_load_free_gib"] == 78.58
    assert result["post_load_free_gib"] == 64.20
    assert result["weights_gib"] == 14.38
    assert result["kv_tokens"] == 20480
    assert result["kv_size_gib"] == pytest.approx(0.55 + 0.55)
    assert result["kv_dtype"] is None  # this version prints no "Using KV cache dtype" line
    assert result["memory_pool_end_free_gib"] == 62.91
    assert result["cuda_graph_gib"] == 0.09
    assert (result["max_total_num_tokens"], result["chunked_prefill_size"], result["max_prefill_tokens"],
            result["max_running_requests"], result["context_len"]) == (20480, 8192, 16384, 128, 32768)
    assert result["available_gpu_mem_gib"] == 62.72
    assert result["tp_size"] == 1 and result["ranks"][0]["tag"] == ""
    assert result["ranks"][0]["weights_type"] == "Qwen2ForCausalLM"
    assert result["swa_tokens"] is None and result["draft_weights_gib"] is None


def test_classic_tp1_server_args():
    args = facts("classic_tp1_qwen25_7b_h100.log")["server_args"]
    assert args["model_path"] == "Qwen/Qwen2.5-7B-Instruct"
    assert args["served_model_name"] == "Qwen/Qwen2.5-7B-Instruct"
    assert args["tp_size"] == 1 and args["dp_size"] == 1
    assert args["mem_fraction_static"] == 0.874
    assert args["kv_cache_dtype"] == "auto"
    assert args["page_size"] == 1
    assert args["context_length"] is None
    assert args["max_total_tokens"] == 20480
    assert args["speculative_algorithm"] is None
    assert args["enable_dp_attention"] is False
    assert args["chunked_prefill_size"] == 8192


def test_eagle3_draft_is_kept_apart():
    result = facts("classic_tp1_llama31_8b_eagle3_h100.log")
    assert result["ready"] is True and result["failure"] is None and result["boots"] == 1
    # target: first Load weight begin/end; the draft's "Load weight begin. avail mem=59.60 GB" is not P
    assert result["pre_load_free_gib"] == 78.58
    assert result["post_load_free_gib"] == 63.48
    assert result["weights_gib"] == 15.11
    assert result["kv_tokens"] == 20480 and result["kv_size_gib"] == 2.50
    r = result["ranks"][0]
    assert r["weights_type"] == "LlamaForCausalLM"
    assert r["draft_weights_type"] == "LlamaForCausalLMEagle3"
    assert r["draft_pre_load_free_gib"] == 59.60
    assert result["draft_weights_gib"] == 2.15
    assert result["draft_kv_tokens"] == 20480 and result["draft_kv_size_gib"] == 0.08
    # graphs: target 0.54 + draft -0.14 + draft extend 0.11
    assert r["cuda_graphs"] == {"decode": 0.54, "draft": -0.14, "draft extend": 0.11}
    assert result["cuda_graph_gib"] == pytest.approx(0.51)
    assert result["available_gpu_mem_gib"] == 58.08
    args = result["server_args"]
    assert args["speculative_algorithm"] == "EAGLE3"
    assert args["speculative_draft_model_path"] == "jamesliu1/sglang-EAGLE3-Llama-3.1-Instruct-8B"
    assert (args["speculative_num_steps"], args["speculative_eagle_topk"], args["speculative_num_draft_tokens"]) \
        == (5, 8, 32)
    assert args["mem_fraction_static"] == 0.6
    assert args["cuda_graph_max_bs"] == 4


def test_field_case_reconstruction():
    result = facts("field_kimi_k25_rtx6000_tp8_eagle3.log")
    assert result["tp_size"] == 8 and [r["tag"] for r in result["ranks"]] == ["TP%d" % i for i in range(8)]
    assert result["pre_load_free_gib"] == 94.04
    assert result["weights_gib"] == 72.33
    assert result["post_load_free_gib"] == 21.71
    assert result["kv_tokens"] == 159277 and result["kv_size_gib"] == 10.42
    assert result["kv_dtype"] == "torch.bfloat16"
    assert result["draft_weights_gib"] == 1.55
    assert result["available_gpu_mem_gib"] == 7.43
    assert result["max_total_num_tokens"] == 159277
    assert result["server_args"]["mem_fraction_static"] == 0.88
    assert result["server_args"]["speculative_algorithm"] == "EAGLE3"
    assert result["ready"] is True and result["failure"] is None


def test_classic_tp8_grok2():
    result = facts("classic_tp8_grok2_fp8_h100_ready.log")
    assert result["format"] == "classic" and result["ready"] is True and result["failure"] is None
    assert result["tp_size"] == 8
    assert result["pre_load_free_gib"] == 77.43  # only TP0 prints the load lines in this version
    assert result["post_load_free_gib"] == 40.69 and result["weights_gib"] == 36.73
    assert result["kv_tokens"] == 903439
    assert result["kv_size_gib"] == pytest.approx(13.79 * 2)
    assert all(r["kv_tokens"] == 903439 for r in result["ranks"])
    assert result["cuda_graph_gib"] == 0.89
    assert result["max_running_requests"] == 3529 and result["context_len"] == 131072
    assert result["available_gpu_mem_gib"] == 10.26
    args = result["server_args"]
    assert args["tp_size"] == 8 and args["mem_fraction_static"] == 0.831 and args["quantization"] == "fp8"
    assert args["max_queued_requests"] == 9223372036854775807
    assert args["custom_weight_loader"] == [] and args["json_model_override_args"] == "{}"
    assert "enable_flashinfer_mxfp4_moe" in args  # the last key: the whole repr was read


def test_mla_tp8_kimi_min_over_ranks_and_crash():
    result = facts("v058_tp8_kimi_k25_mi355x_capture_crash.log")
    assert result["format"] == "current"  # "Load weight end. elapsed=..."
    assert result["tp_size"] == 8
    assert rank(result, "TP1")["pre_load_free_gib"] == 283.96
    assert result["pre_load_free_gib"] == 283.53  # TP3, the smallest
    assert rank(result, "TP1")["post_load_free_gib"] == 210.38
    assert result["post_load_free_gib"] == 209.96  # TP3 and TP2
    assert result["weights_gib"] == 73.58
    assert rank(result, "TP0")["load_elapsed_s"] == 618.04
    assert result["kv_tokens"] == 2454421 and result["kv_size_gib"] == 160.63
    assert result["kv_dtype"] == "torch.bfloat16"
    assert result["memory_pool_end_free_gib"] == 45.23
    assert result["cuda_graph_gib"] is None and result["max_total_num_tokens"] is None
    assert result["ready"] is False
    assert result["failure"]["kind"] == "crash"
    assert result["failure"]["line"] == "TypeError: cannot unpack non-iterable ForwardMetadata object"
    assert result["server_args"]["mem_fraction_static"] == 0.8260405859375
    assert result["server_args"]["cuda_graph_bs"][:4] == [1, 2, 4, 8]
    assert result["server_args"]["mm_process_config"] == {}


def test_fp8_kv_cache_glm5():
    result = facts("v058_tp8_glm5_fp8kv_mi355x_capture_crash.log")
    assert result["kv_dtype"] == "torch.float8_e4m3fn"
    assert result["server_args"]["kv_cache_dtype"] == "fp8_e4m3"
    assert result["pre_load_free_gib"] == 283.48
    assert result["post_load_free_gib"] == 193.90
    assert result["weights_gib"] == 89.58
    assert result["kv_tokens"] == 3262823 and result["kv_size_gib"] == 186.77
    assert result["memory_pool_end_free_gib"] == 3.88
    assert result["failure"]["kind"] == "crash"


def test_dp_tp_ep_tags():
    result = facts("current_dp4_tp4_ep4_qwen3moe_excerpt.log")
    assert [r["tag"] for r in result["ranks"]] == ["DP0 TP0 EP0", "DP1 TP1 EP1", "DP2 TP2 EP2", "DP3 TP3 EP3"]
    # the DP1 record follows a tqdm bar on the same line
    assert rank(result, "DP1 TP1 EP1")["post_load_free_gib"] == 121.90
    assert result["post_load_free_gib"] == 121.90 and result["weights_gib"] == 16.39
    assert result["pre_load_free_gib"] is None  # the excerpt starts after "Load weight begin"
    assert result["kv_tokens"] == 1029388 and result["kv_size_gib"] == pytest.approx(94.24)
    assert result["memory_pool_end_free_gib"] == 27.57
    assert result["failure"] is None and result["ready"] is False  # truncated, not failed


def test_current_reference_qwen3_8b():
    result = facts("current_tp1_qwen3_8b_reference.log")
    assert result["format"] == "current"
    assert result["pre_load_free_gib"] == 177.57 and result["post_load_free_gib"] == 162.30
    assert result["weights_gib"] == 15.28
    assert result["kv_tokens"] == 992896 and result["kv_size_gib"] == pytest.approx(136.36)
    assert result["ranks"][0]["cuda_graphs"] == {"decode": 0.60, "piecewise": 2.32}
    assert result["cuda_graph_gib"] == pytest.approx(2.92)
    assert result["max_total_num_tokens"] == 992896 and result["chunked_prefill_size"] == 16384
    assert result["max_running_requests"] is None  # elided with "..." in the source
    assert result["server_args"] == {"model_path": "Qwen/Qwen3-8B"}  # ServerArgs(model_path=..., ...)
    assert result["ready"] is True


def test_constructed_current_format_matches_the_real_boot():
    real = facts("current_tp1_qwen3_8b_reference.log")
    built = facts("constructed_current_tp1_qwen3_8b.log")
    for key in ("pre_load_free_gib", "post_load_free_gib", "weights_gib", "kv_tokens", "kv_size_gib",
                "kv_dtype", "memory_pool_end_free_gib", "cuda_graph_gib", "post_capture_free_gib",
                "max_total_num_tokens", "ready"):
        assert built[key] == real[key], key
    assert built["format"] == "current"
    assert built["ranks"][0]["cuda_graphs"] == {"target decode": 0.60, "target prefill": 2.32}
    assert built["ranks"][0]["kv_dtype"] == "torch.bfloat16"  # from "KV Cache is allocated. dtype: ..."


def test_init_oom_current_valueerror():
    result = facts("current_init_oom_glm47_flash_rtx5090_excerpt.log")
    assert result["failure"]["kind"] == "init_oom"
    assert result["failure"]["line"].startswith(
        "ValueError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.85.")
    assert "Raise --mem-fraction-static" in result["failure"]["advice"]
    assert result["pre_load_free_gib"] == 30.06 and result["post_load_free_gib"] == 0.00
    assert result["weights_gib"] == 30.06
    assert result["server_args"]["mem_fraction_static"] == 0.85  # after a "..." elision
    assert result["server_args"]["context_length"] == 32768
    assert result["server_args"]["tool_call_parser"] == "glm47"


def test_init_oom_negative_profile_with_dp_tags():
    result = facts("init_oom_negative_profile_deepseek_r1_dp8_mi300x.log")
    assert result["failure"]["kind"] == "init_oom"
    assert "profiled value -561981" in result["failure"]["line"]
    assert result["failure"]["line"].startswith("[2025-07-02 07:41:59 DP0 TP0]")
    assert result["post_load_free_gib"] == 21.73 and result["weights_gib"] == 166.59


def test_capture_oom():
    result = facts("capture_oom_dsv4_pro_fp8_h200_tp16.log")
    assert result["failure"]["kind"] == "capture_oom"
    assert result["failure"]["line"] == "Exception: Capture cuda graph failed: CUDA out of memory."
    assert "Lower --mem-fraction-static" in result["failure"]["advice"]
    assert result["ready"] is False and result["kv_tokens"] is None


def test_unbalanced_memory():
    result = facts("unbalanced_memory_deepseek_nextn_tp.log")
    assert result["failure"]["kind"] == "unbalanced_memory"
    assert result["failure"]["line"].startswith("ValueError: The memory capacity is unbalanced.")


def test_nccl_error_proof_is_the_exception_not_the_source_line():
    result = facts("nccl_error_init_excerpt.log")
    assert result["failure"]["kind"] == "nccl_error"
    assert result["failure"]["line"] == \
        "RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)"


def _ready_log_then(*lines: str) -> str:
    """A real ready boot (classic_tp1_qwen25_7b_h100.log) followed by lines built for the test."""
    return text("classic_tp1_qwen25_7b_h100.log") + "\n".join(lines) + "\n"


OOM_LINE = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.93 GiB. GPU 0 has a total capacity "
            "of 79.14 GiB of which 3.79 GiB is free.")


def test_runtime_oom_after_ready():
    log = _ready_log_then(
        "[2025-08-11 21:40:00] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 1, in run_scheduler_process',
        "    scheduler.event_loop_normal()",
        OOM_LINE,
        "[2025-08-11 21:40:00] Received sigquit from a child process. It usually means the child failed.",
    )
    result = sl.parse_startup_log(log)
    assert result["ready"] is True
    assert result["failure"]["kind"] == "runtime_oom"
    assert result["failure"]["line"] == OOM_LINE
    assert result["kv_tokens"] == 20480  # the facts of the boot are kept


def test_crash_after_ready():
    result = sl.parse_startup_log(_ready_log_then(
        "[2026-04-02 09:28:25] Scheduler hit an exception: Traceback (most recent call last):",
        "AttributeError: 'list' object has no attribute 'tolist'",
    ))
    assert result["failure"] == {"kind": "crash", "line": "AttributeError: 'list' object has no attribute 'tolist'",
                                 "advice": sl.FAILURE_KINDS["crash"]}


def test_warnings_before_ready_are_not_failures():
    lines = text("classic_tp1_qwen25_7b_h100.log").splitlines()
    lines.insert(3, "[2025-08-11 21:33:44] The memory capacity is unbalanced. Some GPUs may be occupied by other "
                    "processes. min_per_gpu_memory=70.1")
    lines.insert(4, "host:1:1 [0] NCCL INFO NCCL WARN something recoverable")
    assert sl.parse_startup_log("\n".join(lines))["failure"] is None


def _boot_until(name: str, stop: str) -> list:
    lines = text(name).splitlines()
    return lines[:next(i for i, line in enumerate(lines) if stop in line) + 1]


def test_benign_traceback_followed_by_progress_is_not_a_failure():
    lines = text("classic_tp1_qwen25_7b_h100.log").splitlines()
    lines[3:3] = ["Traceback (most recent call last):", '  File "/x/torchcodec/__init__.py", line 1, in <module>',
                  "    import y", "ImportError: libavutil.so.58: cannot open shared object file"]
    assert sl.parse_startup_log("\n".join(lines))["failure"] is None


def test_truncated_boot_has_no_failure_and_nulls():
    lines = _boot_until("classic_tp8_grok2_fp8_h100_ready.log", "Load weight begin")
    result = sl.parse_startup_log("\n".join(lines))
    assert result["failure"] is None and result["ready"] is False
    assert result["pre_load_free_gib"] == 77.43
    assert result["post_load_free_gib"] is None and result["kv_tokens"] is None
    assert result["max_total_num_tokens"] is None and result["cuda_graph_gib"] is None


def test_journal_last_boot_wins():
    result = facts("journal_two_boots_cat.log")
    assert result["boots"] == 2
    assert result["server_args"]["model_path"] == "Qwen/Qwen2.5-7B-Instruct"
    assert result["ready"] is True and result["failure"] is None
    assert result["pre_load_free_gib"] == 78.58 and result["kv_tokens"] == 20480


def test_journal_boots_split_on_systemd_lines():
    boots = sl.split_boots(text("journal_two_boots_cat.log").splitlines())
    assert len(boots) == 2
    assert sl.classify_failure(boots[0])["kind"] == "init_oom"
    assert boots[1][0] == "Starting sglang.service - SGLang server..."


def test_journald_prefixes_and_pid():
    # the same two boots as `journalctl -o short` prints them (prefixes built for the test)
    prefixed = []
    for line in text("journal_two_boots_cat.log").splitlines():
        if "sglang.service" in line and not line.startswith("["):
            prefixed.append("Nov 30 00:01:02 gpu01 systemd[1]: " + line)
        else:
            prefixed.append("Nov 30 00:01:02 gpu01 sglang-sim[4242]: " + line)
    result = sl.parse_startup_log("\n".join(prefixed))
    assert result["boots"] == 2 and result["ready"] is True
    assert result["pre_load_free_gib"] == 78.58 and result["server_args"]["mem_fraction_static"] == 0.874


def test_failed_boot_then_restart_without_server_args():
    # a failed start, then a restart whose first record is "Load weight begin" (no server_args line)
    first = _boot_until("classic_tp1_qwen25_7b_h100.log", "Load weight begin")
    first += ["[2025-08-11 21:33:46] Scheduler hit an exception: Traceback (most recent call last):", OOM_LINE,
              "[2025-08-11 21:33:46] Received sigquit from a child process. It usually means the child failed."]
    second = [line for line in text("classic_tp1_qwen25_7b_h100.log").splitlines() if "server_args" not in line]
    result = sl.parse_startup_log("\n".join(first + second))
    assert result["boots"] == 2 and result["ready"] is True and result["failure"] is None
    assert sl.classify_failure(sl.split_boots(first + second)[0])["kind"] == "weights_oom"


def test_several_launches_in_one_log():
    two = text("classic_tp1_llama31_8b_eagle3_h100.log") + text("classic_tp1_qwen25_7b_h100.log")
    result = sl.parse_startup_log(two)
    assert result["boots"] == 2 and result["server_args"]["model_path"] == "Qwen/Qwen2.5-7B-Instruct"
    assert result["draft_weights_gib"] is None


def test_millisecond_timestamps_and_new_tags():
    log = "\n".join([
        "[2026-05-01 10:00:00.123 ATTN_CP0 TP0] Load weight begin. avail mem=93.61 GB",
        "[2026-05-01 10:00:00.456 ATTN_CP1 TP1] Load weight begin. avail mem=93.56 GB",
        "[2026-05-01 10:00:09.001 ATTN_CP0 TP0] Load weight end. elapsed=9.00 s, type=X, quant=fp8, fmt=e4m3, "
        "avail mem=60.00 GB, mem usage=33.61 GB.",
        "[2026-05-01 10:00:09.002 ATTN_CP1 TP1] Load weight end. elapsed=9.00 s, type=X, quant=fp8, fmt=e4m3, "
        "avail mem=59.50 GB, mem usage=34.06 GB.",
    ])
    result = sl.parse_startup_log(log)
    assert [r["tag"] for r in result["ranks"]] == ["ATTN_CP0 TP0", "ATTN_CP1 TP1"]
    assert result["pre_load_free_gib"] == 93.56 and result["post_load_free_gib"] == 59.50
    assert result["weights_gib"] == 34.06 and result["format"] == "current"


def test_sliding_window_line_any_case():
    for line in ("[2026-01-01 00:00:00] Use sliding window memory pool. full_layer_tokens=1710, swa_layer_tokens=1368",
                 "[2026-01-01 00:00:00] Use Sliding window memory pool. full_layer_tokens=1710, swa_layer_tokens=1368"):
        result = sl.parse_startup_log(line)
        assert (result["full_tokens"], result["swa_tokens"]) == (1710, 1368)


def test_labelled_and_va_upper_bound_kv_lines():
    log = "\n".join([
        "[2026-01-01 00:00:00 TP0] KV Cache VA upper bound. dtype: torch.bfloat16, #tokens: 1000, KV size: 1.00 GB",
        "[2026-01-01 00:00:00 TP0] draft KV Cache is allocated. dtype: torch.bfloat16, #tokens: 1000, KV size: 0.10 GB",
    ])
    result = sl.parse_startup_log(log)
    assert result["kv_tokens"] == 1000 and result["kv_size_gib"] == 1.0
    assert result["draft_kv_size_gib"] == 0.10


@pytest.mark.parametrize("bad", ["", "   \n\n", None])
def test_empty_text_is_an_error(bad):
    with pytest.raises(sl.StartupLogError, match="empty"):
        sl.parse_startup_log(bad)


def test_unrelated_text_is_an_error():
    with pytest.raises(sl.StartupLogError, match=r"no SGLang startup record .*3 lines.*nginx"):
        sl.parse_startup_log("nginx: started\nsome other\nlog text\n")
    assert issubclass(sl.StartupLogError, ValueError)


def test_systemd_only_text_is_an_error():
    with pytest.raises(sl.StartupLogError):
        sl.parse_startup_log("Started sglang.service - SGLang server.\nStopped sglang.service - SGLang server.\n")


def test_early_failure_is_not_an_error():
    result = sl.parse_startup_log(
        'Traceback (most recent call last):\n  File "/sgl-workspace/sglang/python/sglang/launch_server.py", line 32, '
        "in <module>\n    server_args = prepare_server_args(sys.argv[1:])\nKeyError: 'glm_moe_dsa'\n")
    assert result["failure"]["kind"] == "crash" and result["failure"]["line"] == "KeyError: 'glm_moe_dsa'"
    assert result["pre_load_free_gib"] is None and result["tp_size"] == 0


@pytest.mark.parametrize("prefix", ["Feb 26 16:41:24 mi355x-01 python3[242]: ",
                                    "2026-02-26T16:41:24+0000 mi355x-01 sglang-sim[242]: "])
def test_journald_prefixed_tracebacks(prefix):
    # the Kimi capture crash and the capture OOM as `journalctl -o short` / `-o short-iso` would print them
    # (prefixes built for the test)
    for name, kind, proof in (
            ("v058_tp8_kimi_k25_mi355x_capture_crash.log", "crash",
             "TypeError: cannot unpack non-iterable ForwardMetadata object"),
            ("capture_oom_dsv4_pro_fp8_h200_tp16.log", "capture_oom",
             "Exception: Capture cuda graph failed: CUDA out of memory."),
            ("nccl_error_init_excerpt.log", "nccl_error",
             "RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)")):
        log = "\n".join(prefix + line for line in text(name).splitlines())
        result = sl.parse_startup_log(log)
        assert result["failure"]["kind"] == kind, name
        assert result["failure"]["line"] == proof, name
    kimi = sl.parse_startup_log("\n".join(prefix + line for line in
                                          text("v058_tp8_kimi_k25_mi355x_capture_crash.log").splitlines()))
    assert kimi["pre_load_free_gib"] == 283.53 and kimi["tp_size"] == 8


# torch 2.x, as the simulator prints it (tools/sglang_sim logs.cuda_oom_message), cut after the free memory


# torch 1.x


def test_runtime_oom_numbers_come_from_after_ready():
    log = _ready_log_then(
        "[2025-08-11 21:40:00] Scheduler hit an exception: Traceback (most recent call last):",
        OOM_LINE,
        "[2025-08-11 21:40:00] Received sigquit from a child process. It usually means the child failed.",
    )
    failure = sl.parse_startup_log(log)["failure"]
    assert failure["kind"] == "runtime_oom"
    assert failure["oom"] == {"tried_gib": 4.93, "free_gib": 3.79, "gpu": 0}
    # an OOM message before "ready" describes another moment: a bare OOM after it gets no numbers
    lines = text("classic_tp1_qwen25_7b_h100.log").splitlines()
    lines.insert(3, OOM_LINE)
    lines.append("RuntimeError: CUDA error: out of memory")
    failure = sl.classify_failure(lines)
    assert failure["kind"] == "runtime_oom" and "oom" not in failure


def test_oom_message_reflowed_over_lines_gives_no_numbers():
    # capture_oom_dsv4_pro_fp8_h200_tp16.log: the user split torch's one-line message at its sentences
    failure = facts("capture_oom_dsv4_pro_fp8_h200_tp16.log")["failure"]
    assert failure["kind"] == "capture_oom" and "oom" not in failure


def test_hybrid_gdn_boot_reads_the_mamba_state_pool():
    result = facts("hybrid_gdn_qwen35_9b_tp2_rtx4090.log")
    assert result["failure"] is None and result["tp_size"] == 2
    assert (result["pre_load_free_gib"], result["post_load_free_gib"]) == (22.93, 14.08)
    assert result["mamba_cache_size"] == 186 and result["mamba_size_gib"] == 4.48
    assert result["kv_tokens"] == 327310 and result["kv_size_gib"] == 5.0
    assert result["max_total_num_tokens"] == 327310 and result["max_running_requests"] == 62
    # no server_args line in this excerpt: f is not known from the log
    assert result["mem_fraction_static"] is None and result["mem_fraction_static_source"] is None


def test_a_model_without_mamba_layers_has_no_state_pool():
    # "Mamba selective_state_update backend initialized" is printed for any model: not a state pool
    result = facts("shared_gpu_llama31_8b_lora_docs_ci.log")
    assert result["mamba_cache_size"] is None and result["mamba_size_gib"] is None


@pytest.mark.parametrize("name", ["multimodal_reduce_qwen25vl7b_docs_ci.log",
                                  "multimodal_reduce_qwen25vl7b_shared_gpu_docs_ci.log"])
def test_multimodal_reduction_is_the_fraction_the_pool_used(name):
    result = facts(name)
    assert result["mem_fraction_static"] == 0.787
    assert result["mem_fraction_static_logged"] == 0.874
    assert result["mem_fraction_static_source"] == "multimodal_reduction"


def test_fraction_from_server_args():
    result = facts("classic_tp1_qwen25_7b_h100.log")
    assert result["mem_fraction_static"] == result["mem_fraction_static_logged"] == 0.874
    assert result["mem_fraction_static_source"] == "server_args"

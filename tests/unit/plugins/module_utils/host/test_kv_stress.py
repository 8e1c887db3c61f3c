# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""kv_stress: the pure parts (server limits, request planning, error classification, summarising)."""
from __future__ import annotations

import http.client
import socket
import urllib.error

import pytest

from ansible_collections.llmserve.sglang.plugins.module_utils.host.kv_stress import (
    GIB,
    KvStressError,
    classify_error,
    merge_runs,
    min_free_per_gpu,
    plan_requests,
    sample_wait,
    server_limits,
    summarize_run,
)

# The field host at 0.88 as its /get_server_info reports it (only the keys read).
FIELD_INFO = {"max_total_num_tokens": 159282, "max_running_requests": None, "context_length": 262144,
              "max_req_input_len": 262138, "chunked_prefill_size": 8192,
              "internal_states": [{"effective_max_running_requests_per_dp": 48}]}


def _limits(**changes):
    limits = {"pool_tokens": 159282, "max_running_requests": 48, "context_length": 262144,
              "max_input_tokens": 262138, "chunk_tokens": 8192}
    limits.update(changes)
    return limits


def test_server_limits_reads_the_effective_running_requests():
    assert server_limits(FIELD_INFO) == _limits()


def test_server_limits_defaults_and_errors():
    limits = server_limits({"max_total_num_tokens": 1000, "max_running_requests": 8})
    assert limits == {"pool_tokens": 1000, "max_running_requests": 8, "context_length": None,
                      "max_input_tokens": None, "chunk_tokens": 8192}
    for info in ({}, {"max_total_num_tokens": 0}, {"max_total_num_tokens": True}, [1]):
        with pytest.raises(KvStressError):
            server_limits(info)


def test_plan_fills_the_pool_with_prompts_longer_than_a_chunk():
    plan = plan_requests(_limits(), 0.95, 32)
    assert plan["target_tokens"] == int(159282 * 0.95)
    assert plan["input_tokens"] > 8192
    assert plan["requests"] <= 48
    assert plan["planned_tokens"] == plan["requests"] * (plan["input_tokens"] + 32)
    assert 0.94 * 159282 <= plan["planned_tokens"] <= plan["target_tokens"]


def test_plan_is_bounded_by_the_context_and_the_running_requests():
    plan = plan_requests(_limits(context_length=4096, max_input_tokens=None), 0.95, 32)
    assert plan["input_tokens"] + 32 <= 4095
    assert plan["requests"] == 37                       # as many as fill the target, each as long as the context allows
    assert 0.94 * 159282 <= plan["planned_tokens"] <= plan["target_tokens"]
    plan = plan_requests(_limits(context_length=2048, max_input_tokens=None), 0.95, 32)
    assert plan["requests"] == 48 and plan["input_tokens"] + 32 == 2047    # every slot: the pool cannot be filled
    plan = plan_requests(_limits(max_running_requests=4), 0.9, 64)
    assert plan["requests"] == 4 and plan["input_tokens"] == int(159282 * 0.9) // 4 - 64
    plan = plan_requests(_limits(), 0.5, 32, concurrency=2)
    assert plan["requests"] == 2 and plan["planned_tokens"] <= 0.5 * 159282


def test_plan_with_a_tiny_pool_sends_one_request():
    plan = plan_requests(_limits(pool_tokens=1000, chunk_tokens=8192), 0.95, 32)
    assert plan["requests"] == 1 and plan["input_tokens"] == 950 - 32


@pytest.mark.parametrize("kwargs", [{"fill_ratio": 0}, {"fill_ratio": 1.2}, {"max_new_tokens": 0},
                                    {"concurrency": 0}, {"max_new_tokens": 300000}])
def test_plan_rejects_bad_input(kwargs):
    with pytest.raises(KvStressError):
        plan_requests(_limits(), **kwargs)


# Named ids: pytest would read each error's __name__ for one, and Python 3.9's HTTPError without a body raises
# KeyError there (its tempfile wrapper has no file).
@pytest.mark.parametrize("exc, kind", [
    (urllib.error.URLError(ConnectionRefusedError(111, "Connection refused")), "server_down"),
    (ConnectionResetError(104, "Connection reset by peer"), "server_down"),
    (http.client.RemoteDisconnected("Remote end closed connection without response"), "server_down"),
    (BrokenPipeError(32, "Broken pipe"), "server_down"),
    (socket.timeout("timed out"), "timeout"),
    (urllib.error.URLError(socket.timeout("timed out")), "timeout"),
    (urllib.error.HTTPError("http://x/generate", 401, "Unauthorized", {}, None), "http"),
    (ValueError("Expecting value"), "other"),
], ids=["refused", "reset", "disconnected", "broken_pipe", "timeout", "url_timeout", "http_401", "bad_json"])
def test_classify_error(exc, kind):
    got, message = classify_error(exc)
    assert got == kind and message


def test_min_free_per_gpu_skips_unknown_values():
    samples = [[{"index": 0, "memory_free_bytes": 5 * GIB}, {"index": 1, "memory_free_bytes": None}],
               [{"index": 0, "memory_free_bytes": 4 * GIB}, {"index": 1, "memory_free_bytes": 6 * GIB}]]
    assert min_free_per_gpu(samples) == {0: 4 * GIB, 1: 6 * GIB}


PLAN = {"requests": 2, "input_tokens": 100, "max_new_tokens": 10, "target_tokens": 220, "planned_tokens": 220}


def _ok(tokens=110):
    return {"ok": True, "tokens": tokens, "kind": None, "message": None}


def test_summary_of_a_run_that_held():
    samples = [[{"index": 0, "memory_free_bytes": 3 * GIB}], [{"index": 0, "memory_free_bytes": 2 * GIB}]]
    result = summarize_run(232, PLAN, [_ok(), _ok(), _ok(), _ok()], samples, True, 2.0, peak_tokens_seen=150)
    assert result["held"] and result["failure_reason"] is None
    assert result["requests_completed"] == 4 and result["errors"] == {"count": 0, "messages": []}
    assert result["peak_tokens_held"] == 220                   # the first round beats what /get_load showed
    assert result["fill_reached"] == round(220 / 232.0, 4)
    assert result["min_free_gib_per_gpu"] == {"0": 2.0} and result["min_free_gib"] == 2.0
    assert result["samples"] == 2 and result["throughput_tokens_per_s"] == 220.0
    assert summarize_run(232, PLAN, [_ok()], [], True, 1.0, peak_tokens_seen=300)["peak_tokens_held"] == 232


def test_summary_of_a_crash():
    down = {"ok": False, "tokens": 0, "kind": "server_down", "message": "ConnectionRefusedError: refused"}
    result = summarize_run(232, PLAN, [down, down], [], False, 0.5, failure_reason="the server stopped answering")
    assert not result["held"] and not result["server_alive_at_end"]
    assert result["failure_reason"] == "the server stopped answering"
    assert result["errors"]["count"] == 2 and result["peak_tokens_held"] == 0 and result["min_free_gib"] is None


def test_summary_of_errors_from_a_live_server():
    refused = {"ok": False, "tokens": 0, "kind": "http", "message": "HTTP 400: Bad Request"}
    result = summarize_run(232, PLAN, [_ok(), refused], [], True, 1.0)
    assert not result["held"] and result["failure_reason"].startswith("1 of 2 requests failed: HTTP 400")
    result = summarize_run(232, PLAN, [_ok(), _ok()], [], False, 1.0)
    assert not result["held"] and "not answering" in result["failure_reason"]


def test_servers_loaded_at_once_hold_only_together():
    main = {"held": True, "failure_reason": None, "min_free_gib": 3.0, "min_free_gib_per_gpu": {"0": 3.0, "1": 3.5}}
    held = {"held": True, "failure_reason": None, "min_free_gib": 2.5, "min_free_gib_per_gpu": {"0": 2.5, "1": 4.0},
            "pool_tokens": 100, "fill_reached": 0.95}
    both = merge_runs(main, {"http://127.0.0.1:30002": held})
    assert both["held"] and both["min_free_gib_per_gpu"] == {"0": 2.5, "1": 3.5} and both["min_free_gib"] == 2.5
    assert both["also"]["http://127.0.0.1:30002"]["pool_tokens"] == 100
    died = dict(held, held=False, failure_reason="the server died under load")
    one = merge_runs(main, {"http://127.0.0.1:30002": died})
    assert not one["held"]
    assert one["failure_reason"] == ("http://127.0.0.1:30002, loaded at the same time on the same GPUs: the server "
                                     "died under load")
    assert main["held"] and "also" not in main    # not changed in place


@pytest.mark.parametrize("interval, took, wait", [
    (0.1, 0.002, 0.098),    # NVML: the interval
    (0.1, 0.08, 0.32),      # nvidia-smi, two processes per sample: four times what the sample took
    (0.1, 0.3, 1.2),        # a slow nvidia-smi on a busy host
    (2.0, 0.3, 1.7),        # an interval longer than that: the interval
])
def test_the_sampler_spends_at_most_a_fifth_of_its_time_sampling(interval, took, wait):
    assert sample_wait(interval, took) == pytest.approx(wait)
    assert took / (took + sample_wait(interval, took)) <= 0.2 + 1e-9

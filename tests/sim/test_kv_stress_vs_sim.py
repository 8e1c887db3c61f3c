# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""kv_stress against the simulator: the field host holds at 0.88 with the pool filled, dies at 0.95, API key honoured."""
from __future__ import annotations

import time

import pytest
import simlib

from ansible_collections.llmserve.sglang.plugins.module_utils.host.nvidia_smi import probe_nvidia_smi
from ansible_collections.llmserve.sglang.plugins.module_utils.host.kv_stress import KvStressError, run_stress


def _sampler(sim):
    runner = sim.smi_runner()
    return lambda: probe_nvidia_smi(runner)["gpus"]


def _free_gib(sim):
    return [gpu["memory_free_bytes"] / float(simlib.GIB) for gpu in _sampler(sim)()]


def test_field_at_088_holds_with_the_pool_filled(make_sim):
    sim = make_sim("field")
    server = sim.start(simlib.launch_args("field", mem_fraction_static=0.88))
    assert server.wait_ready(), server.log
    idle = _free_gib(sim)
    result = run_stress(server.url, duration=1.5, request_timeout=30, probe=_sampler(sim), seed=1)
    assert result["held"], result
    assert result["failure_reason"] is None and result["errors"]["count"] == 0
    assert result["server_alive_at_end"] and server.proc.poll() is None
    assert result["pool_tokens"] == 159282
    assert result["fill_reached"] >= 0.9 and result["peak_tokens_held"] >= 0.9 * result["pool_tokens"]
    assert result["plan"]["input_tokens"] > 8192                 # a full prefill chunk every time
    assert result["requests_completed"] >= result["plan"]["requests"] and result["rounds"] >= 1
    assert result["samples"] >= 3 and result["throughput_tokens_per_s"] > 0
    assert 1.5 <= result["duration_s"] < 20
    # Activations of a full chunk (~3.1 GiB) stay cached: the least free under load is what smi shows afterwards.
    assert min(idle) - result["min_free_gib"] > 2.5
    after = _free_gib(sim)
    assert abs(min(after) - result["min_free_gib"]) < 0.05
    for index, least in result["min_free_gib_per_gpu"].items():
        assert least < idle[int(index)] - 2.5
        assert abs(least - after[int(index)]) < 0.05


def test_field_at_095_dies_under_load_and_says_so(make_sim):
    sim = make_sim("field")
    server = sim.start(simlib.launch_args("field", mem_fraction_static=0.95))
    assert server.wait_ready(), server.log
    started = time.time()
    result = run_stress(server.url, duration=30, request_timeout=30, probe=_sampler(sim), seed=2)
    assert time.time() - started < 15                            # not the 30 s duration, nor a request timeout
    assert not result["held"] and not result["server_alive_at_end"]
    assert "stopped answering" in result["failure_reason"]
    assert result["errors"]["count"] >= 1 and result["requests_completed"] == 0
    assert server.wait_exit(10) not in (None, 0)


def test_api_key_is_sent(make_sim):
    sim = make_sim("field")
    server = sim.start(simlib.launch_args("field", api_key="s3cret"))
    assert server.wait_ready(), server.log
    with pytest.raises(KvStressError, match="401"):
        run_stress(server.url, rounds=1, request_timeout=30)
    with pytest.raises(KvStressError, match="401"):
        run_stress(server.url, api_key="wrong", rounds=1, request_timeout=30)
    result = run_stress(server.url, api_key="s3cret", rounds=1, fill_ratio=0.5, request_timeout=30, seed=3)
    assert result["held"] and result["rounds"] == 1 and result["requests_completed"] == result["plan"]["requests"]
    assert result["samples"] == 0 and result["min_free_gib"] is None     # no probe given

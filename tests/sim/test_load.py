# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Under load: the KV pool fills, activations grow, too high a --mem-fraction-static dies; the oracle agrees."""
from __future__ import annotations

import json
import threading
import time

import pytest
import simlib

from ansible_collections.llmserve.sglang.plugins.module_utils.watch import metrics

from ansible_collections.llmserve.sglang.plugins.module_utils.host.nvidia_smi import probe_nvidia_smi
from ansible_collections.llmserve.sglang.plugins.module_utils.startup.startup_log import parse_startup_log

# The field pool holds ~159k tokens: 24 prompts of 9,000 tokens (each one more than a prefill chunk) fill it, and the
# rest wait in the queue until running requests finish.
STRESS = {"count": 24, "input_len": 9000, "max_new_tokens": 32}


def _stress(server):
    return simlib.flood(server.url, timeout=60, **STRESS)


def test_idle_healthy_but_dies_under_a_kv_filling_load(make_sim):
    """At 0.95 the field host starts with ~0.5 GiB free: /health_generate passes, the first full prefill chunk
    (8,192 tokens of activations, ~3.1 GiB) does not fit."""
    server = make_sim("field").start(simlib.launch_args("field", mem_fraction_static=0.95))
    assert server.wait_ready(), server.log
    assert simlib.request(server.url + "/health_generate")[0] == 200
    statuses = _stress(server)
    assert server.wait_exit(30) not in (None, 0)
    assert 200 not in statuses
    log = server.log
    assert "Scheduler hit an exception: Traceback (most recent call last):" in log
    assert "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate" in log
    facts = parse_startup_log(log)
    assert facts["ready"] and facts["failure"]["kind"] == "runtime_oom"


def test_memory_used_rises_under_load_and_stays_cached(make_sim):
    sim = make_sim("field")
    server = sim.start(simlib.launch_args("field"))
    assert server.wait_ready(), server.log
    idle = probe_nvidia_smi(sim.smi_runner())["gpus"]
    statuses = _stress(server)
    assert statuses == [200] * STRESS["count"]
    time.sleep(0.3)                       # the state file is written within 0.1 s
    loaded = probe_nvidia_smi(sim.smi_runner())["gpus"]
    for before, after in zip(idle, loaded):
        grown = after["memory_used_bytes"] - before["memory_used_bytes"]
        assert 2.9 * simlib.GIB < grown < 3.4 * simlib.GIB    # one 8,192-token chunk of activations, cached
    assert server.proc.poll() is None


def test_the_oracle_maximum_survives_and_one_percent_more_does_not(make_sim):
    sim = make_sim("field")
    verdict = simlib.oracle(sim, simlib.launch_args("field", mem_fraction_static=0.88), 0)
    best = verdict["max_mem_fraction_static"]
    assert 0.9 < best < 0.94 and verdict["min_mem_fraction_static"] == 0.77
    assert verdict["given"]["starts"] and verdict["given"]["kv_tokens"] > 159000
    survivor = sim.start(simlib.launch_args("field", mem_fraction_static=best))
    assert survivor.wait_ready(), survivor.log
    assert parse_startup_log(survivor.log)["kv_tokens"] == verdict["max_kv_tokens"]
    assert _stress(survivor) == [200] * STRESS["count"]
    assert survivor.proc.poll() is None
    survivor.stop()   # the GPUs are one host's: a second server would find the first one's memory taken
    victim = sim.start(simlib.launch_args("field", mem_fraction_static=round(best + 0.01, 3)))
    assert victim.wait_ready(), victim.log
    _stress(victim)
    assert victim.wait_exit(30) not in (None, 0)
    assert parse_startup_log(victim.log)["failure"]["kind"] == "runtime_oom"
    # Without the margin, the largest value that survives is the maximum at 0 GiB, and one step past the largest
    # value that starts does not start.
    assert verdict["max_survive_mem_fraction_static"] == best <= verdict["max_start_mem_fraction_static"]
    beyond = sim.start(simlib.launch_args("field", mem_fraction_static=round(
        verdict["max_start_mem_fraction_static"] + verdict["resolution"], 3)))
    assert beyond.wait_exit(30) not in (None, 0)
    assert parse_startup_log(beyond.log)["failure"]["kind"] == "capture_oom"


def test_the_oracle_margin_grows_with_the_safety(make_sim):
    sim = make_sim("field")
    args = simlib.launch_args("field")
    maxima = [simlib.oracle(sim, args, safety)["max_mem_fraction_static"] for safety in (0, 1, 2)]
    assert maxima[0] > maxima[1] > maxima[2] > 0.88
    assert 0.90 <= maxima[1] <= 0.93


def test_requests_wait_for_room_in_the_pool(make_sim):
    """A pool of 16,384 tokens (--max-total-tokens) runs at most one 9,000-token request at a time."""
    server = make_sim("single-gpu").start(simlib.launch_args("single-gpu", max_total_tokens=16384))
    assert server.wait_ready(), server.log
    assert "max_total_num_tokens=16384" in server.log
    statuses = simlib.flood(server.url, 3, 9000, 16, timeout=60)
    assert statuses == [200, 200, 200]
    assert "#queue-req: 2," in server.log or "#queue-req: 1," in server.log
    status, body = simlib.request(server.url + "/generate", {"input_ids": [1] * 20000})
    assert status == 400 and "exceeds the maximum allowed length" in body["error"]["message"]


def test_crash_after_requests_fault(make_sim):
    server = make_sim("single-gpu", faults={"crash_after_requests": 2}).start(simlib.launch_args("single-gpu"))
    assert server.wait_ready(), server.log
    for _attempt in range(2):
        simlib.request(server.url + "/generate", {"text": "hello", "sampling_params": {"max_new_tokens": 4}},
                       timeout=10)
    assert server.wait_exit(15) not in (None, 0)
    assert "CUDA error: an illegal memory access was encountered" in server.log


def test_hang_at_startup_fault(make_sim):
    server = make_sim("single-gpu", faults={"hang_at_startup": True}).start(simlib.launch_args("single-gpu"))
    assert not server.wait_ready(3)
    assert server.proc.poll() is None
    assert "Load weight begin." in server.log and "Load weight end." not in server.log


def test_servers_sharing_a_gpu_take_their_activations_from_the_same_memory(make_sim):
    """Two servers on the same 8 GPUs, the second sized from what the first left free: the second holds its load
    alone, but with the first loaded at the same time one of them runs out of memory, as on a real GPU (or both,
    when their batches grow at the same moment: each allocation then finds the other's already taken)."""
    sim = make_sim("h100-llama70b")
    first = sim.start(simlib.launch_args("h100-llama70b", mem_fraction_static=0.5))
    assert first.wait_ready(), first.log
    second = sim.start(simlib.launch_args("h100-llama70b", mem_fraction_static=0.85))
    assert second.wait_ready(), second.log
    assert simlib.flood(second.url, 8, 8000, 16) == [200] * 8
    second.stop()
    second = sim.start(simlib.launch_args("h100-llama70b", mem_fraction_static=0.85))
    assert second.wait_ready(), second.log
    both = [None, None]

    def load(position, server):
        both[position] = simlib.flood(server.url, 8, 8000, 16)

    threads = [threading.Thread(target=load, args=(position, server)) for position, server in enumerate((first, second))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(90)
    time.sleep(0.5)
    dead = [server for server in (first, second) if server.proc.poll() is not None]
    assert dead, both
    for server in dead:
        assert parse_startup_log(server.log)["failure"]["kind"] == "runtime_oom", server.log


def test_metrics_are_what_the_headroom_watch_reads_and_follow_the_load(make_sim):
    sim = make_sim("field")
    server = sim.start(simlib.launch_args("field") + ["--enable-metrics"])
    assert server.wait_ready(), server.log
    idle = metrics.parse_metrics(simlib.request(server.url + "/metrics")[1])
    assert idle["token_usage"] == 0 and idle["pool_tokens"] > 159000 and idle["retracted"] == 0
    seen = []
    done = threading.Event()

    def watch():
        while not done.is_set():
            seen.append(metrics.parse_metrics(simlib.request(server.url + "/metrics")[1])["token_usage"])
            time.sleep(0.02)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    # Production-like traffic (mixed lengths; bursts that ask for 1.2 times the pool: some wait), not the stress load.
    done_traffic = sim.run("sglang_sim.traffic", ["--url", server.url, "--seconds", "4", "--seed", "1", "--fill", "1.2",
                                                  "--burst-every", "2"], timeout=120)
    done.set()
    assert done_traffic.returncode == 0, done_traffic.stderr
    result = json.loads(done_traffic.stdout)
    watcher.join(5)
    assert result["statuses"] == {"200": result["sent"]} and result["sent"] > 10, result
    # The simulator reserves each request's whole output (SGLang a fraction of it, retracting when it runs short), so
    # mixed traffic holds its pool at 0.8 to 0.9 rather than above.
    assert max(seen) > 0.8, max(seen)
    # A proxy's error page instead of the metrics (faults.metrics_garbage, read at each request): the watch's
    # parser says so rather than reading numbers out of it.
    with open(sim.host_path, encoding="utf-8") as handle:
        host = json.load(handle)
    host.setdefault("faults", {})["metrics_garbage"] = True
    with open(sim.host_path, "w", encoding="utf-8") as handle:
        json.dump(host, handle)
    status, text = simlib.request(server.url + "/metrics")
    assert status == 200
    with pytest.raises(metrics.MetricsError, match="not in Prometheus. text format"):
        metrics.parse_metrics(text)


def test_input_logprobs_take_memory_a_stress_load_never_does(make_sim):
    """A prefill that returns the prompt's logprobs holds [tokens, vocab] float32 logits: in a full chunk (8,192 tokens,
    the stress load's largest batch), 1,024 tokens of a 163,840-word vocabulary take 0.63 GiB more."""
    sim = make_sim("field")
    server = sim.start(simlib.launch_args("field"))
    assert server.wait_ready(), server.log
    assert _stress(server) == [200] * STRESS["count"]
    time.sleep(0.3)
    stressed = min(gpu["memory_free_bytes"] for gpu in probe_nvidia_smi(sim.smi_runner())["gpus"])
    body = {"input_ids": [7] * 8192, "sampling_params": {"max_new_tokens": 4}, "return_logprob": True,
            "logprob_start_len": 8192 - 1024}
    assert simlib.request(server.url + "/generate", body)[0] == 200
    time.sleep(0.3)
    after = min(gpu["memory_free_bytes"] for gpu in probe_nvidia_smi(sim.smi_runner())["gpus"])
    assert stressed - after == pytest.approx(1024 * 163840 * 4 * 1.0, rel=0.1), (stressed - after) / simlib.GIB

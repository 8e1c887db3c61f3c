# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""One SGLang server over two simulated hosts (--tp-size 16 --nnodes 2, 8 + 8 H100s, Llama-3.1-70B).

Each node is a host of its own (host.json and GPU state directory); they meet over TCP at --dist-init-addr. The pool
is sized from the smallest free memory of all 16 ranks, node 0 serves the API, node 1 only a dummy /health, and the
death of either node ends the other, as NCCL does in SGLang.
"""
from __future__ import annotations

import json
import re
import signal
import time

import simlib

from ansible_collections.llmserve.sglang.plugins.module_utils.host.nvidia_smi import probe_nvidia_smi
from ansible_collections.llmserve.sglang.plugins.module_utils.startup.startup_log import parse_startup_log

PROFILE = "h100-llama70b"
# A full prefill chunk (8,192 tokens, 2.1 GiB of activations): the stress load of this profile.
STRESS = {"count": 4, "input_len": 9000, "max_new_tokens": 8}


def _hosts(make_sim, node1=None):
    """Node 0's and node 1's simulated hosts (node 1 with these host.json overrides)."""
    return [make_sim(PROFILE), make_sim(PROFILE, **(node1 or {}))]


def _flags(port=None, **replace):
    """The launch flags both nodes share (a new --dist-init-addr port unless given)."""
    return simlib.launch_args(PROFILE, tp_size=16, **replace) + [
        "--nnodes", "2", "--dist-init-addr", "127.0.0.1:%d" % (port or simlib.free_port())]


def _start(sims, flags, first=0):
    """Start both nodes (``first`` before the other); [node 0, node 1] servers."""
    servers = [None, None]
    for rank in (first, 1 - first):
        servers[rank] = sims[rank].start(flags + ["--node-rank", str(rank)])
    return servers


def _oracle(sims, flags, safety_gib=0.0):
    """The oracle for the two-node server: the shared flags, each node's host.json."""
    done = sims[0].run("sglang_sim.oracle", ["--node-host", sims[0].host_path, "--node-host", sims[1].host_path,
                                             "--safety-gib", str(safety_gib)] + flags)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _ready(servers):
    for server in servers:
        assert server.wait_ready(20), server.log


def test_two_nodes_serve_one_pool_that_the_oracle_predicts(make_sim):
    sims, flags = _hosts(make_sim), _flags()
    servers = _start(sims, flags, first=1)      # node 1 waits for node 0's address to listen
    _ready(servers)
    node0, node1 = (parse_startup_log(server.log) for server in servers)
    verdict = _oracle(sims, flags)
    assert node0["kv_tokens"] == node1["kv_tokens"] == verdict["given"]["kv_tokens"]
    assert node0["ready"] and not node1["ready"] and node0["failure"] is None and node1["failure"] is None
    # Global TP ranks: node 0 logs TP0..TP7, node 1 TP8..TP15; only TP0 prints the scheduler's summary.
    assert "[" in servers[1].log and re.search(r" TP8\] Load weight end\.", servers[1].log)
    assert not re.search(r" TP[0-7]\] ", servers[1].log) and not re.search(r" TP(8|9|1[0-5])\] ", servers[0].log)
    assert "max_total_num_tokens=%d" % verdict["given"]["kv_tokens"] in servers[0].log
    assert "max_total_num_tokens=" not in servers[1].log
    assert "Starting dummy health check server at 127.0.0.1:%d" % servers[1].port in servers[1].log
    assert simlib.request(servers[1].url + "/health_generate")[0] == 200
    assert simlib.request(servers[1].url + "/generate", {"text": "hi"})[0] == 404
    request = {"text": "hello", "sampling_params": {"max_new_tokens": 4}}
    status, body = simlib.request(servers[0].url + "/generate", request)
    assert status == 200 and body["meta_info"]["completion_tokens"] == 4
    for sim in sims:
        gpus = probe_nvidia_smi(sim.smi_runner())["gpus"]
        assert len(gpus) == 8 and all(gpu["memory_used_bytes"] > 60 * simlib.GIB for gpu in gpus)


def test_memory_taken_on_one_node_shrinks_the_pool_of_both(make_sim):
    """4 GiB held by another process on node 1's GPU 3: P (the MIN over all 16 ranks) drops by 4 GiB on both
    nodes, and so does every node's pool, by the same number of tokens."""
    sims, flags = _hosts(make_sim, node1={"faults": {"gpu_occupied_mib": {"3": 4096}}}), _flags()
    clean = _oracle([sims[0], sims[0]], flags)["given"]
    servers = _start(sims, flags)
    _ready(servers)
    tokens = [parse_startup_log(server.log)["kv_tokens"] for server in servers]
    assert tokens[0] == tokens[1] == _oracle(sims, flags)["given"]["kv_tokens"]
    # Budget A - P * (1 - f): A and P both lose 4 GiB, the budget f * 4 GiB (40,960 bytes a token), give or take
    # the CUDA-context noise (0..6 MiB) of the GPU that was the smallest before.
    expected = 4 * simlib.GIB * clean["mem_fraction_static"] / 40960
    assert abs(clean["kv_tokens"] - tokens[0] - expected) <= 6 * 2 ** 20 * clean["mem_fraction_static"] / 40960 + 1


def test_killing_node_1_ends_node_0(make_sim):
    sims, flags = _hosts(make_sim), _flags()
    servers = _start(sims, flags)
    _ready(servers)
    servers[1].proc.kill()
    assert servers[0].wait_exit(10) not in (None, 0)
    log = servers[0].log
    assert "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting" in log
    assert "Received sigquit from a child process" in log
    assert parse_startup_log(log)["failure"]["kind"] == "nccl_error"
    assert not sims[0].state_files()


def test_stopping_node_0_ends_node_1(make_sim):
    sims, flags = _hosts(make_sim), _flags()
    servers = _start(sims, flags)
    _ready(servers)
    servers[0].proc.send_signal(signal.SIGTERM)
    assert servers[0].wait_exit(10) == 0
    assert servers[1].wait_exit(10) not in (None, 0)
    assert "Connection closed by remote peer 127.0.0.1<" in servers[1].log
    assert parse_startup_log(servers[1].log)["failure"]["kind"] == "nccl_error"
    assert not sims[1].state_files()


def test_a_crash_on_node_1_during_startup_ends_node_0(make_sim):
    sims, flags = _hosts(make_sim, node1={"faults": {"crash_at_startup": True}}), _flags()
    servers = _start(sims, flags)
    assert servers[1].wait_exit(15) not in (None, 0)
    assert servers[0].wait_exit(15) not in (None, 0)
    assert parse_startup_log(servers[1].log)["failure"]["kind"] == "crash"
    assert parse_startup_log(servers[0].log)["failure"]["kind"] == "nccl_error"
    assert "Load weight end." not in servers[0].log     # node 0 waited for node 1's ranks, then lost them


def test_unbalanced_memory_is_judged_over_both_nodes(make_sim):
    """20 GB taken on node 1's GPU 2: the MIN over the 16 ranks is below 90 % of every other rank's free memory,
    so ranks on both nodes raise SGLang's error."""
    sims, flags = _hosts(make_sim, node1={"faults": {"gpu_occupied_mib": {"2": 20000}}}), _flags()
    servers = _start(sims, flags)
    for server in servers:
        assert server.wait_exit(15) not in (None, 0)
        assert parse_startup_log(server.log)["failure"]["kind"] == "unbalanced_memory"
    assert " TP10] Scheduler hit an exception" not in servers[1].log
    assert " TP11] Scheduler hit an exception" in servers[1].log
    assert " TP0] Scheduler hit an exception" in servers[0].log


def test_the_oracle_maximum_survives_load_and_one_percent_more_dies_where_memory_runs_out(make_sim):
    """Node 1 holds 2 GiB for another process on GPU 3: that rank has the least headroom of the 16. At the oracle's
    maximum a full prefill chunk fits everywhere (nvidia-smi on node 1 shows its activations); 0.01 higher, node 1
    dies with torch's OOM for node 0's batch, and node 0 with it."""
    sims = _hosts(make_sim, node1={"faults": {"gpu_occupied_mib": {"3": 2048}}})
    best = _oracle(sims, _flags())["max_mem_fraction_static"]
    servers = _start(sims, _flags(mem_fraction_static=best))
    _ready(servers)
    idle = probe_nvidia_smi(sims[1].smi_runner())["gpus"]
    assert simlib.flood(servers[0].url, timeout=60, **STRESS) == [200] * STRESS["count"]
    time.sleep(0.3)                       # the state file is written within 0.1 s
    loaded = probe_nvidia_smi(sims[1].smi_runner())["gpus"]
    for before, after in zip(idle, loaded):
        assert 2.0 * simlib.GIB < after["memory_used_bytes"] - before["memory_used_bytes"] < 2.3 * simlib.GIB
    assert all(server.proc.poll() is None for server in servers)
    for server in servers:
        server.stop()
    victims = _start(sims, _flags(mem_fraction_static=round(best + 0.01, 3)))
    _ready(victims)
    simlib.flood(victims[0].url, timeout=30, **STRESS)
    for victim in victims:
        assert victim.wait_exit(15) not in (None, 0)
    assert parse_startup_log(victims[1].log)["failure"]["kind"] == "runtime_oom"
    assert " TP11] Scheduler hit an exception" in victims[1].log        # GPU 3 of node 1
    assert parse_startup_log(victims[0].log)["failure"]["kind"] == "nccl_error"


def test_nodes_started_seconds_apart_still_meet(make_sim):
    """systemd restarts a node whose peer died RestartSec (15 s) after, unscaled: nodes restarted out of step must
    still meet on the fast scale, as they do within torch's 600 s. 8 s apart: longer than the window once was."""
    sims, flags = _hosts(make_sim), _flags()
    first = sims[0].start(flags + ["--node-rank", "0"])
    time.sleep(8)
    assert first.proc.poll() is None, first.log
    second = sims[1].start(flags + ["--node-rank", "1"])
    _ready([first, second])


def test_a_missing_node_times_out(make_sim):
    sims, flags = _hosts(make_sim), _flags(dist_timeout=2)
    alone = sims[0].start(flags + ["--node-rank", "0"])
    assert alone.wait_exit(15) not in (None, 0)
    assert ("torch.distributed.DistStoreError: Timed out after 3 seconds waiting for clients. 8/16 clients joined."
            in alone.log)
    assert parse_startup_log(alone.log)["failure"]["kind"] == "crash"
    orphan = sims[1].start(flags + ["--node-rank", "1"])
    assert orphan.wait_exit(15) not in (None, 0)
    port = flags[flags.index("--dist-init-addr") + 1].split(":")[1]
    assert ("torch.distributed.DistNetworkError: The client socket has timed out after 2000ms while trying to "
            "connect to (127.0.0.1, %s)." % port) in orphan.log
    assert not sims[0].state_files() and not sims[1].state_files()

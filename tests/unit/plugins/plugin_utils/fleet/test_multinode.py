# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""fleet/multinode.py: which hosts are one server, who leads, and what a trial's observations of every node say."""
from __future__ import annotations

import pytest

from ansible_collections.llmserve.sglang.plugins.plugin_utils.fleet import multinode as mn

ARGS = {"tp_size": 16, "nnodes": 2, "dist_init_addr": "10.0.0.1:5000"}


def test_a_node_of_a_multinode_server():
    node = mn.node_of(dict(ARGS, node_rank=1))
    assert node["nnodes"] == 2 and node["node_rank"] == 1 and len(node["key"]) == 12
    assert node["key"] == mn.node_of(ARGS)["key"] and mn.node_of(ARGS)["node_rank"] == 0
    assert node["key"] != mn.node_of(dict(ARGS, dist_init_addr="10.0.0.9:5000"))["key"]
    assert mn.node_of({"tp_size": 8}) is None and mn.node_of(None) is None and mn.node_of({"nnodes": 1}) is None


@pytest.mark.parametrize("args, message", [
    ({"nnodes": 2}, "without --dist-init-addr"),
    (dict(ARGS, node_rank=2), "--node-rank 2 is not in 0..1"),
    (dict(ARGS, nnodes="two"), "must be integers"),
])
def test_a_node_that_cannot_join_is_named(args, message):
    with pytest.raises(mn.MultinodeError, match=message):
        mn.node_of(args)


def probe(rank, status="would_tune", nnodes=2, addr="10.0.0.1:5000"):
    return {"status": status, "node": mn.node_of(dict(ARGS, nnodes=nnodes, node_rank=rank, dist_init_addr=addr))}


def test_the_server_plan_tunes_every_node_when_one_needs_it():
    plan = mn.server_plan({"n1": probe(1, "unchanged"), "n0": probe(0, "unchanged"), "solo": {"status": "tuned"},
                           "m0": probe(0, addr="10.0.0.7:5000"), "m1": probe(1, "unchanged", addr="10.0.0.7:5000")},
                          ["n1", "n0", "solo", "m0", "m1"])
    assert sorted(plan) == ["m0", "m1", "n0", "n1"]
    assert plan["n1"]["leader"] == "n0" and plan["n1"]["nodes"] == ["n0", "n1"] and not plan["n0"]["tune"]
    assert plan["n0"]["why"] == "every node holds its pin"
    assert plan["m1"]["tune"] and plan["m0"]["tune"] and plan["m1"]["why"] == "m0 needs tuning"
    assert plan["m0"]["key"] != plan["n0"]["key"]


@pytest.mark.parametrize("probes, why", [
    ({"a": probe(0)}, "node rank 1 is not in this run"),
    ({"a": probe(0), "b": probe(0)}, "node rank 0 is given to a and b"),
    ({"a": probe(0), "b": probe(1, nnodes=3)}, "disagree on --nnodes"),
])
def test_a_server_whose_nodes_do_not_add_up_is_not_tuned(probes, why):
    plan = mn.server_plan(probes, sorted(probes))
    assert all(not entry["tune"] and why in entry["why"] and why in entry["error"] for entry in plan.values()), plan


def test_the_least_free_gpu_of_any_node_is_the_servers():
    stress = {"held": True, "min_free_gib": 3.0, "min_free_gib_per_gpu": {"0": 3.0, "1": 3.2}}
    merged = mn.merge_samples(stress, {"n1": {"min_free_gib_per_gpu": {"0": 1.5, "1": 2.0}, "running": True,
                                              "same_start": True}})
    assert merged["held"] and merged["min_free_gib"] == 1.5
    assert merged["min_free_gib_per_gpu"] == {"0": 3.0, "1": 3.2, "n1:0": 1.5, "n1:1": 2.0}
    assert stress["min_free_gib"] == 3.0    # not changed in place


@pytest.mark.parametrize("seen, reason", [
    ({"running": False, "same_start": False}, "node n1: its server is not running after the load"),
    ({"running": True, "same_start": False}, "node n1: its server restarted under the load"),
])
def test_a_node_that_lost_its_server_under_the_load_did_not_hold(seen, reason):
    merged = mn.merge_samples({"held": True, "min_free_gib": 3.0, "min_free_gib_per_gpu": {"0": 3.0}}, {"n1": seen})
    assert not merged["held"] and merged["failure_reason"] == reason


def test_the_servers_p_and_a_are_the_least_of_any_node():
    leader = {"pre_load_free_gib": 78.2, "post_load_free_gib": 69.4, "max_total_num_tokens": 1000, "failure": None}
    follower = {"pre_load_free_gib": 74.2, "post_load_free_gib": 65.4, "max_total_num_tokens": None}
    merged = mn.server_boot(leader, {"n1": follower})
    assert merged == dict(leader, pre_load_free_gib=74.2, post_load_free_gib=65.4)
    assert leader["pre_load_free_gib"] == 78.2    # not changed in place
    assert mn.server_boot({}, {}) == {} and mn.server_boot(None, {"n1": None}) == {}


def test_a_nodes_untrusted_memory_numbers_are_the_servers_named_by_node():
    # The pool is sized from the least free rank of any node: a node whose own log cannot be trusted makes the
    # server's numbers untrusted too, even when node 0's log is clean.
    clean = {"pre_load_free_gib": 78.2, "post_load_free_gib": 69.4, "untrusted": []}
    spread = {"pre_load_free_gib": 78.2, "post_load_free_gib": 65.4,
              "untrusted": ["ranks that load the same shards report different weights: TP9 76.0 GiB, TP8 72.0 GiB"]}
    merged = mn.server_boot(clean, {"n2": clean, "n1": spread})
    assert merged["untrusted"] == ["node n1: ranks that load the same shards report different weights: TP9 76.0 GiB, "
                                   "TP8 72.0 GiB"]
    both = mn.server_boot(dict(clean, untrusted=["own"]), {"n1": spread})["untrusted"]
    assert both[0] == "own" and both[1].startswith("node n1: ranks")
    assert mn.server_boot(clean, {"n1": clean})["untrusted"] == []
    assert "untrusted" not in mn.server_boot({"pre_load_free_gib": 1.0}, {"n1": None})


def test_ranks_of_one_stage_on_different_nodes_that_disagree_make_the_server_untrusted():
    # 2 GiB taken on every GPU of node n1 while it loaded: its own log is even, the server's is not.
    def boot(weights, tags):
        return {"ranks": [{"tag": tag, "weights_gib": weights} for tag in tags], "untrusted": []}

    merged = mn.server_boot(boot(4.4, ["TP0", "TP1"]), {"n1": boot(6.4, ["TP2", "TP3"])})
    assert merged["untrusted"] == [
        "ranks that load the same shards report different weights: n1 TP2 6.40 GiB, node 0 TP0 4.40 GiB: free memory "
        "moved on some GPUs during the load (another process?), so P and A are not what SGLang's pool will see next "
        "time"]
    assert mn.server_boot(boot(4.4, ["TP0", "TP1"]), {"n1": boot(4.41, ["TP2", "TP3"])})["untrusted"] == []
    # pipeline stages on different nodes hold different layers
    assert mn.server_boot(boot(40.0, ["PP0 TP0"]), {"n1": boot(30.0, ["PP1 TP0"])})["untrusted"] == []


def test_the_boot_that_explains_a_failed_start_is_the_node_that_ran_out_of_memory():
    echo = {"failure": {"kind": "nccl_error", "line": "Connection closed by remote peer"}}
    oom = {"failure": {"kind": "capture_oom", "line": "Capture cuda graph failed"}}
    own = {"failure": {"kind": "init_oom", "line": "Not enough memory"}}
    assert mn.server_boot(echo, {"n1": oom})["failure"] == oom["failure"]
    assert mn.server_boot(own, {"n1": oom})["failure"] == own["failure"]
    assert mn.server_boot(echo, {"n1": echo})["failure"] == echo["failure"]


@pytest.mark.parametrize("leader, hellos, reason", [
    ({"rank": 0, "host": "a", "pin": 0.9, "running": 0.9},
     [{"rank": 1, "host": "b", "status": "unchanged", "pin": 0.9, "running": 0.9}], None),
    ({"rank": 0, "host": "a", "pin": 0.85, "running": 0.85},
     [{"rank": 1, "host": "b", "status": "unchanged", "pin": 0.92, "running": 0.92}],
     "the nodes are pinned on different values (node 0 (a) 0.85, node 1 (b) 0.92); "
     "the nodes are running different values (node 0 (a) 0.85, node 1 (b) 0.92)"),
    ({"rank": 0, "host": "a", "pin": None, "running": 0.9},
     [{"rank": 2, "host": "c", "status": "unchanged", "pin": 0.9, "running": 0.9},
      {"rank": 1, "host": "b", "status": "tune", "why": "never tuned", "pin": None, "running": 0.9}],
     "node 1 (b): never tuned; the nodes are pinned on different values (node 0 (a) none, node 1 (b) none, "
     "node 2 (c) 0.9)"),
])
def test_nodes_of_one_server_on_different_pins_or_values_are_a_reason_to_tune(leader, hellos, reason):
    assert mn.followers_reason(hellos, leader) == reason


ECHO = {"ready": False, "pre_load_free_gib": 78.2, "post_load_free_gib": 69.4,
        "server_args": {"mem_fraction_static": 0.92},
        "failure": {"kind": "nccl_error", "line": "NCCL error: remote process exited"}}
CAPTURE = {"ready": False, "pre_load_free_gib": 74.2, "post_load_free_gib": 65.4,
           "server_args": {"mem_fraction_static": 0.92},
           "failure": {"kind": "capture_oom", "line": "Capture cuda graph failed: CUDA out of memory"}}
CRASH = {"ready": False, "failure": {"kind": "crash", "line": "ImportError: libcuda.so.1"}}


def test_a_start_that_ran_one_node_out_of_memory_is_that_nodes_failure_with_the_servers_p_and_a():
    # Node 0 only lost its peer: node 1's capture OOM is why the server did not start.
    failed = mn.server_start_failure(ECHO, {"n1": CAPTURE})
    assert failed == dict(CAPTURE, pre_load_free_gib=74.2, post_load_free_gib=65.4)
    assert mn.server_start_failure(CAPTURE, {"n1": ECHO})["failure"] == CAPTURE["failure"]


@pytest.mark.parametrize("leader, followers, kind, line", [
    # a crash on any node is not fixed by a value of --mem-fraction-static, beside a lack of memory or not
    (CAPTURE, {"n1": ECHO, "n2": CRASH}, "crash", "node n2: ImportError: libcuda.so.1"),
    (CRASH, {"n1": CAPTURE}, "crash", "ImportError: libcuda.so.1"),
    # only lost connections: node 0's own
    (ECHO, {"n1": ECHO}, "nccl_error", "NCCL error: remote process exited"),
])
def test_a_failure_other_than_memory_on_any_node_is_the_servers(leader, followers, kind, line):
    failed = mn.server_start_failure(leader, followers)
    assert (failed["failure"]["kind"], failed["failure"]["line"]) == (kind, line)
    assert CRASH["failure"]["line"] == "ImportError: libcuda.so.1"    # not changed in place

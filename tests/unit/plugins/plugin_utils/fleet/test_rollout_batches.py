# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""rollout_batches: the rollout's batches hold whole servers; serial counts servers, the canary is a whole server."""
from __future__ import annotations

import pytest

from ansible_collections.llmserve.sglang.plugins.plugin_utils.fleet.rollout_batches import batches
from ansible_collections.llmserve.sglang.plugins.plugin_utils.fleet.rollout_inputs import RolloutInputError


def node(rank, nnodes=2, addr="10.0.0.1:5000"):
    return {"sglang_service_server_args": {"tp-size": 16, "nnodes": nnodes, "node-rank": rank,
                                           "dist_init_addr": addr}}


def test_single_host_servers_take_ansibles_batches():
    hosts = ["g%d" % i for i in range(1, 10)]
    plan = batches(hosts, {}, [1, "25%"])
    assert plan["order"] == hosts and plan["nodes"] == {}
    # 9 servers: the canary, then 25% of 9 = 2 at a time
    assert plan["serial"] == [1, 2, 2, 2, 2]
    assert plan["servers"][0] == [["g1"]]


def test_the_nodes_of_a_server_go_together_and_count_once():
    """issue 35, item 1: a two-node server (m1, m2; m2 listed last) is one server of its batch, node 0 first."""
    hosts = ["m2", "g1", "g2", "g3", "m1"]
    plan = batches(hosts, {"m1": node(0), "m2": node(1)}, [1, "50%"])
    assert plan["order"] == ["m1", "m2", "g1", "g2", "g3"]
    assert plan["servers"] == [[["m1", "m2"]], [["g1"], ["g2"]], [["g3"]]]
    assert plan["serial"] == [2, 2, 1]
    assert plan["nodes"] == {"m1": ["m1", "m2"], "m2": ["m1", "m2"]}


def test_a_server_of_an_instance_and_two_servers():
    def instance(rank):
        return {"sglang_service_instances": [{"name": "x", "server_args": {
            "nnodes": 2, "node_rank": rank, "dist_init_addr": "10.0.0.9:7000"}}]}

    values = {"a1": instance(0), "a2": instance(1), "b1": node(0, addr="10.0.1.1:5000"),
              "b2": node(1, addr="10.0.1.1:5000")}
    plan = batches(["a1", "b1", "a2", "b2"], values, 1)
    assert plan["order"] == ["a1", "a2", "b1", "b2"] and plan["serial"] == [2, 2]


@pytest.mark.parametrize("values, problem", [
    ({"m1": node(0)}, "the server at 10.0.0.1:5000 spans 2 nodes, and node rank 1 is not among the rollout's hosts "
                      "(m1): its nodes change together"),
    ({"m1": node(0), "m2": node(0)}, "the server at 10.0.0.1:5000 has node rank 0 on both m1 and m2"),
    ({"m1": node(0), "m2": node(1, nnodes=3)}, "the nodes of the server at 10.0.0.1:5000 disagree on --nnodes"),
    ({"m1": {"sglang_service_server_args": {"nnodes": 2}}}, "--nnodes 2 without --dist-init-addr"),
])
def test_a_server_whose_nodes_do_not_add_up_is_refused(values, problem):
    with pytest.raises(RolloutInputError, match=problem.replace("(", r"\(").replace(")", r"\)")):
        batches(["m1", "m2", "g1"], values)

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""run/nodes.py: node 0 leads the other nodes of a server that spans hosts; they follow it."""
from __future__ import annotations

import pytest

from ansible_collections.llmserve.sglang.plugins.plugin_utils.run.nodes import Follower, Leader
from ansible_collections.llmserve.sglang.plugins.plugin_utils.run.steps import RunFailed
from ansible_collections.llmserve.sglang.tests.unit.plugins.plugin_utils.run.scripted_run import (
    INFO, PIN, drive, settled_run, unit_run)


def test_node_zero_waits_for_every_node_and_learns_why_they_ask_for_a_tune():
    run = unit_run()
    run.state.node = {"nnodes": 2, "node_rank": 0, "dist_init_addr": "10.0.0.1:5000"}
    hellos = [{"rank": 1, "host": "gpu2", "status": "tune", "why": "never tuned", "boot": {"p": 1}, "pin": None,
               "running": 0.88, "lower_to": 0.9}]
    reason, _said = drive(Leader(run.ctx, run.state).lead(dict(INFO, pin=PIN)), [("nodes join", hellos)], nodes=True)
    assert reason and run.state.ranks == [1] and run.state.boots == {"gpu2": {"p": 1}}
    assert run.state.nodes_lower_to == 0.9


def test_a_node_that_failed_a_step_fails_the_search():
    run = unit_run()
    run.state.ranks = [1, 2]
    acks = [{"rank": 1, "host": "gpu2", "ok": True}, {"rank": 2, "host": "gpu3", "ok": False, "msg": "disk full"}]
    with pytest.raises(RunFailed, match=r"^node 2 \(gpu3\): disk full$"):
        drive(Leader(run.ctx, run.state).answers(4), [("nodes answers", acks)], nodes=True)


def test_a_node_that_cannot_be_tuned_says_so_to_node_zero_and_stops():
    run = settled_run()
    run.state.node = {"nnodes": 2, "node_rank": 1}
    with pytest.raises(RunFailed, match="its ExecStart does not end with"):
        drive(Follower(run.ctx, run.state, run.calls).follow(dict(INFO, takes_kv_args=False)), [
            ("sglang_startup_facts", None), ("nodes hello", None)], nodes=True)


def test_a_node_does_node_zeros_steps_until_it_is_done():
    run = settled_run()
    run.state.node = {"nnodes": 2, "node_rank": 1}
    done = {"do": "done", "leader": "gpu1", "status": "tuned", "value": 0.91, "line": "tuned to 0.910"}
    result, said = drive(Follower(run.ctx, run.state, run.calls).follow(dict(INFO)), [
        ("sglang_startup_facts", None), ("nodes hello", None),
        ("nodes next", {"do": "kv_trial", "state": "started", "text": "0.910", "leader": "gpu1"}),
        ("kv_trial locked", {}), ("kv_trial started 0.910", {"changed": True, "invocation_id": "I7"}),
        ("nodes answer", None), ("nodes next", done)], nodes=True)
    assert (result["status"], result["follower_of"], result["changed"]) == ("tuned", "gpu1", True)
    assert run.state.invocation_id == "I7"
    assert said == ["gpu1: node 1 of the server led by gpu1: tuned to 0.910"]

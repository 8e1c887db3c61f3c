# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""run/settle.py: the unit settled before its search, and a last-known-good value that no longer starts."""
from __future__ import annotations

import pytest

from ansible_collections.llmserve.sglang.plugins.plugin_utils.run.nodes import Leader
from ansible_collections.llmserve.sglang.plugins.plugin_utils.run.settle import SETTLE_STEPS
from ansible_collections.llmserve.sglang.plugins.plugin_utils.run.steps import RunFailed
from ansible_collections.llmserve.sglang.tests.unit.plugins.plugin_utils.run.scripted_run import (
    INFO, PIN, drive, settled_run, unit_run)

PENDING = dict(INFO, trial_pending=True)


def test_a_pending_trial_is_reverted_and_the_unit_asked_again():
    run = settled_run()
    (info, plan, safe), said = drive(run.settle.settle(PENDING, None), [
        ("kv_trial locked", {}), ("kv_trial reverted", {"changed": True, "invocation_id": "I1"}),
        ("sglang_ready", {"ready": True}), ("kv_fingerprint", {"invocation_id": "I1"})])
    assert (plan["do"], plan["why"], safe, info["invocation_id"]) == ("tune", "never tuned", None, "I1")
    assert said == ["gpu1: a trial of an earlier run was never confirmed"] and run.locked


def test_a_unit_that_does_not_settle_is_not_searched():
    script = [("kv_fingerprint", {"trial_pending": True}), ("kv_trial locked", {})]
    for _attempt in range(SETTLE_STEPS):
        script += [("kv_trial reverted", {}), ("sglang_ready", {"ready": True}),
                   ("kv_fingerprint", {"trial_pending": True})]
    with pytest.raises(RunFailed, match="sglang.service did not settle before the search"):
        drive(unit_run().steps(), script)


def test_a_revert_that_does_not_start_is_read_from_that_start():
    run = settled_run()
    ready = {"ready": False, "reason": "unit_failed", "detail": "exited"}
    (_info, _plan, safe), said = drive(run.settle.settle(PENDING, None), [
        ("kv_trial locked", {}), ("kv_trial reverted", {"invocation_id": "I1"}), ("sglang_ready", ready),
        ("sglang_startup_facts", {"failure": {"kind": "init_oom", "line": "Not enough memory"}})])
    assert safe["why"].startswith("the last-known-good value 0.88 no longer starts (init_oom: Not enough memory)")
    assert said[-1] == "gpu1: " + safe["why"]


def test_a_start_that_failed_for_another_reason_leaves_the_unit_as_it_is():
    run = settled_run()
    ready = {"ready": False, "reason": "unit_failed", "detail": "exited"}
    with pytest.raises(RunFailed, match=r"does not start on its last-known-good value 0.88 \(nccl_error: NCCL"):
        drive(run.settle.after_a_failed_start(INFO, ready, "I1"), [
            ("sglang_startup_facts", {"failure": {"kind": "nccl_error", "line": "NCCL error"}})])


# Node 0 of a server on two hosts whose upgrade's start of its pin (0.92) failed and which the rollout stopped: its own
# log shows only the lost connection to node 1, whose log shows the capture OOM.
NODE0_STOPPED = dict(INFO, running=False, pin=PIN, mem_fraction_static=0.92, invocation_id="I4", stale=[],
                     server_args={"tp_size": 16, "nnodes": 2, "node_rank": 0, "dist_init_addr": "sim-a:5000"})
ECHO = {"ready": False, "server_args": {"mem_fraction_static": 0.92},
        "failure": {"kind": "nccl_error", "line": "NCCL error: remote process exited"}}
NODE1_OOM = {"ready": False, "pre_load_free_gib": 74.5, "post_load_free_gib": 9.9,
             "server_args": {"mem_fraction_static": 0.92},
             "failure": {"kind": "capture_oom", "line": "Capture cuda graph failed: CUDA out of memory"}}


def node0_run(others_failed_last=True, boots=None):
    run = settled_run()
    run.state.node = {"node_rank": 0, "nnodes": 2, "dist_init_addr": "sim-a:5000"}
    run.state.ranks, run.state.boots = [1], {"gpu2": NODE1_OOM} if boots is None else boots
    run.state.others_failed_last = others_failed_last
    run.calls.leader = Leader(run.ctx, run.state)
    return run


def test_node_0_of_a_server_stopped_after_its_pin_ran_a_node_out_of_memory_tunes_from_that_start():
    # issue 35: no node starts the pin again (a model load on every node) only to fail the same way.
    run = node0_run()
    (_info, _plan, safe), said = drive(run.settle.settle(NODE0_STOPPED, "node 1 (gpu2): fingerprint changed"), [
        ("kv_trial locked", {}), ("sglang_startup_facts", ECHO)], nodes=True)
    assert safe["boot"]["failure"]["kind"] == "capture_oom" and safe["boot"]["pre_load_free_gib"] == 74.5
    assert safe["why"].startswith("its last start, on the last-known-good value 0.92 and what is on disk now, failed "
                                  "for a lack of memory (capture_oom: Capture cuda graph failed"), safe["why"]
    assert said == ["gpu1: " + safe["why"]]


@pytest.mark.parametrize("others_failed_last, boots", [
    (False, None),                              # a node whose unit runs, or whose last start was another's
    (True, {"gpu2": dict(NODE1_OOM, failure={"kind": "crash", "line": "ImportError: libcuda.so.1"})}),
    (True, {"gpu2": ECHO}),                     # nobody ran out of memory
])
def test_node_0_starts_the_pin_on_every_node_again_unless_every_node_stopped_after_it_for_a_lack_of_memory(
        others_failed_last, boots):
    run = node0_run(others_failed_last, boots)
    script = [("kv_trial locked", {})] + ([("sglang_startup_facts", ECHO)] if others_failed_last else []) + [
        ("kv_trial reverted", {"changed": True, "invocation_id": "I5"}), ("nodes tell", 0),
        ("nodes answers", [{"ok": True, "rank": 1, "host": "gpu2"}]),
        ("sglang_ready", {"ready": True, "invocation_id": "I5"}),
        ("kv_fingerprint", dict(NODE0_STOPPED, running=True, invocation_id="I5"))]
    (_info, plan, safe), _said = drive(run.settle.settle(NODE0_STOPPED, None), script, nodes=True)
    assert safe is None and plan["status"] == "unchanged"


def test_node_0_reads_a_failed_revert_from_every_nodes_log():
    # Before, node 0 read only its own log (the lost connection) and left the server for an operator.
    run = node0_run()
    ready = {"ready": False, "reason": "unit_failed", "detail": "exited"}
    safe, said = drive(run.settle.after_a_failed_start(NODE0_STOPPED, ready, "I5"), [
        ("sglang_startup_facts", ECHO), ("nodes tell", 3),
        ("nodes answers", [{"ok": True, "rank": 1, "host": "gpu2", "boot": NODE1_OOM}])], nodes=True)
    assert safe["why"].startswith("the last-known-good value 0.92 no longer starts (capture_oom: Capture cuda graph")
    crashed = dict(NODE1_OOM, failure={"kind": "crash", "line": "ImportError: libcuda.so.1"})
    with pytest.raises(RunFailed, match=r"value 0.92 \(crash: node gpu2: ImportError: libcuda.so.1\)"):
        drive(node0_run().settle.after_a_failed_start(NODE0_STOPPED, ready, "I5"), [
            ("sglang_startup_facts", ECHO), ("nodes tell", 3),
            ("nodes answers", [{"ok": True, "rank": 1, "host": "gpu2", "boot": crashed}])], nodes=True)

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""run/calls.py: the arguments of the unit's module calls, and kv_trial on every node of a server that spans hosts."""
from __future__ import annotations

from ansible_collections.llmserve.sglang.plugins.plugin_utils.run.calls import fingerprint_args, ready_call
from ansible_collections.llmserve.sglang.plugins.plugin_utils.run.nodes import Leader
from ansible_collections.llmserve.sglang.tests.unit.plugins.plugin_utils.run.scripted_run import ARGS, drive, unit_run


def test_the_probe_and_the_readiness_wait_of_a_unit_and_its_neighbours():
    args = dict(ARGS, watch={"rules": []})
    assert fingerprint_args(args, "b.service", ["a.service"]) == {
        "unit": "b.service", "model_revision": None, "require_running": False, "watch": {"rules": []},
        "also_units": ["a.service"]}
    step = ready_call(ARGS, "a.service", "http://h:1", "I3", may_fail=True, gpus=[0, 1], also_units=("b.service",))
    assert step["may_fail"] and step["args"]["gpus"] == [0, 1] and step["args"]["also_units"] == ["b.service"]
    assert "gpus" not in ready_call(ARGS, "a.service", "http://h:1", also_units=("b.service",))["args"]


def test_a_load_that_failed_as_a_module_is_a_load_that_did_not_hold():
    run = unit_run()
    result, _said = drive(run.calls.load(), [("kv_stress", {"failed": True, "msg": "boom"})])
    assert result == {"held": False, "failure_reason": "boom"}


def test_this_runs_kv_trial_takes_and_releases_the_lock_and_notes_a_change():
    run = unit_run()
    run.state.settings = {"confirm_timeout": 100}
    drive(run.calls.own_trial("locked"), [("kv_trial locked", {"changed": False})])
    assert run.locked and not run.state.changed
    drive(run.calls.own_trial("started", "0.910"), [("kv_trial started 0.910", {"changed": True})])
    assert run.state.changed
    drive(run.calls.own_trial("unlocked"), [("kv_trial unlocked", {"failed": True})])
    assert run.locked   # a release that failed holds nothing back: the lock lapses, the action warns


def node_zero():
    run = unit_run()
    run.state.settings, run.state.ranks = {"confirm_timeout": 100}, [1]
    run.calls.leader = Leader(run.ctx, run.state)
    return run


def test_node_zero_commits_only_once_every_node_staged_the_pin():
    acks = [{"rank": 1, "host": "gpu2", "ok": True}]
    _result, _said = drive(node_zero().calls.trial("committed", "0.910", {"f": 0.91}), [
        ("nodes tell", 0), ("nodes answers", acks), ("kv_trial prepared 0.910", {}),
        ("nodes tell", 1), ("nodes answers", acks), ("kv_trial committed 0.910", {"changed": True})], nodes=True)


def test_node_zero_reverts_itself_before_it_tells_the_others():
    drive(node_zero().calls.trial("reverted"), [
        ("kv_trial reverted", {"changed": True}), ("nodes tell", 0), ("nodes answers", [])], nodes=True)

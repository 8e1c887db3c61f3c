# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""run/aftercare.py: after a unit's run, every server that shares its GPUs serves again and holds the joint load."""
from __future__ import annotations

from ansible_collections.llmserve.sglang.plugins.plugin_utils.run.unit_run import UnitRun
from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner.run_settings import with_defaults
from ansible_collections.llmserve.sglang.tests.unit.plugins.plugin_utils.run.scripted_run import ARGS, INFO, drive

NEIGHBOUR = dict(INFO, invocation_id="B0", url="http://127.0.0.1:30001")


def run_with_a_neighbour():
    run = UnitRun("gpu1", "gpu1/a", with_defaults(dict(ARGS, unit="a.service")), False, "r1", "ctl", lambda: "t",
                  neighbours={"b.service": NEIGHBOUR})
    run.state.changed = True
    return run


def test_a_neighbour_that_did_not_restart_needs_nothing():
    result, said = drive(run_with_a_neighbour().finish({"status": "tuned", "line": "tuned"}), [
        ("kv_fingerprint", {"invocation_id": "B0"})])
    assert (result["unit"], result["label"], said) == ("a.service", "gpu1/a", [])


def test_a_neighbour_restarted_during_the_search_must_hold_the_joint_load_again():
    result, said = drive(run_with_a_neighbour().finish({"status": "tuned", "line": "gpu1/a: tuned"}), [
        ("kv_fingerprint", {"invocation_id": "B1"}), ("kv_trial reverted", {"invocation_id": "B2"}),
        ("sglang_ready", {"ready": True}), ("kv_stress", {"held": True, "min_free_gib": 0.4})])
    assert result["failed"] and result["msg"] == (
        "gpu1/a: tuned; a.service and b.service, restarted on their last-known-good values, do not hold the load "
        "together with 1.0 GiB to spare (0.4 GiB free): run tune_kv.yml again")
    assert said == ["gpu1/a: b.service, which shares its GPUs, stopped or restarted during the search: restarting it "
                    "on its last-known-good value"]


def test_a_neighbour_that_does_not_come_back_fails_the_unit():
    result, _said = drive(run_with_a_neighbour().finish({"status": "tuned"}), [
        ("kv_fingerprint", {"running": False}), ("kv_trial reverted", {"failed": True, "msg": "start failed"}),
        ("sglang_ready", {"ready": False, "reason": "unit_failed", "detail": "exited"})])
    assert result["msg"] == "b.service, which shares the GPUs of a.service, DOES NOT SERVE: start failed"

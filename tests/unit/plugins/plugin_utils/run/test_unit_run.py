# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""run/unit_run.py: the run's generators driven directly, without the action: a tiny interpreter
(scripted_run.drive) answers each step from a script, the way plugins/action/kv_tune.py performs them
(tests/unit/plugins/action/ drives the same run through the action against a scripted host, one case per path)."""
from __future__ import annotations

import pytest

from ansible_collections.llmserve.sglang.plugins.plugin_utils.run.steps import RunFailed
from ansible_collections.llmserve.sglang.plugins.plugin_utils.run.unit_run import UnitRun
from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner.run_settings import with_defaults
from ansible_collections.llmserve.sglang.tests.unit.plugins.plugin_utils.run.scripted_run import (
    ARGS, PIN, drive, unit_run)


def test_a_pin_that_holds_is_reported_after_one_look():
    result, said = drive(unit_run().steps(), [("kv_fingerprint", {"pin": PIN, "mem_fraction_static": 0.92})])
    assert result["status"] == "unchanged" and not result["changed"]
    assert said == ["gpu1: sglang.service keeps 0.920 (131,000 KV tokens), pinned 2026-11-30T10:00:00Z: "
                    "fingerprint unchanged."]


def test_check_mode_says_why_it_would_tune_and_calls_nothing_more():
    result, said = drive(unit_run(check_mode=True).steps(), [("kv_fingerprint", None)])
    assert (result["status"], result["changed"], result["why"]) == ("would_tune", False, "never tuned")
    assert said == ["gpu1: sglang.service would be tuned (never tuned); check mode restarts nothing."]


def test_a_search_measures_the_running_value_then_pins_the_next_that_holds():
    run = unit_run()
    result, said = drive(run.steps(), [
        ("kv_fingerprint", None),
        ("kv_trial locked", {"changed": False}),
        ("sglang_ready", {"ready": True, "invocation_id": "I0"}),
        ("sglang_startup_facts", None),
        ("sglang_ready", {"ready": True, "invocation_id": "I0"}),
        ("kv_stress", {"held": True, "min_free_gib": 4.27, "min_free_gib_per_gpu": {"0": 4.27}}),
        ("kv_fingerprint", None),
        ("sglang_startup_facts", None),
        ("kv_trial committed 0.880", {"changed": True}),
        ("kv_trial started 0.920", {"changed": True, "invocation_id": "I1"}),
        ("sglang_ready", {"ready": True, "invocation_id": "I1"}),
        ("kv_stress", {"held": True, "min_free_gib": 1.2, "min_free_gib_per_gpu": {"0": 1.2}}),
        ("kv_fingerprint", {"mem_fraction_static": 0.92, "invocation_id": "I1"}),
        ("sglang_startup_facts", {"server_args": {"mem_fraction_static": 0.92}, "max_total_num_tokens": 199753}),
        ("kv_trial committed 0.920", {"changed": True}),
    ])
    assert result["status"] == "tuned" and result["result"]["after"]["mem_fraction_static"] == 0.92
    assert run.locked and run.state.changed
    assert any("tuning sglang.service (never tuned) from 0.880" in line for line in said)
    # the action's cleanup: the lock released as this run
    _none, _said = drive(run.unlock(), [("kv_trial unlocked", {"changed": False})])
    assert not run.locked
    finished, _said = drive(run.finish(result), [])
    assert (finished["unit"], finished["label"]) == ("sglang.service", "gpu1")


def test_a_unit_that_another_run_holds_is_refused():
    with pytest.raises(RunFailed, match="sglang.service is held by run other from ctl2 pid 9"):
        drive(unit_run().steps(), [("kv_fingerprint", {"lock": {"live": True, "run_id": "other",
                                                                "controller": "ctl2 pid 9"}})])


def test_a_caller_that_holds_the_lock_keeps_it():
    run = UnitRun("gpu1", "gpu1", with_defaults(dict(ARGS, run_id="r1")), False, "r1", "ctl pid 1", lambda: "t",
                  lock_held=True)
    assert drive(run.unlock(), []) == (None, [])

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The run's generators driven directly, without the action: a tiny interpreter in this file answers each step from a
script, the way plugins/action/kv_tune.py performs them (tests/unit/plugins/action/ drives the same run through the
action against a scripted host, one case per path)."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from ansible_collections.llmserve.sglang.plugins.plugin_utils.run import host as host_run
from ansible_collections.llmserve.sglang.plugins.plugin_utils.run.steps import RunFailed
from ansible_collections.llmserve.sglang.plugins.plugin_utils.run.unit_run import UnitRun
from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner.run_settings import with_defaults

CONFIG = json.loads((Path(__file__).resolve().parents[4] / "fixtures" / "configs" / "llama-3.1-70b.json").read_text())
FP = {"gpu": {"name": "NVIDIA H100 80GB HBM3", "count": 8, "memory_total_mib": 81559},
      "versions": {"driver": "580.1", "cuda": "13.0", "sglang": "0.5.9"},
      "model": {"path": "/models/llama-3.1-70b"}, "server_args": {"tp_size": 8}}
INFO = {"takes_kv_args": True, "lock": None, "stale": [], "running": True, "trial_pending": False,
        "revert_timers": [], "pin": None, "pin_error": None, "fingerprint": FP, "fingerprint_hash": "H1",
        "mem_fraction_static": 0.88, "gpu_memory": [], "url": "http://127.0.0.1:30000", "invocation_id": "I0",
        "checkpoint_bytes": None, "config": CONFIG, "sglang_version": "0.5.9",
        "server_args": {"tp_size": 8, "mem_fraction_static": 0.88}, "changed": False}
BOOT = {"pre_load_free_gib": 78.5, "post_load_free_gib": 13.9, "max_total_num_tokens": 117440,
        "kv_size_gib": 4.5, "server_args": {"mem_fraction_static": 0.88}}
ARGS = {"unit": "sglang.service", "units": None, "start": None, "cap": 0.98, "resolution": 0.005, "safety_gib": 1.0,
        "budget": 6, "min_tokens": None, "force": False, "reset": False, "model_revision": None,
        "url": "http://127.0.0.1:30000", "api_key": None, "ready_timeout": 1800, "ready_interval": 5,
        "stress_fill_ratio": 0.95, "stress_duration": 120, "confirm_timeout": None, "strategy": "per_host",
        "class_margin_steps": 0, "class_plan": None, "pin_tokens": False, "run_id": None, "watch": None}
PIN = {"mem_fraction_static": 0.92, "text": "0.920", "fingerprint_hash": "H1", "tokens": 131000,
       "time": "2026-11-30T10:00:00Z", "settings": {"resolution": 0.005}}


def drive(steps, script):
    """Perform ``steps`` as the action does: each call answered by the next script entry ``(what, answer)``, which
    must name it (``kv_trial <state> [<value>]`` for kv_trial); lines said are collected. (result, lines)."""
    script, said, answer = list(script), [], None
    while True:
        try:
            step = steps.send(answer)
        except StopIteration as stop:
            assert not script, "the run ended before %s" % [what for what, _answer in script]
            return stop.value, said
        assert set(step) <= {"call", "args", "may_fail", "say"}, step   # nothing but calls and lines here
        if "say" in step:
            said.append(step["say"])
        answer = None
        if "call" in step:
            what = step["call"]
            if what == "kv_trial":
                what = " ".join(["kv_trial", step["args"]["state"]] + ([step["args"]["value"]]
                                                                       if "value" in step["args"] else []))
            assert script, "unexpected %s %s" % (what, step["args"])
            expected, answer = script.pop(0)
            assert what == expected, "%s, the script expects %s" % (what, expected)
            base = {"kv_fingerprint": INFO, "sglang_startup_facts": BOOT}.get(step["call"], {})
            answer = dict(copy.deepcopy(base), **(answer or {}))


def unit_run(check_mode=False, **args):
    return UnitRun("gpu1", "gpu1", with_defaults(dict(ARGS, **args)), check_mode, "r1", "ctl pid 1", lambda: "2026-12-06T00:00:00Z")


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
    run = UnitRun("gpu1", "gpu1", with_defaults(dict(ARGS, run_id="r1")), False, "r1", "ctl pid 1", lambda: "t", lock_held=True)
    assert drive(run.unlock(), []) == (None, [])


def test_a_host_of_one_unit_runs_it_as_one_step():
    steps = host_run.host_steps("gpu1", dict(ARGS))
    step = next(steps)
    assert (step["tune_unit"], step["label"], step["info"], step["neighbours"]) == ("sglang.service", "gpu1", None, {})
    with pytest.raises(StopIteration) as stop:
        steps.send({"changed": False, "status": "unchanged", "unit": "sglang.service", "label": "gpu1"})
    assert stop.value.value["status"] == "unchanged"

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""tuner/start_value.py: whether there is anything to do, what settles first, and a failed start."""
from __future__ import annotations

import pytest

from ansible_collections.llmserve.sglang.plugins.module_utils.capacity import kv_search
from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner import run_settings
from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner import start_value
from ansible_collections.llmserve.sglang.tests.unit.plugins.plugin_utils.tuner.tuner_standins import DEFAULT_SETTINGS, FP, BOOT


PIN = {"mem_fraction_static": 0.91, "fingerprint_hash": "H", "fingerprint": FP, "tokens": 202389,
       "time": "2026-11-30T10:00:00Z", "settings": {"resolution": 0.005}}


INFO = {"takes_kv_args": True, "trial_pending": False, "running": True, "pin": PIN, "fingerprint": FP,
        "fingerprint_hash": "H", "mem_fraction_static": 0.91}


@pytest.mark.parametrize("changes, force, check_mode, expected", [
    ({}, False, False, {"do": "report", "status": "unchanged"}),
    ({}, True, False, {"do": "tune", "why": "kv_tune_force", "dry_run": False}),
    ({}, True, True, {"do": "tune", "why": "kv_tune_force", "dry_run": True}),
    ({"pin": None}, False, False, {"do": "tune", "why": "never tuned"}),
    ({"takes_kv_args": False}, False, False, {"do": "refuse"}),
    ({"takes_kv_args": False, "running": False}, False, False, {"do": "refuse"}),
    ({"trial_pending": True}, False, False, {"do": "revert", "why": "a trial of an earlier run was never confirmed"}),
    ({"running": False}, False, False, {"do": "revert", "why": "sglang.service was not running"}),
    ({"running": False}, False, True, {"do": "report", "status": "would_tune"}),
])
def test_plan_start(changes, force, check_mode, expected):
    plan = start_value.plan_start(dict(INFO, **changes), "h1", "sglang.service", force, check_mode)
    assert {key: plan.get(key) for key in expected} == expected, plan
    if plan["do"] == "refuse":
        assert "cannot be tuned: its ExecStart does not end with $LLMSERVE_KV_ARGS" in plan["msg"]
    if check_mode:
        assert "check mode" in plan["line"]
    if plan.get("status") == "unchanged":
        assert plan["line"].endswith("fingerprint unchanged.")


@pytest.mark.parametrize("pin_changes, pin_tokens, check_mode, expected", [
    ({}, True, False, {"do": "repin", "change": "cap"}),
    ({}, True, True, {"do": "report", "status": "would_tune"}),
    ({"max_total_tokens": 202389}, True, False, {"do": "report", "status": "unchanged"}),
    ({"max_total_tokens": 202389}, False, False, {"do": "repin", "change": "uncap"}),
    ({"max_total_tokens": 202389}, None, False, {"do": "report", "status": "unchanged"}),   # another node of a server
    ({}, None, False, {"do": "report", "status": "unchanged"}),
])
def test_plan_start_rewrites_a_pin_that_holds_for_kv_tune_pin_tokens(pin_changes, pin_tokens, check_mode, expected):
    info = dict(INFO, pin=dict(PIN, **pin_changes))
    plan = start_value.plan_start(info, "h1", "sglang.service", check_mode=check_mode, pin_tokens=pin_tokens)
    assert {key: plan.get(key) for key in expected} == expected, plan
    if plan["do"] == "repin" or plan.get("status") == "would_tune":
        assert "no restart" in plan["why"]
    # a pin that needs tuning anyway is tuned: the commit writes the cap
    plan = start_value.plan_start(dict(info, fingerprint_hash="H2"), "h1", "sglang.service", pin_tokens=pin_tokens)
    assert plan["do"] == "tune"


GIB = 2 ** 30


def gpus(other_on_3=0, server=True):
    return [{"index": i, "total_bytes": 96 * GIB, "reserved_bytes": GIB // 2, "server_bytes": 80 * GIB if server else 0,
             "other_bytes": other_on_3 * GIB if i == 3 else 0,
             "other_processes": [{"pid": 90003, "name": "/usr/bin/python3"}] if i == 3 and other_on_3 else []}
            for i in range(8)]


@pytest.mark.parametrize("memory, unbalanced", [
    (gpus(), False), (gpus(other_on_3=8), False), (gpus(other_on_3=12), True), (gpus(other_on_3=12, server=False), True),
    (gpus(other_on_3=12)[3:4], False), (None, False),
])
def test_gpu_imbalance(memory, unbalanced):
    found = start_value.gpu_imbalance(memory)
    assert (found is not None) == unbalanced, found
    if unbalanced:
        assert "GPU 3: 12.0 GiB held by pid 90003 (/usr/bin/python3)" in found and "nothing was restarted" in found


@pytest.mark.parametrize("changes, expected", [
    ({"lock": {"run_id": "1f2e3d4c", "controller": "ops1 pid 7", "renewed": 0, "expires": 9e9, "live": True}},
     {"do": "refuse"}),
    ({"lock": {"run_id": "1f2e3d4c", "live": False}}, {"do": "report", "status": "unchanged"}),
    ({"stale": ["sglang 0.5.10 was installed at T, after the server started"]}, {"do": "restart"}),
    ({"revert_timers": ["llmserve-kv-revert-9a8b7c6d-sglang.timer"]}, {"do": "disarm"}),
    ({"trial_pending": True, "gpu_memory": gpus(other_on_3=12)}, {"do": "refuse"}),
    ({"pin": None, "gpu_memory": gpus(other_on_3=12)}, {"do": "refuse"}),
    ({"revert_timers": ["x"], "gpu_memory": gpus(other_on_3=12)}, {"do": "disarm"}),
    ({"pin": None, "pin_error": "the pin of sglang.service in F cannot be used: its mem_fraction_static 'a' is not a "
                                "number in (0, 1)"}, {"do": "tune"}),
])
def test_plan_start_before_anything_restarts(changes, expected):
    plan = start_value.plan_start(dict(INFO, **changes), "h1", "sglang.service")
    assert {key: plan.get(key) for key in expected} == expected, plan
    if "lock" in changes and plan["do"] == "refuse":
        assert "is held by run 1f2e3d4c from ops1 pid 7" in plan["msg"]
    if "pin_error" in changes:
        assert plan["why"].startswith("the pin of sglang.service")


@pytest.mark.parametrize("failure, tunable", [
    ({"kind": "init_oom", "line": "Not enough memory"}, True), ({"kind": "capture_oom", "line": "x"}, True),
    ({"kind": "runtime_oom", "line": "x"}, True), ({"kind": "crash", "line": "ImportError: y"}, False),
    ({"kind": "unbalanced_memory", "line": "z"}, False), (None, False),
])
def test_a_failed_last_known_good_start(failure, tunable):
    message = start_value.failed_start({"failure": failure}, "sglang.service", "0.910")
    assert (message is None) == tunable, message
    if message:
        assert "does not start on its last-known-good value 0.910" in message


STOPPED = dict(INFO, running=False, invocation_id="I4", stale=[])
FAILED_BOOT = {"ready": False, "server_args": {"mem_fraction_static": 0.91},
               "failure": {"kind": "capture_oom", "line": "Capture cuda graph failed: CUDA out of memory"}}


@pytest.mark.parametrize("info, boot, skips", [
    (STOPPED, FAILED_BOOT, True),
    (STOPPED, dict(FAILED_BOOT, failure={"kind": "init_oom", "line": "torch.OutOfMemoryError"}), True),
    # what the start says nothing about the pin now
    (dict(STOPPED, stale=["sglang 0.5.10 was installed at 2026-12-07T01:00:00Z, after the server started"]),
     FAILED_BOOT, False),
    (dict(STOPPED, running=True), FAILED_BOOT, False),
    (dict(STOPPED, trial_pending=True), FAILED_BOOT, False),
    (dict(STOPPED, invocation_id=None), FAILED_BOOT, False),
    (dict(STOPPED, pin=None), FAILED_BOOT, False),
    # another value's start (a trial's, a hand-made one), a start that served, another failure, no log
    (STOPPED, dict(FAILED_BOOT, server_args={"mem_fraction_static": 0.85}), False),
    (STOPPED, dict(FAILED_BOOT, ready=True), False),
    (STOPPED, dict(FAILED_BOOT, failure={"kind": "nccl_error", "line": "NCCL error"}), False),
    (STOPPED, dict(FAILED_BOOT, failure={"kind": "weights_oom", "line": "CUDA out of memory"}), False),
    (STOPPED, {}, False),
])
def test_a_stopped_unit_is_tuned_from_its_pins_failed_start_only_when_that_start_is_the_pin_on_this_disk(
        info, boot, skips):
    """A start is read only where it can tell (failed_start_to_read); its failure is the pin's for a lack of memory,
    or the pin is started again (issue 35: the rollout stops what its upgrade's start left failing)."""
    readable = start_value.failed_start_to_read(info)
    why = start_value.stopped_after_failing(info, boot)
    assert (why is not None) == skips, why
    if skips:
        assert readable == "I4"
        assert why.startswith("its last start, on the last-known-good value 0.91 and what is on disk now, failed for "
                              "a lack of memory (%s: " % boot["failure"]["kind"]), why


def test_a_node_says_its_last_start_was_its_pins_whatever_ended_it():
    """pin_failed_last: what a node of a server that spans hosts tells node 0 as it joins; its own log may show only
    the lost connection to the node that ran out of memory, which node 0 reads with every node's."""
    echo = dict(FAILED_BOOT, failure={"kind": "nccl_error", "line": "NCCL error: remote process exited"})
    assert start_value.pin_failed_last(STOPPED, echo) and start_value.stopped_after_failing(STOPPED, echo) is None
    assert start_value.pin_failed_last(STOPPED, dict(FAILED_BOOT, failure=None))
    for info, boot in [(dict(STOPPED, stale=["sglang 0.5.10 was installed after the server started"]), echo),
                       (dict(STOPPED, running=True), echo), (dict(STOPPED, pin=None), echo),
                       (STOPPED, dict(echo, server_args={"mem_fraction_static": 0.85})),
                       (STOPPED, dict(echo, ready=True)), (STOPPED, {})]:
        assert not start_value.pin_failed_last(info, boot), (info, boot)


def test_safe_start_is_sglangs_default_above_the_formula_and_at_most_the_cap():
    fp = {"gpu": {"memory_total_mib": 97887}, "versions": {"sglang": "0.5.9"}, "server_args": {"tp_size": 8}}
    settings = run_settings.check_settings(DEFAULT_SETTINGS)
    start = start_value.safe_start(BOOT, fp, None, settings)
    assert 0.77 < start < 0.98 and kv_search.on_grid(start, 0.005)
    assert start_value.safe_start({"pre_load_free_gib": 94.04, "post_load_free_gib": 2.0}, fp, None, settings) >= 0.98 - 1e-9
    low_cap = run_settings.check_settings(dict(DEFAULT_SETTINGS, cap=0.8))
    assert start_value.safe_start(BOOT, fp, None, low_cap) == 0.8


def test_a_runs_own_lock_is_no_reason_to_refuse():
    info = dict(INFO, lock={"run_id": "1f2e3d4c", "live": True}, pin=None)
    assert start_value.plan_start(info, "h1", "sglang.service", run_id="1f2e3d4c")["do"] == "tune"
    assert start_value.plan_start(info, "h1", "sglang.service", run_id="9a8b7c6d")["do"] == "refuse"


# The rollout armed a trial of 0.935 without a restart (kv_trial restart=false), and its upgrade restart started the
# new release on it: run 1f2e3d4c's own timer, the server runs the trial's value.
OWN = dict(INFO, trial_pending=True, trial_value=0.935, mem_fraction_static=0.935, fingerprint_hash="H2",
           revert_timers=["llmserve-kv-revert-1f2e3d4c-sglang.timer"])


def test_a_trial_this_run_armed_and_the_server_runs_is_tuned_from_not_reverted():
    plan = start_value.plan_start(OWN, "h1", "sglang.service", run_id="1f2e3d4c")
    assert plan["do"] == "tune"
    assert plan["why"].startswith("sglang.service runs this run's trial 0.935 (")
    assert plan["why"].endswith("): verifying it under the load")
    # the same with nothing else to tune for: still verified, never "unchanged" under an armed timer
    plan = start_value.plan_start(dict(OWN, fingerprint_hash="H", mem_fraction_static=0.935, trial_value=0.935,
                                       pin=dict(PIN, mem_fraction_static=0.935)), "h1", "sglang.service",
                                  run_id="1f2e3d4c")
    assert (plan["do"], plan["why"]) == ("tune", "sglang.service runs this run's trial 0.935: verifying it under the load")


@pytest.mark.parametrize("changes, run_id", [
    ({}, "9a8b7c6d"),                                                      # another run's trial
    ({}, None),
    ({"revert_timers": ["llmserve-kv-revert-9a8b7c6d-sglang.timer"]}, "1f2e3d4c"),   # its timer is another run's
    ({"mem_fraction_static": 0.91}, "1f2e3d4c"),        # the upgrade did not restart it: the server runs the pin
    ({"trial_value": None}, "1f2e3d4c"),                 # a drop-in that does not say its value
    ({"stale": ["SGLang installed after the start"]}, "1f2e3d4c"),
])
def test_any_other_pending_trial_is_settled_first(changes, run_id):
    plan = start_value.plan_start(dict(OWN, **changes), "h1", "sglang.service", run_id=run_id)
    assert plan["do"] in ("revert", "restart"), plan


def test_a_stopped_unit_with_this_runs_trial_is_started_on_its_pin():
    plan = start_value.plan_start(dict(OWN, running=False, mem_fraction_static=None), "h1", "sglang.service",
                                  run_id="1f2e3d4c")
    assert plan == {"do": "revert", "why": "a trial of an earlier run was never confirmed"}

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""rollout: what a failure in each phase means for the host, its outcome and the fleet summary."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ansible_collections.llmserve.sglang.plugins.plugin_utils.fleet import rollout


def fingerprint(sglang, driver="580.95.05", model="/models/field/model"):
    return {"fingerprint": {"versions": {"sglang": sglang, "driver": driver, "cuda": "13.0"},
                            "model": {"path": model, "config_sha256": "ab"}}}


BEFORE, AFTER = fingerprint("0.5.9"), fingerprint("0.5.10")
FAILURE = {"task": "Sglang service | Fail with the journal and the classified failure",
           "msg": "sglang.service did not answer a real generation (unit_restarted after 3.1 s)"}


@pytest.mark.parametrize("phase, roll_back, undrain", [
    ("lock", False, False),
    ("gate_before", False, False),
    ("drain", False, True),
    ("upgrade", True, True),
    ("gate_after", True, True),
    ("retune", True, True),
    ("undrain", False, False),
])
def test_rescue_plan_by_phase(phase, roll_back, undrain):
    plan = rollout.rescue_plan(phase, BEFORE)
    assert plan["roll_back"] == roll_back and plan["undrain"] == undrain
    assert plan["version"] == ("0.5.9" if roll_back else None)
    assert plan["gate"] == (roll_back or undrain) and not plan["no_record"]


def test_rescue_plan_without_a_recorded_version_rolls_nothing_back():
    plan = rollout.rescue_plan("upgrade", None)
    assert not plan["roll_back"] and plan["version"] is None and plan["no_record"]


def test_unknown_phase_is_refused():
    with pytest.raises(rollout.RolloutError, match="unknown rollout phase 'later'"):
        rollout.rescue_plan("later")
    with pytest.raises(rollout.RolloutError):
        rollout.outcome("gpu1", "later")


def test_done_upgraded_and_unchanged():
    row = rollout.outcome("gpu1", "done", BEFORE, AFTER, retune={"status": "tuned", "why": "versions.sglang"})
    assert row["status"] == "upgraded" and not row["failed"] and row["error"] is None
    assert row["line"] == ("gpu1: SGLang 0.5.9, driver 580.95.05, model /models/field/model -> SGLang 0.5.10, "
                           "driver 580.95.05, model /models/field/model; re-tune: tuned")
    assert (row["before"]["sglang"], row["after"]["sglang"], row["retune"]) == ("0.5.9", "0.5.10", "tuned")
    same = rollout.outcome("gpu1", "done", AFTER, AFTER, retune={"status": "unchanged"})
    assert same["status"] == "unchanged" and same["line"].startswith("gpu1: keeps SGLang 0.5.10")


def test_failed_upgrade_rolled_back_and_serving():
    plan = rollout.rescue_plan("upgrade", BEFORE)
    row = rollout.outcome("gpu1", "upgrade", BEFORE, BEFORE, failure=FAILURE, plan=plan, gate={"ready": True})
    assert row["status"] == "rolled_back" and row["failed"]
    assert row["msg"].startswith("gpu1: the upgrade (nvidia_driver, sglang, sglang_service) failed (task 'Sglang "
                                 "service | Fail with the journal and the classified failure'): sglang.service did "
                                 "not answer")
    assert row["msg"].endswith("rolled back: back on SGLang 0.5.9, driver 580.95.05, model /models/field/model and "
                               "serving.")
    assert row["line"].startswith("gpu1: FAILED in upgrade; rolled back")


def test_roll_back_that_does_not_serve_or_fails():
    plan = rollout.rescue_plan("gate_after", BEFORE)
    row = rollout.outcome("gpu1", "gate_after", BEFORE, BEFORE, failure=FAILURE, plan=plan,
                          gate={"ready": False, "reason": "unit_failed"})
    assert row["status"] == "rollback_failed" and "NOT serving" in row["msg"] and "unit_failed" in row["msg"]
    row = rollout.outcome("gpu1", "retune", BEFORE, AFTER, failure=FAILURE, plan=rollout.rescue_plan("retune", BEFORE),
                          rollback={"failed": True, "msg": "pip: no matching distribution"},
                          gate={"ready": False, "reason": "unit_failed"})
    assert row["status"] == "rollback_failed" and "roll-back to SGLang 0.5.9 failed too (pip" in row["msg"]
    assert row["msg"].endswith("the host runs SGLang 0.5.10, driver 580.95.05, model /models/field/model and is NOT "
                               "serving (unit_failed).")


def test_a_roll_back_that_failed_says_what_the_host_really_runs():
    # issue 32, item 1: the reinstall failed, the host still answered on the new release, and the outcome said
    # "the host is NOT serving" without asking
    row = rollout.outcome("gpu1", "retune", BEFORE, AFTER, failure=FAILURE, plan=rollout.rescue_plan("retune", BEFORE),
                          rollback={"failed": True, "msg": "pip: no matching distribution"}, gate={"ready": True})
    assert row["status"] == "rollback_failed" and "NOT serving" not in row["msg"]
    assert "failed too (pip: no matching distribution); the host runs SGLang 0.5.10" in row["msg"]
    assert row["msg"].endswith("and serves (a real generation answered).")


PIN_059 = {"mem_fraction_static": 0.85, "text": "0.850", "fingerprint_hash": "b" * 64, "tokens": 150000,
           "versions": {"sglang": "0.5.9"}, "max_total_tokens": 150000}


@pytest.mark.parametrize("before, pin, restart", [
    # issue 32, item 1: the re-tune pinned 0.885 on 0.5.10; the roll-back to 0.5.9 puts back the 0.850 verified there
    (dict(BEFORE, pin=PIN_059, pin_error=None), {"state": "committed", "value": "0.850", "fact": PIN_059}, True),
    # an entry written without its text: the value's own shortest form
    (dict(BEFORE, pin=dict(PIN_059, text=None, mem_fraction_static=0.88)),
     {"state": "committed", "value": "0.88", "fact": dict(PIN_059, text=None, mem_fraction_static=0.88)}, True),
    # never tuned before: whatever the new release pinned goes (kv_trial's reset restarts the unit itself)
    (dict(BEFORE, pin=None, pin_error=None), {"state": "reset"}, False),
    # a pin that could not be read then: left as it is
    (dict(BEFORE, pin=None, pin_error="the pin of sglang.service cannot be used"), None, True),
    (dict(BEFORE, pin={"mem_fraction_static": "high"}), None, True),
])
def test_a_roll_back_puts_back_the_pin_verified_on_the_release_it_restores(before, pin, restart):
    for phase in rollout.CHANGED_PHASES:
        plan = rollout.rescue_plan(phase, before)
        assert plan["roll_back"] and plan["pin"] == pin and plan["restart"] is restart
    for phase in ("lock", "gate_before", "drain", "undrain"):
        plan = rollout.rescue_plan(phase, before)
        assert plan["pin"] is None and plan["restart"] is False


def test_failures_before_the_upgrade_and_in_the_undrain_hook():
    row = rollout.outcome("gpu1", "gate_before", None, None, failure={"msg": "timeout"},
                          plan=rollout.rescue_plan("gate_before", None))
    assert row["status"] == "not_upgraded" and "did not serve before the upgrade" in row["msg"]
    assert row["before"] == {"sglang": None, "driver": None, "model": None}
    row = rollout.outcome("gpu1", "drain", BEFORE, None, failure={"msg": "HTTP 500"},
                          plan=rollout.rescue_plan("drain", BEFORE), gate={"ready": True})
    assert row["status"] == "not_upgraded" and "still on SGLang 0.5.9" in row["msg"] and "NOT" not in row["msg"]
    assert row["after"]["sglang"] == "0.5.9"
    row = rollout.outcome("gpu1", "undrain", BEFORE, AFTER, failure={"msg": "HTTP 500"},
                          plan=rollout.rescue_plan("undrain", BEFORE))
    assert row["status"] == "undrain_failed" and "upgraded to SGLang 0.5.10" in row["msg"] and "drained" in row["msg"]


def test_a_unit_another_run_holds_is_left_as_it_is():
    """The tuning lock is taken before the gate: a unit that a tune holds is neither gated, drained nor changed."""
    plan = rollout.rescue_plan("lock", None)
    assert not (plan["roll_back"] or plan["undrain"] or plan["gate"] or plan["no_record"])
    row = rollout.outcome("gpu1", "lock", None, AFTER, plan=plan, failure={
        "task": "Rollout | Take the unit's tuning lock", "msg": "sglang.service is held by run 1f2e3d4c from ops1 pid 7"})
    assert row["status"] == "not_upgraded" and row["failed"]
    assert row["msg"] == ("gpu1: taking the unit's tuning lock failed (task 'Rollout | Take the unit's tuning lock'): "
                          "sglang.service is held by run 1f2e3d4c from ops1 pid 7; nothing was changed: another run "
                          "holds the unit.")
    assert row["after"]["sglang"] == "0.5.10"


def test_no_recorded_version_says_so():
    row = rollout.outcome("gpu1", "upgrade", None, AFTER, failure=FAILURE, plan=rollout.rescue_plan("upgrade", None))
    assert row["status"] == "rollback_failed" and "no SGLang version was recorded" in row["msg"]


def test_long_failure_messages_are_shortened():
    row = rollout.outcome("gpu1", "upgrade", BEFORE, BEFORE, failure={"msg": "journal line\n" * 200},
                          plan=rollout.rescue_plan("upgrade", BEFORE), gate={"ready": True})
    assert len(row["error"]) < 500 and "\n" not in row["error"] and row["error"].endswith("...")


def test_summary_rows():
    done = rollout.outcome("gpu1", "done", BEFORE, AFTER)
    rows = rollout.summary_rows({"gpu2": None, "gpu1": done, "gpu3": None}, pending={"gpu3"})
    assert [row["host"] for row in rows] == ["gpu1", "gpu2", "gpu3"]
    assert rows[0]["status"] == "upgraded" and rows[0]["after"]["sglang"] == "0.5.10" and "msg" not in rows[0]
    assert rows[1]["status"] == "unknown" and "NO OUTCOME" in rows[1]["line"]
    assert rows[2]["status"] == "not_started" and "NOT STARTED" in rows[2]["line"]
    assert [row["host"] for row in rows if rollout.failed_row(row)] == ["gpu2"]


# --- the inputs, before any host is touched -------------------------------------------------------------------------

HOOK = "/srv/hooks/drain.yml"
UNHOOK = "/srv/hooks/undrain.yml"
GOOD = {"sglang_version": "0.5.10", "rollout_serial": [1, "25%"], "rollout_drain_tasks": HOOK,
        "rollout_undrain_tasks": UNHOOK, "rollout_gate_timeout": 120, "rollout_ready_interval": 5,
        "rollout_ready_timeout": "1800", "rollout_max_fail_percentage": 0, "rollout_unit": "sglang@a.service",
        "rollout_url": "http://127.0.0.1:30000", "rollout_retune": "yes", "nvidia_driver_branch": 580,
        "nvidia_driver_version": "580.105.08"}
FILES = frozenset({HOOK, UNHOOK, "/work/playbooks/rollout_hooks/example_lb_drain.yml"})


@pytest.mark.parametrize("version", ["0.5.10", "0.4.6.post5", "0.5.0rc2", "1!2.0.dev1", "0.5.9+cu128", "1"])
def test_a_pep_440_version_is_accepted(version):
    assert rollout.input_problems(dict(GOOD, sglang_version=version), FILES) == []


@pytest.mark.parametrize("changes, problem", [
    ({"sglang_version": ""}, "sglang_version must be an exact PEP 440 version such as 0.5.10 or 0.4.6.post5 (got '')"),
    ({"sglang_version": "0.5.9 && reboot"}, "sglang_version must be an exact PEP 440 version"),
    ({"sglang_version": ">=0.5.9"}, "sglang_version must be an exact PEP 440 version"),
    ({"sglang_version": "0.5.*"}, "sglang_version must be an exact PEP 440 version"),
    ({"sglang_version": "v0.5.9"}, "sglang_version must be an exact PEP 440 version"),
    ({"sglang_version": "0.5.9\n"}, "sglang_version must be an exact PEP 440 version"),
    ({"rollout_serial": 0}, "rollout_serial each batch must be a host count >= 1"),
    ({"rollout_serial": [1, "0%"]}, "rollout_serial a percentage must lie in (0, 100]% (got '0%')"),
    ({"rollout_serial": "150%"}, "rollout_serial a percentage must lie in (0, 100]%"),
    ({"rollout_serial": []}, "rollout_serial must name at least one batch"),
    ({"rollout_serial": [True]}, "rollout_serial each batch must be a host count"),
    ({"rollout_serial": "all"}, "rollout_serial each batch must be a host count"),
    ({"rollout_max_fail_percentage": 101}, "rollout_max_fail_percentage must lie in [0, 100] (got 101)"),
    ({"rollout_gate_timeout": 0}, "rollout_gate_timeout must lie in [1, 21600] (got 0)"),
    ({"rollout_gate_timeout": "1e12"}, "rollout_gate_timeout must lie in [1, 21600]"),
    ({"rollout_ready_timeout": "soon"}, "rollout_ready_timeout must be a whole number (got 'soon')"),
    ({"rollout_ready_interval": 0}, "rollout_ready_interval must lie in [1, 60]"),
    ({"rollout_unit": "sglang; reboot"}, "rollout_unit must be a systemd service name"),
    ({"rollout_url": "127.0.0.1:30000"}, "rollout_url must be an http:// or https:// URL"),
    ({"rollout_retune": "maybe"}, "rollout_retune must be true or false (got 'maybe')"),
    ({"rollout_lock_lease": 60}, "rollout_lock_lease must lie in [600, 86400] (got 60)"),
    ({"rollout_lock_lease": "1e9"}, "rollout_lock_lease must lie in [600, 86400]"),
    ({"rollout_hook_timeout": 0}, "rollout_hook_timeout must lie in [10, 21600] (got 0)"),
    ({"rollout_hook_timeout": "forever"}, "rollout_hook_timeout must be a whole number"),
    ({"rollout_drain_tasks": "/srv/hooks/missing.yml"},
     "rollout_drain_tasks must be empty or a task file on the controller, absolute or relative to the playbook: "
     "/srv/hooks/missing.yml is not a regular file"),
    ({"rollout_undrain_tasks": "/srv/hooks"}, "rollout_undrain_tasks must be empty or a task file"),
    ({"rollout_undrain_tasks": ""}, "rollout_drain_tasks is set without rollout_undrain_tasks"),
    ({"nvidia_driver_branch": "58", "nvidia_driver_version": ""}, "nvidia_driver_branch must be a driver branch such as '580'"),
    ({"nvidia_driver_version": "570.1.2"}, "nvidia_driver_version must be empty or an upstream version"),
])
def test_a_bad_input_is_named(changes, problem):
    problems = rollout.input_problems(dict(GOOD, **changes), FILES)
    assert len(problems) == 1 and problem in problems[0], problems


def test_the_role_defaults_and_no_input_pass():
    """A host that sets nothing takes the roles' defaults (empty hooks, the default batches) and passes."""
    assert rollout.input_problems({}) == []
    assert rollout.input_problems({"rollout_drain_tasks": "", "rollout_undrain_tasks": "",
                                   "rollout_serial": [1, "25%"], "nvidia_driver_version": ""}) == []


def test_a_relative_hook_is_the_playbooks():
    values = {"rollout_drain_tasks": "rollout_hooks/example_lb_drain.yml",
              "rollout_undrain_tasks": "rollout_hooks/example_lb_drain.yml"}
    assert rollout.input_problems(values, FILES, "/work/playbooks") == []
    assert rollout.input_problems(values, FILES, "/elsewhere") != []


def test_check_inputs_names_every_bad_input_and_its_hosts():
    with pytest.raises(rollout.RolloutError) as error:
        rollout.check_inputs({"h1": dict(GOOD, sglang_version=""), "h2": dict(GOOD, sglang_version=""),
                              "h3": dict(GOOD, rollout_gate_timeout=0), "h4": GOOD}, FILES)
    message = str(error.value)
    assert message.startswith("Invalid input for playbooks/rollout.yml, nothing was done: ")
    assert "(got '') (h1, h2)" in message and "rollout_gate_timeout must lie in [1, 21600] (got 0) (h3)" in message
    assert "h4" not in message


def test_check_inputs_says_what_it_checked():
    assert rollout.check_inputs({"h1": GOOD, "h2": dict(GOOD, sglang_version="0.5.9"), "h3": {}}, FILES) == {
        "hosts": 3, "sglang_versions": ["0.5.10", "0.5.9"]}


def test_the_rollout_roles_defaults_pass():
    """The defaults a host takes when it sets nothing (roles/rollout/defaults/main.yml, sglang's version) are valid."""
    root = Path(__file__).resolve().parents[5]
    defaults = yaml.safe_load((root / "roles" / "rollout" / "defaults" / "main.yml").read_text())
    defaults.update(sglang_version=yaml.safe_load((root / "roles" / "sglang" / "defaults" / "main.yml").read_text())
                    ["sglang_version"])
    plain = {name: value for name, value in defaults.items() if name in rollout.INPUTS and "{{" not in str(value)}
    assert "sglang_version" in plain and rollout.input_problems(plain) == []


@pytest.mark.parametrize("topology, problems", [
    # issue 32, item 2: rollout.yml restarted sglang@b on the new release with no lock, gate or re-tune
    ({"sglang_service_instances": [{"name": "a"}, {"name": "b", "server_args": {"port": 30001}}],
      "rollout_unit": "sglang@a.service"},
     ["sglang_service_instances gives this host the servers sglang@a.service, sglang@b.service, and rollout.yml "
      "upgrades exactly one server per host (rollout_unit sglang@a.service)"]),
    # ... and a server that spans two hosts (it restarted the server, then failed with rc 2)
    ({"sglang_service_server_args": {"nnodes": 2, "node-rank": 0}},
     ["sglang_service_server_args sets nnodes 2: a server that spans hosts must change on all its nodes together"]),
    ({"sglang_service_instances": [{"name": "a", "server_args": {"nnodes": "2"}}],
      "rollout_unit": "sglang@a.service"},
     ["sglang_service_instances[0].server_args sets nnodes 2"]),
    # what rollout.yml handles: one server, the one it gates, on one host
    ({"sglang_service_instances": [{"name": "a"}], "rollout_unit": "sglang@a.service"}, []),
    ({"sglang_service_name": "llm", "rollout_unit": "llm.service", "sglang_service_server_args": {"nnodes": 1}}, []),
    ({}, []),
])
def test_a_topology_rollout_yml_does_not_handle_is_refused_first(topology, problems):
    values = dict(GOOD, **topology)
    if "rollout_unit" not in topology:
        values.pop("rollout_unit", None)
    found = rollout.input_problems(values, FILES)
    assert len(found) == len(problems) and all(want in got for want, got in zip(problems, found)), found
    if problems:
        with pytest.raises(rollout.RolloutError, match="nothing was done"):
            rollout.check_inputs({"h1": values}, FILES)

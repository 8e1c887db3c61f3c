# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""rollout: what a failure in each phase means for a host's servers (re-tune or roll back), each server's outcome and
the fleet summary."""
from __future__ import annotations

import pytest

from ansible_collections.llmserve.sglang.plugins.plugin_utils.fleet import rollout

UNIT = "sglang.service"
PIN_059 = {"mem_fraction_static": 0.85, "text": "0.850", "fingerprint_hash": "b" * 64, "tokens": 150000,
           "versions": {"sglang": "0.5.9"}, "max_total_tokens": 150000}
PIN_0510 = dict(PIN_059, mem_fraction_static=0.82, text="0.820", tokens=171234, max_total_tokens=None)


def fingerprint(sglang, unit=UNIT, driver="580.95.05", model="/models/field/model", pin=None, **more):
    """A kv_fingerprint result as a loop over rollout_units registers it."""
    return dict({"item": unit, "fingerprint": {"versions": {"sglang": sglang, "driver": driver, "cuda": "13.0"},
                                               "model": {"path": model, "config_sha256": "ab"}},
                 "url": "http://127.0.0.1:30000", "pin": pin}, **more)


def boot(kind=None, unit=UNIT, line="torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"):
    """sglang_startup_facts of a unit's last start, as a loop registers it."""
    return {"item": unit, "failure": {"kind": kind, "line": line} if kind else None}


BEFORE, AFTER = [fingerprint("0.5.9", pin=PIN_059)], [fingerprint("0.5.10", pin=PIN_0510)]
FAILURE = {"task": "Sglang service | Fail with the journal and the classified failure",
           "result": {"msg": "sglang.service did not answer a real generation (unit_restarted after 3.1 s)"}}
READY = [{"item": fingerprint("0.5.9"), "ready": True}]


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
    assert plan["roll_back"] == roll_back and plan["undrain"] == undrain and not plan["retune"]
    assert plan["version"] == ("0.5.9" if roll_back else None)
    assert plan["gate"] == (roll_back or undrain) and not plan["no_record"]
    assert plan["restart"] == ([UNIT] if roll_back else [])


@pytest.mark.parametrize("boots, memory", [
    # issue 35, item 2: the old pin runs out of memory on the new release at start, in the graph capture or under
    # the load: a value of --mem-fraction-static fixes that
    ([boot("init_oom", line="RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.")], True),
    ([boot("capture_oom")], True),
    ([boot("runtime_oom")], True),
    # not about memory: rolled back
    ([boot("crash", line="ImportError: cannot import name 'x' from 'sglang.srt'")], False),
    ([boot("weights_oom")], False),
    ([boot("nccl_error", line="NCCL error")], False),
    ([boot("unbalanced_memory", line="The memory capacity is unbalanced.")], False),
    # a gate that failed while every server started cleanly: memory to spare
    ([boot(None)], False),
    ([], False),
    # two servers: one ran out of memory and the other crashed: not a lack of memory alone
    ([boot("capture_oom", unit="sglang@a.service"), boot("crash", unit="sglang@b.service", line="Segfault")], False),
    # one ran out of memory, the other started: re-tune the host
    ([boot("capture_oom", unit="sglang@a.service"), boot(None, unit="sglang@b.service")], True),
])
def test_a_lack_of_memory_on_the_new_release_is_re_tuned_anything_else_rolled_back(boots, memory):
    for phase in rollout.RETUNE_PHASES:
        plan = rollout.rescue_plan(phase, BEFORE, boots=boots)
        assert plan["retune"] is memory and plan["cause"]["memory"] is memory
        assert plan["roll_back"] is not memory and plan["gate"] and plan["undrain"]
        assert plan["stop"] == ([unit for unit, boot in rollout.per_unit(boots).items() if boot["failure"]]
                                if memory else [])
    cause = rollout.failure_cause(boots)["why"]
    assert cause.startswith("a lack of memory on the old pin (") if memory else "lack of memory on" not in cause


def test_the_units_failure_is_named_in_the_cause():
    cause = rollout.failure_cause([boot("capture_oom", unit="sglang@a.service"), boot(None, unit="sglang@b.service")])
    assert cause["why"] == ("a lack of memory on the old pin (sglang@a.service: capture_oom: torch.OutOfMemoryError: "
                            "CUDA out of memory. Tried to allocate 2.00 GiB)")
    cause = rollout.failure_cause([boot("crash", line="ImportError: no module named flashinfer")])
    assert cause["why"] == "not a lack of memory (sglang.service: crash: ImportError: no module named flashinfer)"


def test_no_retune_when_the_operator_says_so_or_the_failure_came_later():
    memory = [boot("init_oom")]
    assert not rollout.rescue_plan("upgrade", BEFORE, boots=memory, retune=False)["retune"]
    assert rollout.rescue_plan("upgrade", BEFORE, boots=memory, retune=False)["roll_back"]
    # a re-tune that fails is not re-tuned again: the host goes back
    plan = rollout.rescue_plan("retune", BEFORE, boots=memory)
    assert not plan["retune"] and plan["roll_back"] and plan["cause"] is None


def test_rescue_plan_without_a_recorded_version_rolls_nothing_back():
    plan = rollout.rescue_plan("upgrade", None)
    assert not plan["roll_back"] and plan["version"] is None and plan["no_record"]


def test_unknown_phase_is_refused():
    with pytest.raises(rollout.RolloutError, match="unknown rollout phase 'later'"):
        rollout.rescue_plan("later")
    with pytest.raises(rollout.RolloutError):
        rollout.outcome("gpu1", "later")


def test_done_upgraded_and_unchanged():
    out = rollout.outcome("gpu1", "done", [UNIT], BEFORE, AFTER, retune={"status": "tuned", "why": "versions.sglang"})
    row, = out["rows"]
    assert row["status"] == "upgraded" and not row["failed"] and row["error"] is None and not out["failed"]
    assert row["line"] == ("gpu1: SGLang 0.5.9, driver 580.95.05, model /models/field/model -> SGLang 0.5.10, "
                           "driver 580.95.05, model /models/field/model; re-tune: tuned, pin 0.850 (150,000 tokens) "
                           "-> 0.820 (171,234 tokens)")
    assert (row["before"]["sglang"], row["after"]["sglang"], row["retune"]) == ("0.5.9", "0.5.10", "tuned")
    assert row["pin_before"] == {"value": "0.850", "tokens": 150000}
    assert row["pin_after"] == {"value": "0.820", "tokens": 171234}
    same = rollout.outcome("gpu1", "done", [UNIT], AFTER, AFTER, retune={"status": "unchanged"})["rows"][0]
    assert same["status"] == "unchanged" and same["line"].startswith("gpu1: keeps SGLang 0.5.10")


def test_failed_upgrade_rolled_back_and_serving():
    plan = rollout.rescue_plan("upgrade", BEFORE, boots=[boot(None)])
    out = rollout.outcome("gpu1", "upgrade", [UNIT], BEFORE, BEFORE, failure=FAILURE, plan=plan, gate=READY)
    row, = out["rows"]
    assert row["status"] == "rolled_back" and row["failed"] and out["failed"]
    assert out["msg"].startswith("gpu1: the upgrade (nvidia_driver, sglang, sglang_service) failed (task 'Sglang "
                                 "service | Fail with the journal and the classified failure'): sglang.service did "
                                 "not answer")
    assert "; no server's startup log shows a failure a value of --mem-fraction-static fixes;" in out["msg"]
    assert out["msg"].endswith("rolled back: back on SGLang 0.5.9, driver 580.95.05, model /models/field/model and "
                               "serving.")
    assert row["line"].startswith("gpu1: FAILED in upgrade; rolled back")


def test_a_crash_on_the_new_release_is_rolled_back_and_says_it_was_not_memory():
    plan = rollout.rescue_plan("upgrade", BEFORE, boots=[boot("crash", line="ImportError: bad wheel")])
    row = rollout.outcome("gpu1", "upgrade", [UNIT], BEFORE, BEFORE, failure=FAILURE, plan=plan, gate=READY)["rows"][0]
    assert row["status"] == "rolled_back"
    assert row["cause"] == "not a lack of memory (sglang.service: crash: ImportError: bad wheel)"
    assert "not a lack of memory (sglang.service: crash: ImportError: bad wheel)" in row["error"]


def test_a_memory_failure_re_tuned_keeps_the_upgrade_with_its_numbers():
    plan = rollout.rescue_plan("upgrade", BEFORE, boots=[boot("capture_oom")])
    out = rollout.outcome("gpu1", "upgrade", [UNIT], BEFORE, AFTER, failure=FAILURE, plan=plan, gate=READY,
                          retune={"status": "tuned"}, retuned=True)
    row, = out["rows"]
    assert not out["failed"] and row["status"] == "retuned" and not rollout.failed_row(row)
    assert row["line"] == (
        "gpu1: SGLang 0.5.9, driver 580.95.05, model /models/field/model -> SGLang 0.5.10, driver 580.95.05, model "
        "/models/field/model; the upgrade (nvidia_driver, sglang, sglang_service) failed for a lack of memory on the "
        "old pin (sglang.service: capture_oom: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 "
        "GiB): re-tuned for the new release, pin 0.850 (150,000 tokens) -> 0.820 (171,234 tokens)")
    assert (row["pin_before"]["value"], row["pin_after"]["value"], row["retune"]) == ("0.850", "0.820", "tuned")


def test_a_re_tune_that_found_no_value_rolls_back_and_says_both():
    first = rollout.rescue_plan("upgrade", BEFORE, boots=[boot("init_oom")])
    plan = dict(rollout.rescue_plan("retune", BEFORE), cause=first["cause"])
    out = rollout.outcome("gpu1", "upgrade", [UNIT], BEFORE, BEFORE, failure=FAILURE, plan=plan, gate=READY,
                          retune_failure={"task": "Kv tune | Stop when the search did not end on a stable value",
                                          "result": {"msg": "no stable value above 0.700"}})
    row, = out["rows"]
    assert out["failed"] and row["status"] == "rolled_back"
    assert ("; a lack of memory on the old pin (sglang.service: init_oom: torch.OutOfMemoryError: CUDA out of memory."
            " Tried to allocate 2.00 GiB), and the re-tune for the new release failed (task 'Kv tune | Stop when the "
            "search did not end on a stable value'): no stable value above 0.700;") in row["msg"]


def test_a_re_tuned_host_whose_server_does_not_answer_fails():
    plan = rollout.rescue_plan("upgrade", BEFORE, boots=[boot("init_oom")])
    out = rollout.outcome("gpu1", "upgrade", [UNIT], BEFORE, AFTER, failure=FAILURE, plan=plan,
                          gate=[{"item": fingerprint("0.5.10"), "ready": False, "reason": "unit_failed"}],
                          retune={"status": "tuned"}, retuned=True)
    assert out["failed"] and out["rows"][0]["status"] == "not_serving" and "unit_failed" in out["msg"]
    # ... and one whose undrain hook failed after it: upgraded and serving, but still drained
    out = rollout.outcome("gpu1", "upgrade", [UNIT], BEFORE, AFTER, failure=FAILURE, plan=plan, gate=READY,
                          retune={"status": "tuned"}, retuned=True, undrain_failure={"result": {"msg": "HTTP 500"}})
    assert out["failed"] and out["rows"][0]["status"] == "undrain_failed"
    assert "then the undrain hook failed: HTTP 500" in out["msg"] and "but still drained" in out["msg"]


TWO = ["sglang@a.service", "sglang@b.service"]
BEFORE_TWO = [fingerprint("0.5.9", unit, pin=PIN_059) for unit in TWO]
AFTER_TWO = [fingerprint("0.5.10", unit, pin=PIN_0510) for unit in TWO]


def test_two_servers_of_a_host_are_rolled_back_together_a_row_each():
    """issue 35, item 1: sglang@b failed; both run the host's SGLang, so both go back, each with its own pin."""
    failure = {"task": "Rollout | A real generation from each server", "result": {"msg": "One or more items failed",
               "results": [{"item": {"item": "sglang@a.service"}, "ready": True, "failed": False},
                           {"item": {"item": "sglang@b.service"}, "ready": False, "failed": True,
                            "msg": "sglang@b.service did not answer"}]}}
    plan = rollout.rescue_plan("gate_after", BEFORE_TWO, boots=[boot(None, unit) for unit in TWO])
    assert plan["roll_back"] and plan["restart"] == TWO
    assert [pin["unit"] for pin in plan["pins"]] == TWO and {pin["value"] for pin in plan["pins"]} == {"0.850"}
    gates = [{"item": fingerprint("0.5.9", unit), "ready": True} for unit in TWO]
    out = rollout.outcome("gpu1", "gate_after", TWO, BEFORE_TWO, BEFORE_TWO, failure=failure, plan=plan, gate=gates)
    assert out["failed"] and [row["server"] for row in out["rows"]] == ["gpu1/sglang@a", "gpu1/sglang@b"]
    assert {row["status"] for row in out["rows"]} == {"rolled_back"} and {row["host"] for row in out["rows"]} == {"gpu1"}
    assert ("the health gate after the upgrade failed (task 'Rollout | A real generation from each server'): "
            "sglang@b.service: sglang@b.service did not answer") in out["msg"]
    rows = rollout.summary_rows({"gpu1": out, "gpu2": None}, pending={"gpu2"})
    assert [row["server"] for row in rows] == ["gpu1/sglang@a", "gpu1/sglang@b", "gpu2"]


def test_two_servers_re_tuned_together_a_row_each():
    plan = rollout.rescue_plan("upgrade", BEFORE_TWO, boots=[boot("capture_oom", TWO[0]), boot(None, TWO[1])])
    gates = [{"item": fingerprint("0.5.10", unit), "ready": True} for unit in TWO]
    retune = {"status": "tuned", "units": {unit: {"status": "tuned", "unit": unit} for unit in TWO}}
    out = rollout.outcome("gpu1", "upgrade", TWO, BEFORE_TWO, AFTER_TWO, failure=FAILURE, plan=plan, gate=gates,
                          retune=retune, retuned=True)
    assert not out["failed"] and {row["status"] for row in out["rows"]} == {"retuned"}
    # one server that does not answer after the re-tune fails the host: every row says so
    gates[1] = dict(gates[1], ready=False, reason="timeout")
    out = rollout.outcome("gpu1", "upgrade", TWO, BEFORE_TWO, AFTER_TWO, failure=FAILURE, plan=plan, gate=gates,
                          retune=retune, retuned=True)
    assert out["failed"] and {row["status"] for row in out["rows"]} == {"not_serving"}


def test_roll_back_that_does_not_serve_or_fails():
    plan = rollout.rescue_plan("gate_after", BEFORE)
    row = rollout.outcome("gpu1", "gate_after", [UNIT], BEFORE, BEFORE, failure=FAILURE, plan=plan,
                          gate=[{"item": fingerprint("0.5.9"), "ready": False, "reason": "unit_failed"}])["rows"][0]
    assert row["status"] == "rollback_failed" and "NOT serving" in row["msg"] and "unit_failed" in row["msg"]
    row = rollout.outcome("gpu1", "retune", [UNIT], BEFORE, AFTER, failure=FAILURE,
                          plan=rollout.rescue_plan("retune", BEFORE),
                          rollback={"failed": True, "msg": "pip: no matching distribution"},
                          gate=[{"item": fingerprint("0.5.9"), "ready": False, "reason": "unit_failed"}])["rows"][0]
    assert row["status"] == "rollback_failed" and "roll-back to SGLang 0.5.9 failed too (pip" in row["msg"]
    assert row["msg"].endswith("the host runs SGLang 0.5.10, driver 580.95.05, model /models/field/model and is NOT "
                               "serving (unit_failed).")


def test_a_roll_back_that_failed_says_what_the_host_really_runs():
    # issue 32, item 1: the reinstall failed, the host still answered on the new release, and the outcome said
    # "the host is NOT serving" without asking
    row = rollout.outcome("gpu1", "retune", [UNIT], BEFORE, AFTER, failure=FAILURE,
                          plan=rollout.rescue_plan("retune", BEFORE),
                          rollback={"failed": True, "msg": "pip: no matching distribution"}, gate=READY)["rows"][0]
    assert row["status"] == "rollback_failed" and "NOT serving" not in row["msg"]
    assert "failed too (pip: no matching distribution); the host runs SGLang 0.5.10" in row["msg"]
    assert row["msg"].endswith("and serves (a real generation answered).")


@pytest.mark.parametrize("before, pin, restart", [
    # issue 32, item 1: the re-tune pinned 0.885 on 0.5.10; the roll-back to 0.5.9 puts back the 0.850 verified there
    (fingerprint("0.5.9", pin=PIN_059, pin_error=None), {"state": "committed", "value": "0.850", "fact": PIN_059}, True),
    # an entry written without its text: the value's own shortest form
    (fingerprint("0.5.9", pin=dict(PIN_059, text=None, mem_fraction_static=0.88)),
     {"state": "committed", "value": "0.88", "fact": dict(PIN_059, text=None, mem_fraction_static=0.88)}, True),
    # never tuned before: whatever the new release pinned goes (kv_trial's reset restarts the unit itself)
    (fingerprint("0.5.9", pin=None, pin_error=None), {"state": "reset"}, False),
    # a pin that could not be read then: left as it is
    (fingerprint("0.5.9", pin=None, pin_error="the pin of sglang.service cannot be used"), None, True),
    (fingerprint("0.5.9", pin={"mem_fraction_static": "high"}), None, True),
])
def test_a_roll_back_puts_back_the_pin_verified_on_the_release_it_restores(before, pin, restart):
    for phase in rollout.CHANGED_PHASES:
        plan = rollout.rescue_plan(phase, [before])
        assert plan["roll_back"] and plan["pins"] == ([dict(pin, unit=UNIT)] if pin else [])
        assert plan["restart"] == ([UNIT] if restart else [])
    for phase in ("lock", "gate_before", "drain", "undrain"):
        plan = rollout.rescue_plan(phase, [before])
        assert plan["pins"] == [] and plan["restart"] == []


def test_failures_before_the_upgrade_and_in_the_undrain_hook():
    row = rollout.outcome("gpu1", "gate_before", [UNIT], None, None, failure={"msg": "timeout"},
                          plan=rollout.rescue_plan("gate_before", None))["rows"][0]
    assert row["status"] == "not_upgraded" and "did not serve before the upgrade" in row["msg"]
    assert row["before"] == {"sglang": None, "driver": None, "model": None}
    row = rollout.outcome("gpu1", "drain", [UNIT], BEFORE, None, failure={"msg": "HTTP 500"},
                          plan=rollout.rescue_plan("drain", BEFORE), gate=READY)["rows"][0]
    assert row["status"] == "not_upgraded" and "still on SGLang 0.5.9" in row["msg"] and "NOT" not in row["msg"]
    assert row["after"]["sglang"] == "0.5.9"
    row = rollout.outcome("gpu1", "undrain", [UNIT], BEFORE, AFTER, failure={"msg": "HTTP 500"},
                          plan=rollout.rescue_plan("undrain", BEFORE))["rows"][0]
    assert row["status"] == "undrain_failed" and "upgraded to SGLang 0.5.10" in row["msg"] and "drained" in row["msg"]


def test_a_unit_another_run_holds_is_left_as_it_is():
    """The tuning lock is taken before the gate: a unit that a tune holds is neither gated, drained nor changed."""
    plan = rollout.rescue_plan("lock", None)
    assert not (plan["roll_back"] or plan["undrain"] or plan["gate"] or plan["no_record"] or plan["retune"])
    out = rollout.outcome("gpu1", "lock", [UNIT], None, AFTER, plan=plan, failure={
        "task": "Rollout | Take the units' tuning locks", "result": {"msg": "One or more items failed", "results": [
            {"item": UNIT, "failed": True, "msg": "sglang.service is held by run 1f2e3d4c from ops1 pid 7"}]}})
    row, = out["rows"]
    assert row["status"] == "not_upgraded" and row["failed"]
    assert out["msg"] == ("gpu1: taking the units' tuning locks failed (task 'Rollout | Take the units' tuning locks'): "
                          "sglang.service: sglang.service is held by run 1f2e3d4c from ops1 pid 7; nothing was "
                          "changed: another run holds the unit.")
    assert row["after"]["sglang"] == "0.5.10"


def test_no_recorded_version_says_so():
    row = rollout.outcome("gpu1", "upgrade", [UNIT], None, AFTER, failure=FAILURE,
                          plan=rollout.rescue_plan("upgrade", None))["rows"][0]
    assert row["status"] == "rollback_failed" and "no SGLang version was recorded" in row["msg"]


def test_long_failure_messages_are_shortened():
    row = rollout.outcome("gpu1", "upgrade", [UNIT], BEFORE, BEFORE, failure={"msg": "journal line\n" * 200},
                          plan=rollout.rescue_plan("upgrade", BEFORE), gate=READY)["rows"][0]
    assert len(row["error"]) < 500 and "\n" not in row["error"] and "journal lin...; no server's" in row["error"]


def test_summary_rows():
    done = rollout.outcome("gpu1", "done", [UNIT], BEFORE, AFTER)
    rows = rollout.summary_rows({"gpu2": None, "gpu1": done, "gpu3": None}, pending={"gpu3"})
    assert [row["host"] for row in rows] == ["gpu1", "gpu2", "gpu3"]
    assert rows[0]["status"] == "upgraded" and rows[0]["after"]["sglang"] == "0.5.10" and "msg" not in rows[0]
    assert rows[1]["status"] == "unknown" and "NO OUTCOME" in rows[1]["line"]
    assert rows[2]["status"] == "not_started" and "NOT STARTED" in rows[2]["line"]
    assert [row["host"] for row in rows if rollout.failed_row(row)] == ["gpu2"]


NODES = ["m1", "m2"]


@pytest.mark.parametrize("node_boots, memory", [
    # node 1 ran out of memory in its graph capture; node 0 lost its peer: the echo, not another failure
    ({"m1": [boot("nccl_error", line="NCCL error: remote process exited")], "m2": [boot("capture_oom")]}, True),
    # both lost each other and nothing ran out of memory: not memory
    ({"m1": [boot("nccl_error", line="NCCL error")], "m2": [boot("nccl_error", line="NCCL error")]}, False),
    # node 1 crashed (an import error): not memory, whatever node 0 says
    ({"m1": [boot("nccl_error", line="NCCL error")], "m2": [boot("crash", line="ImportError: x")]}, False),
    ({"m1": [boot("init_oom")], "m2": [boot(None)]}, True),
])
def test_the_nodes_of_a_server_decide_alike_from_every_nodes_log(node_boots, memory):
    """issue 35, item 1: each node of a two-node server decides from both nodes' startup logs, so both re-tune or
    both roll back."""
    plans = [rollout.rescue_plan("upgrade", BEFORE, boots=node_boots[host], node_boots=node_boots) for host in NODES]
    assert [plan["retune"] for plan in plans] == [memory, memory]
    assert [plan["roll_back"] for plan in plans] == [not memory, not memory]
    assert plans[0]["cause"] == plans[1]["cause"]
    if memory:
        assert "m2 sglang.service: capture_oom" in plans[0]["cause"]["why"] or "m1 sglang.service: init_oom" in \
            plans[0]["cause"]["why"]


def test_a_kept_cause_survives_the_plan_after_a_failed_re_tune():
    cause = {"memory": True, "why": "a lack of memory on the old pin (x)"}
    plan = rollout.rescue_plan("retune", BEFORE, cause=cause)
    assert plan["cause"] == cause and plan["roll_back"] and not plan["retune"]


def test_a_node_sees_its_peers_failure_and_whether_all_kept_the_re_tune():
    peers = {"m1": {"__rollout_phase": "upgrade", "__rollout_retuned": True},
             "m2": {"__rollout_phase": "upgrade", "__rollout_retuned": False,
                    "failed": {"msg": "sglang.service did not answer a real generation\n(unit_restarted)"}}}
    state = rollout.peers_state("m1", NODES, peers)
    assert state == {"failed": ["m2 failed in phase upgrade: sglang.service did not answer a real generation "
                                "(unit_restarted)"], "retuned": False}
    # a node does not count its own failure as a peer's
    assert rollout.peers_state("m2", NODES, peers)["failed"] == []
    peers["m2"]["__rollout_retuned"] = True
    assert rollout.peers_state("m1", NODES, peers)["retuned"] is True


CAPPED = dict(PIN_059, fingerprint_hash="b" * 64, max_total_tokens=150000)


@pytest.mark.parametrize("pin, on_disk_hash, dropped", [
    # issue 35, item 4: 0.5.10 is installed, the fingerprint on disk changed: the cap sized for 0.5.9's cells goes
    (CAPPED, "c" * 64, True),
    # nothing changed on disk (a rollout with nothing to do): the cap stays
    (CAPPED, "b" * 64, False),
    # no cap, a cap decided against (a hybrid model), no pin, a pin that cannot be read: nothing to drop
    (dict(CAPPED, max_total_tokens=None), "c" * 64, False),
    (None, "c" * 64, False),
    ({"mem_fraction_static": "high"}, "c" * 64, False),
    # the unit could not be fingerprinted on disk: left as it is (the restart's own checks fail it)
    (CAPPED, None, False),
])
def test_a_pool_cap_of_the_old_release_is_not_carried_into_the_new_one(pin, on_disk_hash, dropped):
    before = [fingerprint("0.5.9", pin=pin)]
    on_disk = [dict(fingerprint("0.5.10"), fingerprint_hash=on_disk_hash)]
    found = rollout.uncapped_pins(before, on_disk)
    if dropped:
        assert found == [{"unit": UNIT, "value": "0.850", "fact": {k: v for k, v in CAPPED.items()
                                                                   if k != "max_total_tokens"}}]
        assert "max_total_tokens" not in found[0]["fact"] and found[0]["fact"]["tokens"] == 150000
    else:
        assert found == []


def test_the_rescue_reads_the_start_seen_failing_not_one_systemd_began_since():
    # sglang_service's wait saw sglang@a's start I1 fail; the gate after it saw sglang@b's start I7 end; sglang@c
    # answered. Systemd may have begun I2 and I8 since (RestartSec), whose logs say nothing yet.
    gate = [{"item": {"item": "sglang@b.service"}, "ready": False, "reason": "unit_restarted",
             "failed_invocation_id": "I7"},
            {"item": {"item": "sglang@c.service"}, "ready": True, "failed_invocation_id": None}]
    found = rollout.failed_starts({"sglang@a.service": "I1"}, gate)
    assert found == {"sglang@a.service": "I1", "sglang@b.service": "I7"}
    # the gate's word is the later one; nothing seen failing gives nothing to pin the read to
    assert rollout.failed_starts({"sglang@b.service": "I6"}, gate)["sglang@b.service"] == "I7"
    assert rollout.failed_starts(None, None) == {} and rollout.failed_starts({"sglang@a.service": None}, []) == {}

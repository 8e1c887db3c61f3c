# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""tuner/tuner.py: the tuner's decisions from observations alone (test_tuner.yaml) and its records (fact, report, lines, summary)."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from ansible_collections.llmserve.sglang.plugins.module_utils.service import fingerprint
from ansible_collections.llmserve.sglang.plugins.module_utils.service import host_units
from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner import pool_model
from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner import report_lines
from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner import run_settings
from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner import start_value
from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner import tuner as tuner_search
from ansible_collections.llmserve.sglang.tests.unit.plugins.plugin_utils.tuner.tuner_standins import DEFAULT_SETTINGS, FP, BOOT


CASES = yaml.safe_load((Path(__file__).parent / "test_tuner.yaml").read_text())


def make_tuner(spec):
    settings = run_settings.check_settings(dict(DEFAULT_SETTINGS, **spec.get("settings", {})))
    boot = spec.get("boot", dict(BOOT, server_args={"mem_fraction_static": spec["running_value"]}))
    start, _source = start_value.first_value("h1", settings, spec["running_value"], spec.get("verify"),
                                             safe=spec.get("start"))
    return tuner_search.Tuner("h1", settings, spec.get("reason", "never tuned"), spec["running_value"], boot, FP, "H",
                              start, lower_bound=spec.get("lower_bound"), invocation_id=spec.get("invocation_id", "I0"),
                              verify=spec.get("verify"))


def observation(raw, step):
    """The modules' results of a step, with the defaults the YAML leaves out (see its header)."""
    obs = copy.deepcopy(raw)
    start = "I%d" % step.get("n", 0) if step.get("restart") else "I0"
    if step["do"] == "trial":
        if step["restart"]:
            obs.setdefault("started", {"invocation_id": start})
        obs.setdefault("ready", {"ready": True})
        obs["ready"].setdefault("invocation_id", start)
        boot = dict(BOOT, server_args={"mem_fraction_static": step["value"]})
        boot.update(obs.get("boot") or {})
        obs["boot"] = boot
    running = obs.get("running", {})
    if running.get("running") is False:
        obs["running"] = None
    elif step["do"] in ("trial", "revert"):
        obs["running"] = dict({"running": True, "mem_fraction_static": step.get("value"), "fingerprint_hash": "H",
                               "fingerprint": FP, "invocation_id": start if step["do"] == "trial" else "R"}, **running)
    return obs


@pytest.mark.parametrize("case", CASES, ids=[case["id"] for case in CASES])
def test_tuner_case(case):
    tuner = make_tuner(case["tuner"])
    step = tuner.first_step()
    for number, item in enumerate(case["steps"]):
        where = "%s, step %d: %s" % (case["id"], number, step)
        if "observe" in item:
            was_trial = step["do"] == "trial"
            step = json.loads(json.dumps(tuner.advance(observation(item["observe"], step))))
            where = "%s, step %d: %s" % (case["id"], number, step)
            if "progress" in item:
                assert was_trial and item["progress"] in tuner.progress_line(), (tuner.progress_line(), where)
        for key, value in item["expect"].items():
            assert step.get(key) == value, (key, where)
    result = json.loads(json.dumps(tuner.result(step.get("status"), "t0", "t1", FP["versions"])))
    for key, value in case.get("result", {}).items():
        if isinstance(value, dict):
            for sub, expected in value.items():
                assert result[key][sub] == expected, (key, sub, result[key])
        else:
            assert result[key] == value, (key, result)
    if "line" in case:
        assert report_lines.result_line(result) == case["line"]
    if "msg" in case:
        assert case["msg"] in step["msg"], step


def test_every_case_ends_or_stops_where_it_says():
    assert all(case["steps"] for case in CASES)


def test_a_start_without_a_value_or_above_the_cap_is_refused():
    with pytest.raises(run_settings.TuneError, match="has no --mem-fraction-static"):
        make_tuner({"running_value": None, "boot": {}})
    with pytest.raises(run_settings.TuneError, match=r"kv_tune_cap \(0.98\) is below the value sglang.service runs \(0.990\)"):
        make_tuner({"running_value": 0.99})


def test_a_lower_bound_above_the_cap_leaves_the_cap_to_try():
    tuner = make_tuner({"running_value": 0.88, "lower_bound": 0.95, "settings": {"cap": 0.9}})
    step = tuner.first_step()
    tuner.advance(observation({"stress": {"held": True, "min_free_gib": 0.5}}, step))
    assert tuner.state["floor"] == 0.895


PIN = {"mem_fraction_static": 0.91, "fingerprint_hash": "H", "fingerprint": FP, "tokens": 202389,
       "time": "2026-11-30T10:00:00Z", "settings": {"resolution": 0.005}}


@pytest.mark.parametrize("pin, digest, running, force, reason", [
    (PIN, "H", 0.91, False, None),
    (PIN, "H", 0.91, True, "kv_tune_force"),
    (None, "H", 0.91, False, "never tuned"),
    (PIN, "OTHER", 0.91, False, "fingerprint changed: versions.driver"),
    (PIN, "H", 0.88, False, "the server runs 0.88, not the pinned 0.91"),
    (PIN, "H", None, False, "the server runs None, not the pinned 0.91"),
])
def test_retune_reason(pin, digest, running, force, reason):
    fp = copy.deepcopy(FP)
    if digest != "H":
        fp["versions"]["driver"] = "580.2"
    assert fingerprint.retune_reason(pin, fp, digest, running, force) == reason


def tuned():
    tuner = make_tuner({"running_value": 0.88})
    step = tuner.first_step()
    tuner.advance(observation({"stress": {"held": True, "min_free_gib": 4.27}}, step))
    step = tuner.advance({})
    tuner.advance(observation({"stress": {"held": True, "min_free_gib": 1.29}, "boot": {"max_total_num_tokens": 202389}},
                              step))
    return tuner


def test_fact_entry_and_report():
    tuner = tuned()
    entry = tuner.fact_entry("t1")
    assert entry["mem_fraction_static"] == 0.91 and entry["text"] == "0.910" and entry["tokens"] == 202389
    assert [t["text"] for t in entry["trials"]] == ["0.880", "0.910"]
    assert set(entry["trials"][0]) == set(tuner_search.FACT_TRIAL_KEYS)
    assert entry["fingerprint_hash"] == "H" and entry["settings"]["resolution"] == 0.005
    result = tuner.result("tuned", "t0", "t1", FP["versions"])
    report = report_lines.report_markdown(result)
    assert "| after | 0.910 | 202,389 |" in report and "| 2 | 0.910 | yes | stable |" in report
    assert report.count("| stable |") == 2 and "## Fingerprint `H`" in report


def test_summary_rows():
    result = tuned().result("tuned", "t0", "t1", FP["versions"])
    rows = report_lines.summary_rows({"a": {"status": "tuned", "result": result}, "b": {"status": "unchanged", "pin": PIN},
                                      "c": None, "d": {"status": "would_tune", "why": "never tuned"}})
    assert [row["status"] for row in rows] == ["tuned", "unchanged",
                                               "not tuned: failed or unreachable, left on its last-known-good value",
                                               "would be tuned (check mode)"]
    assert rows[0]["line"] == "h1: 0.880 -> 0.910, KV 159,282 -> 202,389 tokens (+27%), 1 restart"
    assert rows[1]["after"] == 0.91 and rows[1]["tuned_at"] == PIN["time"]


def test_summary_rows_carry_the_watchs_verdict_and_proposal():
    watch = report_lines.watch_summary({
        "verdict": "headroom", "reasons": ["6 steps free"], "retune": None, "pool_tokens": 202389,
        "proposal": "headroom under real traffic (6 steps free): kv_tune_watch_action=act would search from the pin",
        "evidence": {"windows": 288, "spare_steps": 6, "proposed_value": 0.94, "value": 0.91}})
    assert watch["evidence"] == {"windows": 288, "spare_steps": 6, "proposed_value": 0.94}
    result = tuned().result("tuned", "t0", "t1", FP["versions"])
    near = {"verdict": "near_miss", "retune": "a near miss under real traffic (...): lowering the pin 2 step(s) to 0.9"}
    rows = report_lines.summary_rows({"a": {"status": "unchanged", "pin": PIN, "watch": watch},
                                      "b": {"status": "tuned", "result": result, "why": near["retune"], "watch": near}})
    assert rows[0]["watch"]["verdict"] == "headroom"
    assert rows[0]["line"].endswith("; under real traffic: headroom (proposal: headroom under real traffic (6 steps "
                                    "free): kv_tune_watch_action=act would search from the pin)")
    assert rows[1]["line"].endswith("1 restart; why: a near miss under real traffic (...): lowering the pin 2 step(s) "
                                    "to 0.9")
    assert report_lines.watch_summary(None) is None


def test_the_failed_rows_and_the_restarts_a_run_cost():
    result = tuned().result("tuned", "t0", "t1", FP["versions"])
    rows = report_lines.summary_rows({"a": {"status": "tuned", "result": result}, "b": {"status": "unchanged", "pin": PIN},
                                      "c": None, "d": None, "e": {"status": "no_stable_value", "result": result}},
                                     pending={"d"})
    assert [row["host"] for row in rows if report_lines.failed_row(row)] == ["c", "e"]
    assert report_lines.restarts_total(rows) == 2 * result["restarts"] > 0


def test_a_margin_larger_than_the_memory_after_the_weights_is_refused():
    with pytest.raises(run_settings.TuneError, match=r"kv_tune_safety_gib \(30.0 GiB\) is not below the memory left after"):
        make_tuner({"running_value": 0.88, "settings": {"safety_gib": 30.0}})


def unit_result(label, status, **extra):
    return dict({"status": status, "label": label, "line": "%s: %s" % (label, status), "changed": status == "tuned"},
                **extra)


def test_summary_and_reports_give_a_row_and_a_report_per_unit():
    result = tuned().result("tuned", "t0", "t1", FP["versions"])
    several = host_units.combine_units("h", {
        "sglang@a.service": unit_result("h/sglang@a", "tuned", result=result, report="# a", unit="sglang@a.service"),
        "sglang@b.service": unit_result("h/sglang@b", "unchanged", pin=PIN, unit="sglang@b.service")})
    single = unit_result("g", "tuned", result=result, report="# g", unit="sglang.service")
    expanded = host_units.expand_units({"h": several, "g": single, "x": None})
    assert sorted(expanded) == ["g", "h/sglang@a", "h/sglang@b", "x"]
    rows = report_lines.summary_rows(expanded)
    assert [row["host"] for row in rows] == ["g", "h/sglang@a", "h/sglang@b", "x"]
    assert [item["name"] for item in host_units.report_items(several)] == ["h_sglang@a"]
    assert [(item["name"], item["unit"]) for item in host_units.report_items(single)] == [("g", "sglang.service")]
    assert host_units.report_items({"failed": True, "msg": "x"}) == [] and host_units.report_items(None) == []
    assert host_units.unit_outcome(several, "sglang@b.service")["pin"] == PIN
    assert host_units.unit_outcome(single, "sglang.service") is single


UNTRUSTED = dict(BOOT, untrusted=["the log says the weights took 62.82 GiB per GPU, but ..."])


def test_an_untrusted_boot_gives_no_memory_to_predict_from():
    assert pool_model.effective_memory(UNTRUSTED) == (None, None)
    assert pool_model.lower_bound(UNTRUSTED, None) is None
    # the running value is re-measured by a restart, not measured in place on the untrusted start
    tuner = make_tuner({"running_value": 0.88, "boot": dict(UNTRUSTED, server_args={"mem_fraction_static": 0.88})})
    assert tuner.first_step()["restart"] is True
    trusted = make_tuner({"running_value": 0.88})
    assert trusted.first_step()["restart"] is False


def test_nothing_is_learned_from_an_untrusted_trial():
    tuner = make_tuner({"running_value": 0.80})
    tuner.first_step()
    # a trial whose log says A = 1 GiB (another process took the rest) would put the floor at 1 - 1/94 = 0.99
    step = tuner.advance(observation({"stress": {"held": True, "min_free_gib": 6.0},
                                      "boot": dict(UNTRUSTED, post_load_free_gib=1.0)}, tuner.step))
    assert (step["do"], step["value"], step["restart"]) == ("trial", 0.80, True)
    assert tuner.state is None and tuner.trials[-1]["outcome"] == "untrusted"
    tuner.advance(observation({"stress": {"held": True, "min_free_gib": 6.0}}, step))
    assert tuner.state["floor"] < 0.8 and len(tuner.state["trials"]) == 1

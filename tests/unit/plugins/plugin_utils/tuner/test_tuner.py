# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""kv_tune: the tuner's decisions from observations alone (test_tuner.yaml), the settings, whether there is
anything to do, how a trial is classified and read back, and the records (fact, report, lines, summary)."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from ansible_collections.llmserve.sglang.plugins.module_utils.service import fingerprint, host_units
from ansible_collections.llmserve.sglang.plugins.module_utils.capacity import kv_search
from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner import (
    tuner as tuner_search, class_values, report_lines, pool_model, run_settings, start_value, trials)

CASES = yaml.safe_load((Path(__file__).parent / "test_tuner.yaml").read_text())
DEFAULT_SETTINGS = {"unit": "sglang.service", "start": None, "cap": 0.98, "resolution": 0.005, "safety_gib": 1.0,
                    "budget": 6, "min_tokens": None, "force": False, "ready_timeout": 1800, "ready_interval": 5,
                    "stress_fill_ratio": 0.95, "stress_duration": 120, "confirm_timeout": 2640}
FP = {"gpu": {"name": "NVIDIA RTX PRO 6000", "count": 8, "memory_total_mib": 97887},
      "versions": {"driver": "580.1", "cuda": "13.0", "sglang": "0.5.9"}, "model": {"path": "/models/m"},
      "server_args": {"tp_size": 8}}
BOOT = {"pre_load_free_gib": 94.04, "post_load_free_gib": 21.71, "max_total_num_tokens": 159282}


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


# --- settings ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("changes, message", [
    ({"start": 1.2}, "kv_tune_start must lie strictly between 0 and 1 (got 1.2)"),
    ({"start": 0.0}, "kv_tune_start must lie strictly between 0 and 1"),
    ({"start": 0.9, "cap": 0.85}, "kv_tune_cap (0.85) is below kv_tune_start (0.9): there is nothing to search."),
    ({"start": 0.8825}, "is not on the kv_tune_resolution grid"),
    ({"resolution": 0.2}, "kv_tune_resolution must be a decimal step"),
    ({"resolution": 1 / 3.0}, "kv_tune_resolution must be a decimal step"),
    ({"unit": "sglang; rm -rf /"}, "kv_tune_unit must be a systemd service name"),
    ({"budget": 0}, "kv_tune_budget must lie in [1, 30] trials (got 0)"),
    ({"budget": 31}, "kv_tune_budget must lie in [1, 30] trials (got 31)"),
    ({"safety_gib": -1}, "kv_tune_safety_gib must lie in [0, 64] GiB (got -1)"),
    ({"safety_gib": 65}, "kv_tune_safety_gib must lie in [0, 64] GiB (got 65)"),
    ({"min_tokens": 0}, "kv_tune_min_tokens must be a positive token count"),
    ({"confirm_timeout": 100}, "kv_tune_confirm_timeout (100) must be longer than a trial"),
    ({"confirm_timeout": 1e14}, "kv_tune_confirm_timeout must lie in [3, 86400] seconds (got 1e+14)"),
    ({"stress_duration": 1e12}, "kv_tune_stress_duration must lie in [1, 3600] seconds (got 1e+12)"),
    ({"stress_duration": 0.5}, "kv_tune_stress_duration must lie in [1, 3600] seconds"),
    ({"ready_timeout": 1e9}, "kv_tune_ready_timeout must lie in [1, 21600] seconds"),
    ({"ready_timeout": 0}, "kv_tune_ready_timeout must lie in [1, 21600] seconds"),
    ({"ready_interval": 1e-9}, "kv_tune_ready_interval must lie in [0.1, 60] seconds (got 1e-09)"),
    ({"ready_interval": 61}, "kv_tune_ready_interval must lie in [0.1, 60] seconds"),
    ({"ready_interval": 10, "ready_timeout": 5}, "kv_tune_ready_interval (10) must not exceed kv_tune_ready_timeout"),
    ({"stress_fill_ratio": 1.5}, "kv_tune_stress_fill_ratio must lie in [0.5, 1] of the pool (got 1.5)"),
    ({"stress_fill_ratio": 0.001}, "kv_tune_stress_fill_ratio must lie in [0.5, 1] of the pool (got 0.001)"),
    ({"stress_duration": float("nan")}, "kv_tune_stress_duration must be"),
    ({"confirm_timeout": float("inf")}, "kv_tune_confirm_timeout must be"),
    ({"cap": "lots"}, "kv_tune_cap must be a number"),
])
def test_bad_settings(changes, message):
    with pytest.raises(run_settings.TuneError) as error:
        run_settings.check_settings(dict(DEFAULT_SETTINGS, **changes))
    assert message in str(error.value)
    assert str(error.value).startswith("Invalid input for llmserve.sglang.kv_tune: ")


@pytest.mark.parametrize("name", sorted(run_settings.BOUNDS))
def test_each_bound_itself_is_accepted(name):
    """The ends of each range are valid settings (the others at their defaults, the confirm timeout long enough)."""
    low, high = run_settings.BOUNDS[name][:2]
    for value in (low, high):
        changes = {name: value, "confirm_timeout": 86400}
        if name == "confirm_timeout":
            changes = {name: value, "ready_timeout": 1, "stress_duration": 1, "ready_interval": 0.1}
        if name == "ready_timeout":
            changes["ready_interval"] = min(value, 5)
        assert run_settings.check_settings(dict(DEFAULT_SETTINGS, **changes))[name] == value


@pytest.mark.parametrize("args", [dict(ready_timeout=float("inf"), stress_duration=120),
                                  dict(ready_timeout=1800, stress_duration=float("nan"))])
def test_no_default_confirm_timeout_from_a_value_that_is_not_finite(args):
    assert run_settings.with_defaults(dict(args, confirm_timeout=None))["confirm_timeout"] is None


def test_settings_from_text():
    settings = run_settings.check_settings(dict(DEFAULT_SETTINGS, start="0.9", budget="4", resolution="0.0005"))
    assert (settings["start"], settings["budget"], settings["resolution"]) == (0.9, 4, 0.0005)


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


# --- anything to do? ----------------------------------------------------------------------------------------------

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


def test_unchanged_line():
    assert report_lines.unchanged_line("h1", "sglang.service", PIN) == (
        "h1: sglang.service keeps 0.910 (202,389 KV tokens), pinned 2026-11-30T10:00:00Z: fingerprint unchanged.")


# --- one trial ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("ready, stress, failure, outcome", [
    ({"ready": True}, {"held": True}, None, "stable"),
    ({"ready": True}, {"held": False}, {"kind": "runtime_oom"}, "runtime_oom"),
    ({"ready": True}, {"held": False}, {"kind": "capture_oom"}, "runtime_oom"),
    ({"ready": True}, {"held": False}, None, "crash"),
    ({"ready": True}, {"held": False, "also": {"http://b": {"held": False}}}, None, "runtime_oom"),
    ({"ready": True}, {"held": False, "also": {"http://b": {"held": True}}}, None, "crash"),
    ({"ready": True}, None, None, "crash"),
    ({"ready": False, "reason": "unit_failed"}, None, {"kind": "init_oom"}, "init_oom"),
    ({"ready": False, "reason": "unit_failed"}, None, {"kind": "runtime_oom"}, "startup_oom"),
    ({"ready": False, "reason": "unit_failed"}, None, {"kind": "capture_oom"}, "startup_oom"),
    ({"ready": False, "reason": "unit_failed"}, None, {"kind": "weights_oom"}, "fatal"),
    ({"ready": False, "reason": "unit_failed"}, None, {"kind": "unbalanced_memory"}, "fatal"),
    ({"ready": False, "reason": "unit_failed"}, None, {"kind": "crash"}, "fatal"),
    ({"ready": True}, {"held": False}, {"kind": "nccl_error"}, "fatal"),
    ({"ready": False, "reason": "timeout"}, None, None, "timeout"),
    ({"ready": False, "reason": "unit_restarted"}, None, None, "crash"),
])
def test_classify_trial_by_phase(ready, stress, failure, outcome):
    assert trials.classify_trial(ready, stress, {"failure": failure})[0] == outcome


@pytest.mark.parametrize("free, outcome", [(0.3, "crash"), (4.0, "crash"), (31.0, "fatal"), (None, "crash")])
def test_a_crash_under_load_with_memory_to_spare_is_not_about_memory(free, outcome):
    stress = {"held": False, "failure_reason": "the server stopped answering", "min_free_gib": free}
    assert trials.classify_trial({"ready": True}, stress, {}, not_memory_gib=8.0)[0] == outcome


@pytest.mark.parametrize("text, argv, log, error", [
    ("0.9125", 0.9125, 0.9125, None),
    ("0.9125", None, 0.9125, None),
    ("0.9125", 0.912, 0.9125, "its command line says 0.912"),
    ("0.9125", 0.9125, 0.91, "its startup log says 0.91"),
    ("0.910", 0.91, None, None),
])
def test_readback(text, argv, log, error):
    found = trials.readback_error(text, argv, log)
    assert (found is None) == (error is None)
    if error:
        assert error in found


def test_growth_and_deficit_from_the_boot():
    assert trials.growth({"kv_size_gib": 10.0, "draft_kv_size_gib": 2.5}) == 1.25
    assert trials.growth({"kv_size_gib": 10.0}) == 1.0
    assert trials.growth({}) is None
    assert trials.oom_deficit_gib({"failure": {"oom": {"tried_gib": 2.0, "free_gib": 0.5}}}) == 1.5
    assert trials.oom_deficit_gib({"failure": {"oom": {"tried_gib": 0.5, "free_gib": 2.0}}}) == 0.0
    assert trials.oom_deficit_gib({"failure": {"kind": "crash"}}) is None


# --- records --------------------------------------------------------------------------------------------------------

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


def test_summary_rows_tell_a_later_batch_from_a_failed_host():
    rows = report_lines.summary_rows({"a": {"status": "unchanged", "pin": PIN}, "b": None, "c": None}, pending={"a", "c"})
    assert [row["status"] for row in rows] == ["unchanged",
                                               "not tuned: failed or unreachable, left on its last-known-good value",
                                               "not tuned: its batch has not run"]
    assert rows[2]["line"].startswith("c: NOT STARTED")


# --- before the search ----------------------------------------------------------------------------------------------

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


def test_split_pool_from_the_logs_or_the_config():
    configs = Path(__file__).parents[4] / "fixtures" / "configs"
    llama = json.loads((configs / "llama-3.1-70b.json").read_text())
    linear = json.loads((configs / "qwen3.5-9b.json").read_text())
    swa = {"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "num_hidden_layers": 36,
           "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64, "hidden_size": 2880,
           "sliding_window": 128, "layer_types": ["sliding_attention", "full_attention"] * 18, "torch_dtype": "bfloat16"}
    assert pool_model.split_pool(llama, [{}]) is False
    assert pool_model.split_pool(linear, []) is True and pool_model.split_pool(swa, []) is True
    assert pool_model.split_pool(llama, [{"swa_tokens": 1368, "full_tokens": 1710}]) is True
    assert pool_model.split_pool(None, [{"max_total_num_tokens": 5, "mamba_cache_size": 186}]) is True
    assert pool_model.split_pool(None, [{"max_total_num_tokens": 5}]) is False
    assert pool_model.split_pool(None, [{}]) is None
    assert pool_model.split_pool({"architectures": ["Nothing"]}, []) is None


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


def test_safe_start_is_sglangs_default_above_the_formula_and_at_most_the_cap():
    fp = {"gpu": {"memory_total_mib": 97887}, "versions": {"sglang": "0.5.9"}, "server_args": {"tp_size": 8}}
    settings = run_settings.check_settings(DEFAULT_SETTINGS)
    start = start_value.safe_start(BOOT, fp, None, settings)
    assert 0.77 < start < 0.98 and kv_search.on_grid(start, 0.005)
    assert start_value.safe_start({"pre_load_free_gib": 94.04, "post_load_free_gib": 2.0}, fp, None, settings) >= 0.98 - 1e-9
    low_cap = run_settings.check_settings(dict(DEFAULT_SETTINGS, cap=0.8))
    assert start_value.safe_start(BOOT, fp, None, low_cap) == 0.8


def test_a_margin_larger_than_the_memory_after_the_weights_is_refused():
    with pytest.raises(run_settings.TuneError, match=r"kv_tune_safety_gib \(30.0 GiB\) is not below the memory left after"):
        make_tuner({"running_value": 0.88, "settings": {"safety_gib": 30.0}})


def test_a_runs_own_lock_is_no_reason_to_refuse():
    info = dict(INFO, lock={"run_id": "1f2e3d4c", "live": True}, pin=None)
    assert start_value.plan_start(info, "h1", "sglang.service", run_id="1f2e3d4c")["do"] == "tune"
    assert start_value.plan_start(info, "h1", "sglang.service", run_id="9a8b7c6d")["do"] == "refuse"


# --- kv_tune_strategy per_class -------------------------------------------------------------------------------------

def probe(key, pinned=None, status="would_tune"):
    pin = None if pinned is None else {"fingerprint_hash": key, "mem_fraction_static": pinned}
    return {"fingerprint_hash": key, "pin": pin, "status": status}


def test_one_canary_per_class_in_inventory_order():
    plan = class_values.class_plan({"a1": probe("A" * 64), "b1": probe("B" * 64), "a2": probe("A" * 64),
                                    "a3": probe("A" * 64), "x": None, "b2": {"failed": True, "msg": "no unit"}},
                                   ["a1", "b1", "a2", "a3", "x", "b2"])
    assert {host: entry["role"] for host, entry in plan.items()} == {
        "a1": "canary", "a2": "member", "a3": "member", "b1": "canary", "x": "alone", "b2": "alone"}
    assert plan["a3"]["canary"] == "a1" and plan["a3"]["class"] == "A" * 12 and plan["a1"]["canary"] is None
    assert plan["b2"]["why"] == "no fingerprint: no unit"
    assert "verifies the value of a1" in plan["a2"]["why"]


def test_a_pin_of_the_same_fingerprint_needs_no_canary_unless_forced():
    probes = {"a1": probe("A" * 64), "a2": probe("A" * 64, pinned=0.91, status="unchanged"),
              "a3": probe("A" * 64, pinned=0.93)}
    plan = class_values.class_plan(probes, ["a1", "a2", "a3"])
    assert [plan[host]["role"] for host in ("a1", "a2", "a3")] == ["member"] * 3
    assert {plan[host]["value"] for host in plan} == {0.91} and "a2 holds the class's pin 0.91" in plan["a1"]["why"]
    forced = class_values.class_plan(probes, ["a1", "a2", "a3"], force=True)
    assert [forced[host]["role"] for host in ("a1", "a2", "a3")] == ["canary", "member", "member"]


@pytest.mark.parametrize("entry, outcome, expected", [
    ({"role": "member", "canary": "a1", "value": None}, {"status": "tuned", "result": {"after": {"mem_fraction_static": 0.91}}}, 0.91),
    ({"role": "member", "canary": "a1", "value": None}, {"status": "unchanged", "pin": {"mem_fraction_static": 0.9}}, 0.9),
    ({"role": "member", "canary": "a1", "value": None}, {"status": "no_stable_value", "result": {}}, None),
    ({"role": "member", "canary": "a1", "value": None}, None, None),
    ({"role": "member", "canary": None, "value": 0.93}, None, 0.93),
    ({"role": "canary", "canary": None, "value": None}, None, None),
    (None, None, None),
])
def test_the_value_a_member_verifies(entry, outcome, expected):
    assert class_values.class_value(entry, outcome) == expected


@pytest.mark.parametrize("entry, outcome, expected", [
    ({"role": "member", "value": None}, {"status": "tuned", "result": {"after": {"mem_fraction_static": 0.91,
                                                                                 "tokens": 202389}}}, 202389),
    ({"role": "member", "value": None}, {"status": "unchanged", "pin": {"mem_fraction_static": 0.9, "tokens": 190000}},
     190000),
    ({"role": "member", "value": 0.93}, {"status": "unchanged", "pin": {"tokens": 190000}}, None),   # a held pin's value
    ({"role": "member", "value": None}, None, None),
    ({"role": "canary", "value": None}, {"status": "tuned", "result": {"after": {"tokens": 1}}}, None),
])
def test_the_pool_a_member_is_capped_at_is_its_canarys(entry, outcome, expected):
    assert class_values.class_tokens(entry, outcome) == expected


@pytest.mark.parametrize("value, changes, expected", [
    (0.91, {}, 0.91),                          # no margin by default: the canary's own value
    (0.91, {"class_margin_steps": 1}, 0.905),
    (0.91, {"class_margin_steps": 3}, 0.895),
    (0.9125, {"class_margin_steps": 1}, 0.905),   # an operator's off-grid pin: down to the grid, then the margin
    (0.9125, {"resolution": 0.0005, "class_margin_steps": 1}, 0.912),
    (0.99, {"cap": 0.95}, 0.95),
])
def test_the_margin_below_the_class_value(value, changes, expected):
    settings = run_settings.check_settings(dict(DEFAULT_SETTINGS, **changes))
    assert class_values.verify_value(value, settings) == pytest.approx(expected)


@pytest.mark.parametrize("changes, message", [
    ({"strategy": "per_rack"}, "kv_tune_strategy must be one of per_host, per_class"),
    ({"class_margin_steps": -1}, "kv_tune_class_margin_steps must be a whole number of grid steps"),
])
def test_bad_class_settings(changes, message):
    with pytest.raises(run_settings.TuneError, match=message):
        run_settings.check_settings(dict(DEFAULT_SETTINGS, **changes))


def test_the_restarts_each_kind_of_tune_spent():
    rows = [{"status": "tuned", "restarts": 2, "search": "search"}, {"status": "tuned", "restarts": 1, "search": "verified"},
            {"status": "tuned", "restarts": 1, "search": "verified"}, {"status": "tuned", "restarts": 3, "search": "fallback"},
            {"status": "unchanged", "restarts": 0}, {"status": "not tuned: its batch has not run"}]
    assert report_lines.restarts_line(rows) == ("restarts: 7 in all (failed verifications and searches 3 on 1 host, "
                                                "searches 2 on 1 host, verifications 2 on 2 hosts)")
    assert report_lines.restarts_line([]) == "restarts: 0 in all"


# --- several servers on one host ------------------------------------------------------------------------------------

def gpu(index, server_bytes):
    return {"index": index, "total_bytes": 80 * 2 ** 30, "reserved_bytes": 0, "server_bytes": server_bytes,
            "other_bytes": 0, "other_processes": []}


def test_a_units_gpus_are_those_its_processes_use():
    assert host_units.unit_gpus([gpu(0, 5), gpu(1, 5), gpu(2, 0), gpu(3, 0)]) == [0, 1]
    assert host_units.unit_gpus([gpu(0, 0)]) is None and host_units.unit_gpus(None) is None


@pytest.mark.parametrize("gpu_sets, expected", [
    ({"a": [0, 1, 2, 3], "b": [4, 5, 6, 7]}, {"a": [], "b": []}),
    ({"a": [0, 1, 2, 3], "b": None}, {"a": ["b"], "b": ["a"]}),   # b's GPUs unknown: it may hold any of a's
    ({"a": [0, 1, 2, 3], "b": [3, 4]}, {"a": ["b"], "b": ["a"]}),
    ({"a": [0, 1], "b": [4], "c": [0, 1, 5], "d": [5]}, {"a": ["c"], "b": [], "c": ["a", "d"], "d": ["c"]}),
])
def test_units_that_share_a_gpu_are_each_others_neighbours(gpu_sets, expected):
    assert host_units.neighbours(gpu_sets) == expected


UUIDS = ["GPU-%d%d%d%d0000-aaaa" % (i, i, i, i) for i in range(8)]


@pytest.mark.parametrize("args, environment, expected", [
    ({}, {}, [0]),
    ({"tp_size": "4", "base_gpu_id": "4"}, {}, [4, 5, 6, 7]),
    ({"tp_size": "4", "gpu_id_step": "2", "base_gpu_id": "1"}, {}, [1, 3, 5, 7]),
    ({"tp_size": "2", "dp_size": "2"}, {}, [0, 1, 2, 3]),                            # each replica on the next GPUs
    ({"tp_size": "4", "dp_size": "4", "enable_dp_attention": True}, {}, [0, 1, 2, 3]),   # DP within the TP group
    ({"tp_size": "16", "nnodes": "2", "node_rank": "1"}, {}, list(range(8))),       # this node's half
    ({"tp_size": "2", "pp_size": "2"}, {}, [0, 1, 2, 3]),
    ({"tp_size": "4"}, {"CUDA_VISIBLE_DEVICES": "4,5,6,7"}, [4, 5, 6, 7]),
    ({"tp_size": "2", "base_gpu_id": "1"}, {"CUDA_VISIBLE_DEVICES": "7, 3,5"}, [3, 5]),
    ({"tp_size": "2"}, {"CUDA_VISIBLE_DEVICES": "GPU-66660000-aaaa,GPU-2222"}, [2, 6]),   # UUIDs, a unique prefix
    ({"tp_size": "8", "base_gpu_id": "4"}, {}, None),                                # past the host's 8 GPUs
    ({"tp_size": "2"}, {"CUDA_VISIBLE_DEVICES": "1,-1,2"}, None),                   # CUDA stops at -1
    ({"tp_size": "2"}, {"CUDA_VISIBLE_DEVICES": "GPU-,3"}, None),                   # a prefix of every UUID
    ({"tp_size": "1"}, {"CUDA_VISIBLE_DEVICES": "MIG-0d1c2b3a-1111"}, None),        # not this function's to guess
    ({"tp_size": "two"}, {}, None),
])
def test_the_gpus_a_unit_is_given_come_from_its_configuration(args, environment, expected):
    assert host_units.configured_gpus(args, environment, UUIDS) == expected



def test_labels_and_report_names_of_several_units():
    assert host_units.target_label("gpu1", "sglang@a.service") == "gpu1/sglang@a"
    assert host_units.report_name("gpu1/sglang@a") == "gpu1_sglang@a"


def unit_result(label, status, **extra):
    return dict({"status": status, "label": label, "line": "%s: %s" % (label, status), "changed": status == "tuned"},
                **extra)


def test_a_host_with_several_units_fails_when_one_unit_does_and_names_it():
    both = host_units.combine_units("h", {"sglang@a.service": unit_result("h/sglang@a", "tuned"),
                                          "sglang@b.service": unit_result("h/sglang@b", "unchanged")})
    assert both["status"] == "tuned" and both["changed"] and "msg" not in both
    assert both["line"] == "h/sglang@a: tuned\nh/sglang@b: unchanged"
    same = host_units.combine_units("h", {"a": unit_result("h/a", "unchanged"), "b": unit_result("h/b", "unchanged")})
    assert same["status"] == "unchanged" and not same["changed"]
    one_failed = host_units.combine_units("h", {"a": unit_result("h/a", "tuned"),
                                                "b": {"failed": True, "msg": "b: boom", "label": "h/b"}})
    assert one_failed["status"] == "failed" and one_failed["msg"] == "h: 1 of 2 units not tuned: b: boom"
    unstable = host_units.combine_units("h", {"a": unit_result("h/a", "no_stable_value", msg="h/a: none held")})
    assert unstable["status"] == "no_stable_value"
    check = host_units.combine_units("h", {"a": unit_result("h/a", "would_tune"), "b": unit_result("h/b", "unchanged")})
    assert check["status"] == "would_tune"


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


def test_the_class_plan_has_an_entry_per_unit_and_units_of_one_host_may_share_a_class():
    several = {"status": "would_tune", "units": {"sglang@a.service": probe("A" * 64), "sglang@b.service": probe("A" * 64)}}
    plan = class_values.class_plan_units({"h": several, "g": dict(probe("A" * 64), unit="sglang.service"),
                                          "x": None}, ["h", "g", "x"])
    assert plan["h"]["canary"] and not plan["g"]["canary"] and not plan["x"]["canary"]
    a, b = plan["h"]["units"]["sglang@a.service"], plan["h"]["units"]["sglang@b.service"]
    assert a["role"] == "canary" and b["role"] == "member"
    assert (b["canary"], b["canary_host"], b["canary_unit"]) == ("h/sglang@a", "h", "sglang@a.service")
    member = plan["g"]["units"]["sglang.service"]
    assert member["canary_host"] == "h" and member["canary_unit"] == "sglang@a.service"
    assert plan["h"]["lines"][0].startswith("h/sglang@a: canary of class AAAAAAAAAAAA")
    assert plan["x"]["units"] == {} and plan["x"]["lines"][0].startswith("x: alone")


# Issue 12: untrusted boots, the multimodal reduction of f, hybrid models

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


def test_the_multimodal_reduction_in_terms_of_the_command_line_value():
    boot = {"pre_load_free_gib": 62.92, "post_load_free_gib": 47.22, "mem_fraction_static": 0.787,
            "mem_fraction_static_logged": 0.874, "mem_fraction_static_source": "multimodal_reduction"}
    p, a = pool_model.effective_memory(boot)
    for f in (0.874, 0.6, 0.95):
        # SGLang's budget at s * f equals the formula's at f with P' and A'
        assert a - p * (1 - f) == pytest.approx(47.22 - 62.92 * (1 - f * 0.787 / 0.874))
    assert pool_model.lower_bound(boot, None) == pytest.approx((1 - 47.22 / 62.92) / (0.787 / 0.874))


def test_a_token_floor_is_refused_for_hybrid_models():
    model = {"cell_size_bytes": 16384, "page_size": 1, "mm_reservation_gib": 0.0, "hybrid_state": True}
    with pytest.raises(run_settings.TuneError, match="kv_tune_min_tokens is not supported for hybrid"):
        pool_model.lower_bound(BOOT, model, 100000)
    assert pool_model.lower_bound(BOOT, model) == pytest.approx(1 - 21.71 / 94.04)


def test_the_canary_of_a_class_is_a_host_whose_gpus_hold_nothing_else():
    held = dict(probe("A" * 64), other_gib=8.0)
    plan = class_values.class_plan({"a1": held, "a2": probe("A" * 64), "a3": probe("A" * 64)}, ["a1", "a2", "a3"])
    assert [plan[host]["role"] for host in ("a1", "a2", "a3")] == ["member", "canary", "member"]
    assert plan["a1"]["canary"] == "a2"
    everywhere = class_values.class_plan({"a1": held, "a2": held}, ["a1", "a2"])
    assert [everywhere[host]["role"] for host in ("a1", "a2")] == ["canary", "member"]


@pytest.mark.parametrize("gpu_memory, expected", [
    (None, None),
    ([{"index": 0, "server_bytes": 5, "other_bytes": 2 ** 33}, {"index": 1, "server_bytes": 0, "other_bytes": 2 ** 33}],
     8.0),
    ([{"index": 0, "server_bytes": 0, "other_bytes": 2 ** 30}, {"index": 1, "server_bytes": 0, "other_bytes": 2 ** 30}],
     2.0),
    ([{"index": 0, "server_bytes": 5, "other_bytes": 0}], 0.0),
])
def test_other_processes_memory_on_the_units_gpus(gpu_memory, expected):
    assert host_units.other_gib(gpu_memory) == expected


def test_memory_outside_a_unit_and_its_neighbours():
    mine = [dict(gpu(0, 60), other_bytes=52), dict(gpu(1, 60), other_bytes=2)]
    neighbour = [gpu(0, 50), gpu(1, 0), gpu(2, 70)]
    assert host_units.outside_bytes(mine, [neighbour]) == {0: 2, 1: 2}
    assert host_units.outside_bytes(mine) == {0: 52, 1: 2} and host_units.outside_bytes(None, [None]) == {}

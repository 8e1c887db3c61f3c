# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""playbooks/tune_kv.yml on three simulated hosts (prefix simtune): the field case (8x RTX PRO 6000, Kimi-K2.5),
8x H100 with Llama-3.1-70B and 8x H200 with DeepSeek-V3, deployed by site.yml with inventories/sim's variables.

Judged against the simulator's oracle (sglang-sim-oracle on the host: the largest value whose stress load keeps the
same safety margin), from ansible-runner's stats, the unit's InvocationID (a restart changes it), the drop-in, the
local fact and the reports. The tests run in file order and build on each other's state (a tuned fleet first).
A controller gone mid-trial (the host reverts by itself): test_tune_kv_faults_on_simhost.py's network cut, and
test_multinode_on_simhost.py's controller killed and frozen.
"""
from __future__ import annotations

import functools
import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

import simhost_lib
from simhost_lib import (PIN_DROPIN, PLOT_OFF, REPO, RESOLUTION, SAFETY_GIB, deployed, fact, invocation, oracle_max,
                         oracle_max_at, play, report, running_fraction, server_argv, set_faults, ssh, streamed,
                         trial_left, watch)

PREFIX = "simtune"
PROFILES = {f"{PREFIX}1": "field", f"{PREFIX}2": "h100-llama70b", f"{PREFIX}3": "h200-deepseek-v3"}
FIELD = f"{PREFIX}1"

# All hosts at once: these tests are about each host's tune (test_a_failed_canary_... runs the default batches).
tune = functools.partial(simhost_lib.tune, serial="100%")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    with deployed(tmp_path_factory.mktemp("simtune"), PREFIX, list(PROFILES.values())) as inventory:
        yield inventory


# --- the fleet is tuned, pins agree, and a re-run does nothing ---------------------------------------------------

def test_tune_each_profile_to_the_oracle_in_at_most_four_restarts(fleet, tmp_path, measured):
    # As an operator runs it: llmserve-fleet in a terminal, its table redrawn as each host moves.
    run = watch(fleet, tmp_path, kv_tune_serial="100%")
    assert run.status == 0, run.output[-8000:]
    phases = {host: [line.split()[2] for screen in run.screens for line in screen.splitlines()[2:]
                     if line.split()[0] == host] for host in PROFILES}
    for host, seen in phases.items():
        # each host seen loading and under load before it was pinned (a phase shorter than a redraw may not show)
        assert {"loading", "under", "pinned"} <= set(seen) and seen.index("under") < seen.index("pinned"), (host, seen)
    measured("llmserve-fleet tune, the last screen of 3 hosts: " + " | ".join(run.last.splitlines()))
    (tmp_path / "screens.txt").write_text("\n\n".join(run.screens))
    fleet_report = json.loads((tmp_path / "fleet.json").read_text())
    assert fleet_report["failed"] == [] and fleet_report["exit_code"] == 0
    assert (tmp_path / "fleet.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for host, profile in PROFILES.items():
        result = report(tmp_path, host)
        truth = oracle_max(host)
        pinned = fact(host)
        assert result["status"] == "tuned", result
        assert truth - RESOLUTION - 1e-9 <= pinned["mem_fraction_static"] <= truth + 1e-9, (profile, pinned, truth)
        assert result["restarts"] <= 4, (profile, result["trials"])
        assert running_fraction(host) == pytest.approx(pinned["mem_fraction_static"])
        assert f"--mem-fraction-static {pinned['mem_fraction_static']:.3f}" in ssh(host, f"cat {PIN_DROPIN}")
        assert not trial_left(host)
        assert (tmp_path / f"{host}.md").read_text().count("| stable |") >= 1
        assert (tmp_path / f"{host}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        if profile == "field":
            assert result["before"]["mem_fraction_static"] == 0.88
            assert result["after"]["tokens"] > result["before"]["tokens"]
        row = next(row for row in fleet_report["hosts"] if row["host"] == host)
        assert (row["phase"], row["value"], row["tokens"], row["restarts"]) == (
            "pinned", "%.3f" % pinned["mem_fraction_static"], result["after"]["tokens"], result["restarts"]), row


def test_the_pinned_value_holds_the_load(fleet):
    run = play(fleet, tasks=[{"name": "stress", "llmserve.sglang.kv_stress": {"duration": 3}}])
    assert run.status == "successful", run.stdout[-4000:]
    # results keep the last host's; every host ran it without failing (status), the last one is checked in detail
    stress = run.results["stress"]
    assert stress["held"] and stress["min_free_gib"] >= SAFETY_GIB - 0.05, stress


def test_second_run_changes_nothing_and_restarts_nothing(fleet, tmp_path):
    started = {host: invocation(host) for host in PROFILES}
    # Ctrl-C in llmserve-fleet stops the run where it is, says so, and leaves every host as it was.
    stopped = watch(fleet, tmp_path, interrupt_at="probe")
    assert stopped.status == 130, stopped.output[-5000:]
    assert "interrupted: ansible-playbook was stopped." in stopped.output, stopped.output[-5000:]
    assert {host: invocation(host) for host in PROFILES} == started and not any(trial_left(h) for h in PROFILES)
    # The re-run as AWX's execution nodes run a job (transmit | worker | process): the events, the set_stats data
    # and the reports come back through the stream.
    run = streamed(fleet, tmp_path / "job", "llmserve.sglang.tune_kv", dict(PLOT_OFF, kv_tune_serial="100%"))
    assert run.rc == 0, run.output[-8000:]
    assert not [event for event in run.events if (event.get("event_data") or {}).get("res", {}).get("changed")]
    assert {host: invocation(host) for host in PROFILES} == started
    assert "fingerprint unchanged" in run.output, run.output[-8000:]
    handed = run.artifact_data["llmserve_kv_tune"]
    assert handed["counts"] == {"unchanged": len(PROFILES)} and handed["failed"] == [], handed
    # report_dir is where the worker wrote them, gone with it; report_artifacts is where process unpacked them.
    assert not Path(handed["report_dir"]).is_relative_to(tmp_path / "job" / "unpacked"), handed
    assert handed["report_artifacts"] == "kv_tune_reports", handed
    summary = json.loads((run.artifacts / handed["report_artifacts"] / "summary.json").read_text())
    assert {row["host"] for row in summary} == set(PROFILES), summary


def test_site_after_tuning_restarts_nothing(fleet):
    started = invocation(FIELD)
    run = play(fleet, playbook=REPO / "playbooks" / "site.yml", extravars={"site_hosts": FIELD})
    assert run.status == "successful", run.stdout[-5000:]
    assert run.stats.get("changed", {}).get(FIELD, 0) == 0, run.stats
    assert invocation(FIELD) == started


# --- the fingerprint decides ------------------------------------------------------------------------------------

def test_a_driver_upgrade_retunes_that_host_only(fleet, tmp_path):
    others = {host: invocation(host) for host in PROFILES if host != FIELD}
    set_faults(FIELD, _driver_version="580.105.08")
    run = tune(fleet, tmp_path)
    assert run.status == "successful", run.stdout[-8000:]
    assert "versions.driver" in report(tmp_path, FIELD)["why"]
    assert fact(FIELD)["versions"]["driver"] == "580.105.08"
    assert not (tmp_path / f"{PREFIX}2.json").exists()
    assert {host: invocation(host) for host in others} == others


# --- faults: each ends with the host serving its last-known-good value and a report ------------------------------

def test_crash_under_load_backs_off_to_a_lower_value(fleet, tmp_path):
    lkg = fact(FIELD)["mem_fraction_static"]
    set_faults(FIELD, crash_after_requests=3, from_mem_fraction_static=0.9)
    try:
        run = tune(fleet, tmp_path, limit=FIELD, kv_tune_force=True, kv_tune_start=0.88, kv_tune_budget=4)
        result = report(tmp_path, FIELD)
        outcomes = [trial["outcome"] for trial in result["trials"]]
        assert "crash" in outcomes, result["trials"]
        assert run.status == "successful", run.stdout[-8000:]
        assert result["after"]["mem_fraction_static"] < 0.9
        assert running_fraction(FIELD) == pytest.approx(result["after"]["mem_fraction_static"])
        assert lkg >= 0.9  # the earlier pin was above the crash line: the search did back off below it
    finally:
        set_faults(FIELD)


def test_hang_at_startup_times_out_and_keeps_the_last_known_good(fleet, tmp_path):
    lkg = fact(FIELD)["mem_fraction_static"]
    set_faults(FIELD, hang_at_startup=True, from_mem_fraction_static=lkg + 0.004)
    try:
        run = tune(fleet, tmp_path, limit=FIELD, kv_tune_force=True, kv_tune_budget=2, kv_tune_ready_timeout=8,
                   kv_tune_cap=lkg + 0.03, kv_tune_safety_gib=0.2)
        result = report(tmp_path, FIELD)
        assert [trial["outcome"] for trial in result["trials"]][1:] == ["timeout"], result["trials"]
        assert run.status == "successful", run.stdout[-8000:]
        assert running_fraction(FIELD) == pytest.approx(lkg)
    finally:
        set_faults(FIELD)


def test_an_unreachable_host_is_reported_and_the_others_proceed(fleet, tmp_path):
    inventory = tmp_path / "inventory"
    shutil.copytree(fleet / "group_vars", inventory / "group_vars")
    hosts = yaml.safe_load((fleet / "hosts.yml").read_text())
    hosts["sim"]["hosts"]["gone1"] = {"ansible_host": "198.18.250.2", "sim_profile": "field"}
    (inventory / "hosts.yml").write_text(yaml.safe_dump(hosts))
    # No report directory named: under ansible-runner the reports are the job's artifacts, and the summary is
    # handed on with set_stats (artifact_data), naming the host that was not tuned.
    run = play(inventory, playbook=REPO / "playbooks" / "tune_kv.yml",
               extravars={"ansible_ssh_timeout": 5, "kv_tune_serial": "100%"})
    assert run.stats.get("dark", {}).get("gone1"), run.stats
    rows = json.loads(run.artifact_files["kv_tune_reports/summary.json"])
    summary = {row["host"]: row for row in rows}
    assert summary["gone1"]["status"].startswith("not tuned")
    assert summary[FIELD]["status"] == "unchanged"
    handed_on = run.artifact_data["llmserve_kv_tune"]
    assert handed_on["hosts"] == rows and handed_on["failed"] == ["gone1"] and handed_on["restarts"] == 0
    assert handed_on["report_dir"].endswith("/artifacts/%s/kv_tune_reports" % run.ident), handed_on
    # The same through llmserve-fleet, its output not a terminal: a line per change, exit 2 naming the host.
    (tmp_path / "view").mkdir()
    watched = watch(inventory, tmp_path / "view", tty=False, ansible_ssh_timeout=5, kv_tune_serial="100%")
    assert watched.status == 2, watched.output[-5000:]
    assert "\x1b[" not in watched.output and "failed or left on the last-known-good value: gone1\r\n" in watched.output
    assert re.search(r"\d\d:\d\d:\d\d %s: unchanged 0\.[0-9]+, [0-9,]+ KV tokens" % FIELD, watched.output), watched.output


def test_a_failed_canary_stops_the_run_before_any_other_host(fleet, tmp_path):
    """The default batches: one host, then a quarter at a time; max_fail_percentage 0 ends the run at the canary's
    batch when its tune fails (here: its only trial hangs at startup), and no other host restarts."""
    lkg = fact(FIELD)["mem_fraction_static"]
    started = {host: invocation(host) for host in PROFILES}
    set_faults(FIELD, hang_at_startup=True, from_mem_fraction_static=lkg + 0.004)
    try:
        run = play(fleet, playbook=REPO / "playbooks" / "tune_kv.yml", extravars={
            "kv_tune_report_dir": str(tmp_path), "kv_tune_force": True, "kv_tune_start": round(lkg + 0.01, 3),
            "kv_tune_budget": 1, "kv_tune_ready_timeout": 8})
    finally:
        set_faults(FIELD)
    assert run.status == "failed", run.stdout[-8000:]
    assert {host: invocation(host) for host in PROFILES if host != FIELD} == {
        host: value for host, value in started.items() if host != FIELD}
    assert running_fraction(FIELD) == pytest.approx(lkg)
    summary = {row["host"]: row for row in json.loads((tmp_path / "summary.json").read_text())}
    assert summary[FIELD]["status"] == "no_stable_value", summary[FIELD]
    assert {summary[host]["status"] for host in PROFILES if host != FIELD} == {"not tuned: its batch has not run"}
    assert "NOT STARTED" in run.stdout


# --- bad input: a clear error, nothing restarted -----------------------------------------------------------------
# kv_tune_start and kv_tune_cap alone (out of range, a cap below the start) are refused before any call to the host:
# the action's scripted-host cases. Here: what only a real host's answers decide.

def test_a_missing_model_fails_before_any_restart(fleet, tmp_path):
    started = invocation(FIELD)
    ssh(FIELD, "mv /models/field/model /models/field/model.away")
    try:
        run = tune(fleet, tmp_path, limit=FIELD, kv_tune_force=True)
        assert run.status == "failed" and "does not exist on the host" in run.stdout, run.stdout[-4000:]
    finally:
        ssh(FIELD, "mv /models/field/model.away /models/field/model")
    assert invocation(FIELD) == started


def test_an_unknown_dtype_fails_before_any_restart(fleet, tmp_path):
    started = invocation(FIELD)
    config = "/models/field/model/config.json"
    ssh(FIELD, f"cp {config} {config}.orig")
    ssh(FIELD, f"""sed -i 's/"\\(torch_\\)\\{{0,1\\}}dtype": *"bfloat16"/"\\1dtype": "float7"/g' {config}""")
    assert "float7" in ssh(FIELD, f"cat {config}")
    try:
        run = tune(fleet, tmp_path, limit=FIELD)
        assert run.status == "failed" and "float7" in run.stdout, run.stdout[-4000:]
    finally:
        ssh(FIELD, f"mv {config}.orig {config}")
    assert invocation(FIELD) == started


def test_a_unit_that_ignores_the_tuner_is_refused_before_any_restart(fleet, tmp_path):
    """A unit not rendered by sglang_service (no $LLMSERVE_KV_ARGS in ExecStart) would run every trial at its old
    value: the tuner refuses it."""
    unit = "/etc/systemd/system/sglang-bare.service"
    ssh(FIELD, f"cat > {unit}", stdin="[Service]\nExecStart=/bin/sleep infinity\n")
    ssh(FIELD, "systemctl daemon-reload")
    try:
        run = tune(fleet, tmp_path, limit=FIELD, kv_tune_unit="sglang-bare.service")
        assert run.status == "failed" and "cannot be tuned: its ExecStart does not end with" in run.stdout, \
            run.stdout[-4000:]
        assert ssh(FIELD, "systemctl is-active sglang-bare.service", check=False).strip() == "inactive"
    finally:
        ssh(FIELD, f"rm -f {unit} && systemctl daemon-reload")


# --- one form of the value ---------------------------------------------------------------------------------------

def test_a_fine_grid_is_written_and_read_back_digit_for_digit(fleet, tmp_path):
    """kv_tune_resolution 0.0005: every restarted trial's value is, digit for digit, what the server's command line
    carries, its startup log prints the same value, and the report's tokens are that boot's."""
    run = tune(fleet, tmp_path, limit=FIELD, kv_tune_force=True, kv_tune_resolution=0.0005, kv_tune_start=0.885)
    assert run.status == "successful", run.stdout[-8000:]
    result = report(tmp_path, FIELD)
    checked = 0
    for trial in result["trials"]:
        assert len(trial["text"].split(".")[1]) == 4, trial
        if not trial["restart"] or trial["invocation_id"] is None:
            continue
        assert trial["read_back"]["command_line"] == trial["text"], trial
        boot = ssh(FIELD, f"journalctl _SYSTEMD_INVOCATION_ID={trial['invocation_id']} -o cat --no-pager")
        logged = re.search(r"server_args=ServerArgs\(.*?\bmem_fraction_static=([0-9.]+)", boot).group(1)
        assert logged == repr(float(trial["text"])), (logged, trial["text"])
        assert int(re.search(r"max_total_num_tokens=(\d+)", boot).group(1)) == trial["tokens"], trial
        checked += 1
    assert checked >= 2, result["trials"]
    pinned = [t for t in result["trials"] if t["outcome"] == "stable" and t["f"] == result["after"]["mem_fraction_static"]]
    assert f"--mem-fraction-static {pinned[0]['text']}\"" in ssh(FIELD, f"cat {PIN_DROPIN}")
    argv = server_argv(FIELD)
    assert argv[argv.index("--mem-fraction-static") + 1] == pinned[0]["text"]
    truth = oracle_max_at(FIELD, 0.0005)
    assert truth - 0.0005 - 1e-9 <= result["after"]["mem_fraction_static"] <= truth + 1e-9, (result, truth)

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""playbooks/rollout.yml on two simulated hosts (prefix simroll), deployed by site.yml at SGLang 0.5.9 and tuned, then
upgraded to 0.5.10 with -e sglang_version=0.5.10:

- simroll1, the canary: two servers (sglang@a on GPUs 0-3, sglang@b on GPUs 4-7, Llama-3.1-70B at TP4 each), which
  the rollout upgrades, gates, re-tunes and rolls back together;
- simroll2: the field case, one server, its pins capping the pool at the verified one (kv_tune_pin_tokens).

First a release that crashes at startup on the canary (the simulator's crash_at_startup fault, for servers of 0.5.10
only): not a lack of memory, so both its servers are rolled back. Then a re-tune that pins and then fails: both pins
go back with the release. Then the whole rollout, where 0.5.10 allocates 7 GiB more at init on the canary, after
the KV pool (the simulator's memory_for_sglang_versions), so both servers' pins run out of memory at init:
re-tuned for the new release per class (sglang@a searches, sglang@b verifies its value), kept; on the field host
0.5.10 needs three times the activations, so its pin starts, answers the gate and runs out of memory under the
re-tune's load, which backs off. A second run changes nothing.

A fake load balancer on the controller (an HTTP server in this process) records the example drain/undrain hooks'
calls. The tests run in file order and build on each other's state. Two run a rollout and a tune of the field host's
unit at once, one each way round: whichever came first holds the tuner's lock, and the other stops; the rollout that
goes on takes the field host to 0.5.17, which counts its draft in --mem-fraction-static: one start, on the value
predicted for it. Then a rollout back to 0.5.10 is killed once the field host runs it: the controller's heartbeat
tells the host, which goes back to 0.5.17 and its pin at once; killed again during the re-tune's load, it goes back
at once too; killed whole (its heartbeat too, as when the controller's machine dies), it goes back once the
heartbeat's short lease ends. Then a drain hook that hangs: rollout_hook_timeout fails it, and the undrain hook puts
the host back. Last, the canary to 0.5.17 with RestartSec 1 s: systemd starts its failed servers again before the
rescue reads them, which reads the starts seen failing.
"""
from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from simhost_lib import (FACT_FILE, PLOT_OFF, REPO, ansible_journal, controller, deployed, fact, invocation, play,
                         running_fraction, server_argv, set_faults, ssh, trial_left, tune, wait_for, write_host_vars)

PREFIX = "simroll"
CANARY, FIELD = f"{PREFIX}1", f"{PREFIX}2"
PROFILES = {CANARY: "h100-llama70b", FIELD: "field"}
# Each host's servers and their ports.
SERVERS = {CANARY: {"sglang@a.service": 30001, "sglang@b.service": 30002}, FIELD: {"sglang.service": 30000}}
HOOKS = REPO / "playbooks" / "rollout_hooks"
LOCK = "/run/llmserve/kv-tune-sglang.service.lock"
# The servers' API key (a vault variable in a real inventory): the rollout's gate, drain, upgrade, health check and
# re-tune use it, and it may reach the servers and nothing the rollout writes or logs.
API_KEY = "FAKE-simroll-api-key-not-a-real-secret"
HOST_VARS = {
    # RestartSec 120 s on the canary: systemd does not start a server that failed on its old pin again before the
    # rescue stops it, even on a loaded 2-core CI machine, where the seven tasks between the failure and the stop took
    # over the default 15 s once (the tuner then starts the old pin once more to read it: a start, not a fault).
    CANARY: {"sglang_service_api_key": API_KEY, "sglang_service_restart_sec": 120,
             "sglang_service_server_args": {"served_model_name": "llama-3.1-70b-instruct", "tp_size": 4},
             "sglang_service_instances": [{"name": "a", "server_args": {"port": 30001, "base_gpu_id": 0}},
                                          {"name": "b", "server_args": {"port": 30002, "base_gpu_id": 4}}]},
    # its pins cap the pool at the verified one (kv_tune_pin_tokens)
    FIELD: {"sglang_service_api_key": API_KEY, "kv_tune_pin_tokens": True},
}
# 0.5.10 on the canary: about 7 GiB more in the workspaces SGLang allocates at init, after the KV pool and before any
# graph is captured (a release whose attention backend grew): the pins tuned on 0.5.9 (0.93 or more) leave less than
# that after their pools, so they run out of memory at init; the largest value that starts drops from 0.976 to about
# 0.89 (the simulator's oracle). bench/bench_rollout.py's 0.5.10 grows the graph reserve instead (a capture OOM).
LARGER_WORKSPACE = {"0.5.10": {"workspace_mib": 7168}}
# 0.5.10 on the field host: three times the activations per prefill token (a release whose kernels grew): the pin of
# 0.5.9 (0.910) still starts and answers the gate's one token, and runs out of memory under the load (the oracle: 0.881
# holds, 0.891 survives).
LARGER_ACTIVATIONS = {"0.5.10": {"activation_bytes_per_prefill_token": 786432}}


class LoadBalancer(ThreadingHTTPServer):
    """Records POST /backends/<host>/<action>."""

    def __init__(self):
        self.calls = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(handler):  # noqa: N805  pylint: disable=no-self-argument
                parts = handler.path.strip("/").split("/")
                self.calls.append((parts[1], parts[2]))
                handler.send_response(204)
                handler.end_headers()

            def log_message(handler, *args):  # noqa: N805  pylint: disable=no-self-argument
                pass

        super().__init__(("127.0.0.1", 0), Handler)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    with deployed(tmp_path_factory.mktemp("simroll"), PREFIX, list(PROFILES.values()),
                  prepare=lambda inventory: write_host_vars(inventory, HOST_VARS)) as inventory:
        tuned = tune(inventory, tmp_path_factory.mktemp("simroll-tune"), serial="100%")
        assert tuned.status == "successful", tuned.stdout[-5000:]
        yield inventory


@pytest.fixture
def lb():
    server = LoadBalancer()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def rollout(fleet: Path, reports: Path, lb: LoadBalancer, cmdline: str | None = None, **extravars):
    extravars = {"rollout_report_dir": str(reports), "kv_tune_report_dir": str(reports / "kv_tune"), **PLOT_OFF,
                 "rollout_drain_tasks": str(HOOKS / "example_lb_drain.yml"),
                 "rollout_undrain_tasks": str(HOOKS / "example_lb_undrain.yml"),
                 "example_lb_url": "http://127.0.0.1:%d" % lb.server_address[1], **extravars}
    return play(fleet, playbook=REPO / "playbooks" / "rollout.yml", extravars=extravars, cmdline=cmdline)


def installed(host: str) -> str:
    return ssh(host, "ls -d /opt/sglang/venv/lib/python3*/site-packages/sglang-*.dist-info").strip() \
        .rsplit("sglang-", 1)[1].removesuffix(".dist-info")


def served(host: str) -> set:
    """The versions the host's running servers report, after a real generation from each (both asked with the API
    key)."""
    found = set()
    for port in SERVERS[host].values():
        out = ssh(host, "python3 -c \"import json, urllib.request; "
                        f"auth = {{'Authorization': 'Bearer {API_KEY}'}}; base = 'http://127.0.0.1:{port}'; "
                        "r = urllib.request.urlopen(urllib.request.Request(base + '/generate', "
                        "data=json.dumps({'text': 'Hi', 'sampling_params': {'max_new_tokens': 1}}).encode(), "
                        "headers=dict(auth, **{'Content-Type': 'application/json'})), timeout=30); "
                        "assert r.status == 200; print(json.load(urllib.request.urlopen(urllib.request.Request("
                        "base + '/get_server_info', headers=auth)))['version'])\"")
        found.add(out.strip())
    return found


def serving(host: str) -> set:
    """served(host), or nothing while a server does not answer yet."""
    try:
        return served(host)
    except AssertionError:
        return set()


def starts(host: str) -> dict:
    """Each server's current start (systemd's InvocationID)."""
    return {unit: invocation(host, unit) for unit in SERVERS[host]}


def pins(host: str) -> str:
    """The host's fact file and each server's pin drop-in."""
    return ssh(host, "cat %s %s" % (FACT_FILE, " ".join(
        "/etc/systemd/system/%s.d/50-kv-tune.conf" % unit for unit in SERVERS[host])))


def summary(reports: Path) -> dict:
    """rollout_summary.json's rows by server (the host, or host/unit where it has several)."""
    return {row["server"]: row for row in json.loads((reports / "rollout_summary.json").read_text())}


def canary_rows(rows: dict) -> list:
    return [rows[f"{CANARY}/{unit.removesuffix('.service')}"] for unit in SERVERS[CANARY]]


def test_a_release_that_crashes_on_the_canary_rolls_its_servers_back_together(fleet, tmp_path, lb):
    """Not a lack of memory: both servers of the canary go back to 0.5.9 with the release, each named."""
    started = starts(FIELD)
    set_faults(CANARY, crash_at_startup=True, for_sglang_versions=["0.5.10"])
    try:
        run = rollout(fleet, tmp_path, lb, sglang_version="0.5.10")
    finally:
        set_faults(CANARY)
    assert run.status == "failed", run.stdout[-8000:]
    # The other host: untouched and serving 0.5.9, never drained.
    assert starts(FIELD) == started and installed(FIELD) == "0.5.9" and served(FIELD) == {"0.5.9"}
    # The canary: both servers back on 0.5.9, serving, back in the load balancer, named in the summary.
    assert installed(CANARY) == "0.5.9" and served(CANARY) == {"0.5.9"}
    assert lb.calls == [(CANARY, "drain"), (CANARY, "undrain")], run.stdout[-8000:]
    rows = summary(tmp_path)
    for row in canary_rows(rows):
        assert (row["status"], row["phase"], row["after"]["sglang"]) == ("rolled_back", "upgrade", "0.5.9"), row
        assert row["cause"].startswith("not a lack of memory (sglang@a.service: crash: "), row["cause"]
    assert rows[FIELD]["status"] == "not_started"
    assert "the upgrade (nvidia_driver, sglang, sglang_service) failed" in run.stdout
    assert "back on SGLang 0.5.9" in run.stdout


def test_a_retune_that_pinned_then_failed_rolls_the_pins_back_with_the_release(fleet, tmp_path, lb):
    """Issue 32, item 1, on both servers: the re-tune on 0.5.10 commits their pins, then the kv_tune role fails (its
    host_vars directory cannot be written): the roll-back to 0.5.9 puts back each server's own 0.5.9 pin with the
    release, so each runs the value verified on the release it runs."""
    pins_before = pins(CANARY)
    values_before = {unit: running_fraction(CANARY, unit) for unit in SERVERS[CANARY]}
    run = rollout(fleet, tmp_path, lb, sglang_version="0.5.10", rollout_hosts=CANARY,
                  kv_tune_host_vars_dir="/proc/llmserve-cannot-write-here")
    assert run.status == "failed", run.stdout[-8000:]
    for row in canary_rows(summary(tmp_path)):
        assert (row["status"], row["phase"], row["retune"]) == ("rolled_back", "retune", "tuned"), row
    tuned = json.loads((tmp_path / "kv_tune" / f"{CANARY}_sglang@a.json").read_text())
    assert tuned["fingerprint"]["versions"]["sglang"] == "0.5.10", tuned["fingerprint"]   # it did pin on 0.5.10
    assert installed(CANARY) == "0.5.9" and served(CANARY) == {"0.5.9"}
    assert pins(CANARY) == pins_before
    assert {unit: running_fraction(CANARY, unit) for unit in SERVERS[CANARY]} == values_before
    assert "rolled back: back on SGLang 0.5.9" in run.stdout and lb.calls == [(CANARY, "drain"), (CANARY, "undrain")]


def test_the_rollout_upgrades_every_host_and_retunes_it(fleet, tmp_path, lb):
    """The canary's 0.5.10 allocates 7 GiB more at init: both old pins run out of memory at init, after the pool and
    before any capture, and the rollout re-tunes both servers for 0.5.10 instead of rolling back (issue 35, items 2
    and 6: an upgrade whose old pin OOMs at init, re-tuned and kept), per class: sglang@a searches
    and sglang@b, of the same fingerprint, verifies its value with one restart. The field host's old pin serves the
    gate on 0.5.10 and runs out of memory under the re-tune's load, which backs off: upgraded, kept on a lower value."""
    values_before = {unit: running_fraction(CANARY, unit) for unit in SERVERS[CANARY]}
    old_cap = fact(FIELD)["max_total_tokens"]
    assert old_cap, fact(FIELD)
    since = {host: ssh(host, "date +%s").strip() for host in SERVERS}
    set_faults(CANARY, _memory_for_sglang_versions=LARGER_WORKSPACE)
    set_faults(FIELD, _memory_for_sglang_versions=LARGER_ACTIVATIONS)
    run = rollout(fleet, tmp_path, lb, cmdline="-vvv", sglang_version="0.5.10", kv_tune_strategy="per_class")
    assert run.status == "successful", run.stdout[-8000:]
    # The secrets sweep: the servers run with the key, which is in no line of the -vvv run, no report, no fact, no
    # drop-in and no module invocation in the hosts' journals.
    assert API_KEY not in run.stdout
    for path in tmp_path.rglob("*"):
        assert not path.is_file() or API_KEY not in path.read_text(errors="replace"), path
    for host, servers in SERVERS.items():
        for unit in servers:
            assert API_KEY in " ".join(server_argv(host, unit)), (host, unit)
        kept = ssh(host, "cat /etc/ansible/facts.d/sglang_kv.fact /etc/systemd/system/*.d/50-kv-tune.conf "
                         "/run/systemd/system/*.d/90-kv-trial.conf 2>/dev/null; true") + ansible_journal(host)
        assert "Invoked with" in kept and API_KEY not in kept, host
    rows = summary(tmp_path)
    for host in SERVERS:
        assert installed(host) == "0.5.10" and served(host) == {"0.5.10"}, host
        # drained before the upgrade, back in after it, one host at a time (canary, then the batches)
        assert lb.calls.count((host, "drain")) == 1 and lb.calls.count((host, "undrain")) == 1
        assert lb.calls.index((host, "drain")) < lb.calls.index((host, "undrain"))
    assert lb.calls[:2] == [(CANARY, "drain"), (CANARY, "undrain")]
    starts_on_new = {}
    for row in canary_rows(rows):
        unit = row["unit"]
        assert (row["status"], row["phase"], row["retune"]) == ("retuned", "upgrade", "tuned"), row
        assert (row["before"]["sglang"], row["after"]["sglang"]) == ("0.5.9", "0.5.10")
        assert "a lack of memory on the old pin (" in row["cause"] and "Tried to allocate 7." in row["cause"], row

        assert float(row["pin_before"]["value"]) == values_before[unit]
        assert float(row["pin_after"]["value"]) == running_fraction(CANARY, unit) < values_before[unit], row
        assert row["pin_after"]["tokens"] and row["pin_before"]["tokens"], row
        assert "re-tuned for the new release, pin %s (" % row["pin_before"]["value"] in row["line"], row["line"]
        # The upgrade's start of the old pin was its only one on 0.5.10: the re-tune read that start's failure (the
        # unit stopped on it) instead of starting the pin again (SGLang logs its arguments at each start).
        values = ssh(CANARY, f"journalctl -u {unit} --since @{since[CANARY]} -o cat --no-pager | grep -o "
                             "'mem_fraction_static=[0-9.]*' || true").split()
        old_pin = [value for value in values if float(value.split("=")[1]) == float(row["pin_before"]["value"])]
        assert len(old_pin) == 1, (row["pin_before"], values)
        # ... and it failed at init: in the attention backend's set-up, after the pool, before any graph capture.
        log = ssh(CANARY, f"journalctl -u {unit} --since @{since[CANARY]} -o cat --no-pager")
        first_start = log.split("mem_fraction_static=")[1]
        assert "KV Cache is allocated" in first_start and "in init_attention_backend" in first_start, first_start
        assert "out of memory" in first_start and "graph begin" not in first_start.lower(), first_start
        starts_on_new[unit] = values
    # per_class: sglang@b verified sglang@a's value for 0.5.10 (the upgrade's start and one restart), where a searched
    a, b = canary_rows(rows)
    assert b["pin_after"]["value"] == a["pin_after"]["value"], (a, b)
    assert len(starts_on_new["sglang@b.service"]) == 2, starts_on_new
    assert "verifying %s on sglang@b.service" % a["pin_after"]["value"] in run.stdout, run.stdout[-8000:]
    assert rows[FIELD]["status"] == "upgraded" and rows[FIELD]["retune"] == "tuned", rows[FIELD]
    assert (rows[FIELD]["before"]["sglang"], rows[FIELD]["after"]["sglang"]) == ("0.5.9", "0.5.10")
    tuned = json.loads((tmp_path / "kv_tune" / f"{FIELD}.json").read_text())
    assert "versions.sglang" in tuned["why"], tuned["why"]
    # a lack of memory under the load on one server: measured in place and backed off, kept
    assert "runtime_oom" in json.dumps(tuned["trials"]), tuned["trials"]
    assert float(rows[FIELD]["pin_after"]["value"]) < float(rows[FIELD]["pin_before"]["value"]), rows[FIELD]
    # issue 35, item 4: 0.5.9's pool cap was never carried into a start of 0.5.10 (SGLang logs its arguments at each
    # start), and the pin verified on 0.5.10 caps the pool anew.
    starts = ssh(FIELD, f"journalctl -u sglang.service --since @{since[FIELD]} -o cat --no-pager | grep -o "
                        "'max_total_tokens=[0-9A-Za-z]*' || true").split()
    assert starts and f"max_total_tokens={old_cap}" not in starts, (old_cap, starts)
    pinned = fact(FIELD)
    assert pinned["fingerprint"]["versions"]["sglang"] == "0.5.10" and pinned["max_total_tokens"] == pinned["tokens"]


def test_a_second_rollout_changes_nothing(fleet, tmp_path, lb):
    started = {host: starts(host) for host in SERVERS}
    run = rollout(fleet, tmp_path, lb, sglang_version="0.5.10", rollout_drain_tasks="", rollout_undrain_tasks="")
    assert run.status == "successful", run.stdout[-8000:]
    assert sum(run.stats.get("changed", {}).get(host, 0) for host in SERVERS) == 0, run.stats
    assert {host: starts(host) for host in SERVERS} == started
    assert {row["status"] for row in summary(tmp_path).values()} == {"unchanged"}


def revert_timers(host: str) -> str:
    """The tuner's revert timers loaded on the host (systemd's list, empty when none)."""
    return ssh(host, "systemctl list-units --all --plain --no-legend 'llmserve-kv-revert-*'").strip()


def locked(host: str) -> bool:
    return ssh(host, "test -e %s && echo yes || true" % LOCK).strip() == "yes"


def lock_lasts(host: str) -> float:
    """Seconds the unit's lock lasts from now, by the host's clock (-1: none)."""
    return float(ssh(host, "python3 -c \"import json, time; print(json.load(open('%s'))['expires'] - time.time())\""
                           " 2>/dev/null || echo -1" % LOCK))


def controller_processes(marker: str) -> list[int]:
    """The controller's processes of one ansible-playbook run: every process whose command line holds ``marker``
    (ansible-playbook, its workers, each in a session of its own, and the heartbeats forked from them)."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and marker.encode() in (Path("/proc") / entry / "cmdline").read_bytes():
                found.append(int(entry))
        except OSError:     # gone meanwhile
            continue
    return found


def test_a_rollout_and_a_tune_of_one_unit_never_both_proceed(fleet, tmp_path, lb):
    # A search of the field host in progress (forced; the load at the running value and one trial's, 25 s each, hold
    # the lock long enough for the rollout to reach it): the rollout leaves that host as it is.
    (tmp_path / "tune").mkdir()
    tuning = controller(fleet, tmp_path / "tune", kv_tune_hosts=FIELD, kv_tune_force=True, kv_tune_budget=1,
                        kv_tune_stress_duration=25)
    try:
        assert wait_for(lambda: locked(FIELD), 180), (tmp_path / "tune" / "controller.log").read_text()[-5000:]
        run = rollout(fleet, tmp_path / "during-tune", lb, sglang_version="0.5.10", rollout_hosts=FIELD)
        assert run.status == "failed", run.stdout[-8000:]
        assert lb.calls == [], lb.calls   # never drained
        row = summary(tmp_path / "during-tune")[FIELD]
        assert (row["status"], row["phase"]) == ("not_upgraded", "lock"), row
        assert "is held by run" in run.stdout and "nothing was changed: another run holds the unit" in run.stdout
        assert tuning.wait(900) == 0, (tmp_path / "tune" / "controller.log").read_text()[-5000:]
    finally:
        if tuning.poll() is None:
            os.killpg(tuning.pid, signal.SIGTERM)
    assert not locked(FIELD)
    # While each 25 s load ran, the tuner said where it was, and again 20 s into it (progress_lines, from the action's
    # worker while kv_stress ran on the host).
    log = (tmp_path / "tune" / "controller.log").read_text()
    assert re.search(r"\[kv_tune\] %s: under load [0-9.]+ \(2[0-4]/25 s\)" % re.escape(FIELD), log), log[-5000:]


def test_a_tune_during_a_rollout_refuses_and_0_5_17_starts_once_on_the_value_predicted_for_it(fleet, tmp_path, lb):
    """A rollout in the field host's drain hook (it waits 20 s there): a tune of the unit refuses, naming the rollout,
    and restarts nothing; the rollout then goes on, to 0.5.17 (issue 35, item 3). 0.5.17 counts the field host's
    EAGLE3 draft (its weights and KV) in --mem-fraction-static, where 0.5.10 loaded it after the target's pool: the
    upgrade's own restart starts 0.5.17 on the value the tuner would try first (the pin plus what moved and the pin's
    spare headroom, over P), armed as a trial with the host's revert timer, and the re-tune measures that start in
    place under the load and pins it: one start for the upgrade and the re-tune. The activations stay those of 0.5.10
    here, so that only the difference the formula knows remains."""
    set_faults(FIELD, _memory_for_sglang_versions=dict(LARGER_ACTIVATIONS, **{"0.5.17": LARGER_ACTIVATIONS["0.5.10"]}))
    pin_before = fact(FIELD)["text"]
    since = ssh(FIELD, "date +%s").strip()
    done = {}
    rolling = threading.Thread(target=lambda: done.update(run=rollout(
        fleet, tmp_path, lb, sglang_version="0.5.17", rollout_hosts=FIELD, example_lb_drain_seconds=20)))
    rolling.start()
    try:
        assert wait_for(lambda: (FIELD, "drain") in lb.calls, 180), lb.calls
        assert locked(FIELD)
        tuned = tune(fleet, tmp_path / "during-rollout", limit=FIELD, kv_tune_force=True)
        assert tuned.status == "failed", tuned.stdout[-8000:]
        assert "is held by run" in tuned.stdout and "from rollout.yml on" in tuned.stdout, tuned.stdout[-5000:]
    finally:
        rolling.join(600)
    run = done["run"]
    assert run.status == "successful", run.stdout[-8000:]
    assert lb.calls[-2:] == [(FIELD, "drain"), (FIELD, "undrain")]
    assert not locked(FIELD)
    row = summary(tmp_path)[FIELD]
    assert (row["status"], row["retune"]) == ("upgraded", "tuned"), row
    assert (row["before"]["sglang"], row["after"]["sglang"]) == ("0.5.10", "0.5.17")
    assert installed(FIELD) == "0.5.17" and served(FIELD) == {"0.5.17"}
    # The one start since (the refused tune restarted nothing) ran 0.5.17 on the predicted value, which the load
    # verified and the re-tune pinned without a restart of its own.
    values = ssh(FIELD, f"journalctl -u sglang.service --since @{since} -o cat --no-pager | grep -o "
                        "'mem_fraction_static=[0-9.]*' || true").split()
    assert values == ["mem_fraction_static=%s" % float(row["pin_after"]["value"])], (values, row)
    assert float(row["pin_after"]["value"]) > float(row["pin_before"]["value"]) == float(pin_before), row
    assert "counts the EAGLE3 draft's weights and KV" in run.stdout, run.stdout[-8000:]
    retuned = json.loads((tmp_path / "kv_tune" / f"{FIELD}.json").read_text())
    assert retuned["restarts"] == 0 and retuned["trials"][0]["restart"] is False, retuned["trials"]
    assert "runs this run's trial" in retuned["why"], retuned["why"]
    # committed: no trial drop-in and no revert timer left to restart the server later
    assert not trial_left(FIELD) and not revert_timers(FIELD)


def release_guards(host: str) -> str:
    """The release guards the host has: their timers (loaded) and the copies of a venv they keep."""
    return ssh(host, "systemctl list-units --all --plain --no-legend 'llmserve-release-guard-*'; "
                     "ls -d /opt/sglang/venv.before-* /var/lib/llmserve/release-guard/* 2>/dev/null || true").strip()


def test_a_controller_killed_after_the_upgrade_puts_the_host_back_on_its_release_and_pin_at_once(fleet, tmp_path, lb):
    """rollout.yml, taking the field host from 0.5.17 to 0.5.10, is killed (its process group, SIGKILL: no handler,
    no cleanup) once the host runs 0.5.10, a release on which no load verified its pin. The host kept 0.5.17, its pin
    and its fact file (release_guard). The controller's heartbeat, in a session of its own, sees ansible-playbook
    gone and tells the host, which goes back at once: no lease waited for or shortened by the test."""
    pin_before, started = pins(FIELD), starts(FIELD)
    assert installed(FIELD) == "0.5.17" and not release_guards(FIELD)
    (tmp_path / "rollout").mkdir()
    rolling = controller(fleet, tmp_path / "rollout", playbook=REPO / "playbooks" / "rollout.yml",
                         sglang_version="0.5.10", rollout_hosts=FIELD, rollout_report_dir=str(tmp_path / "rollout"))
    try:
        assert wait_for(lambda: installed(FIELD) == "0.5.10" and starts(FIELD) != started, 300), \
            (tmp_path / "rollout" / "controller.log").read_text()[-5000:]
    finally:
        os.killpg(rolling.pid, signal.SIGKILL)
        rolling.wait(30)
    killed = time.time()
    assert wait_for(lambda: installed(FIELD) == "0.5.17" and not release_guards(FIELD), 60), release_guards(FIELD)
    # Sooner than any lease: the rollout's lock had 46 min left, or 90 s from a beat at most 22 s before the kill.
    assert time.time() - killed < 30
    assert not locked(FIELD)
    assert wait_for(lambda: serving(FIELD) == {"0.5.17"}, 180), ssh(FIELD, "systemctl status sglang.service || true")
    assert pins(FIELD) == pin_before and not trial_left(FIELD) and not revert_timers(FIELD)
    assert running_fraction(FIELD) == fact(FIELD)["mem_fraction_static"]
    journal = ssh(FIELD, "journalctl -u 'llmserve-release-guard-*' -o cat --no-pager")
    assert "back to the release and pins of before the upgrade" in journal, journal


def test_a_controller_killed_during_the_retune_puts_the_host_back_at_once(fleet, tmp_path, lb):
    """The same rollout, with ansible-playbook alone killed (SIGKILL; its worker lives on) while the re-tune loads the
    field host on 0.5.10, and no heartbeat (rollout_controller_lease: 0), so that the worker alone answers for it:
    it sees its controller gone, reverts what the tuner started and lets go of the rollout's lock, and the release
    guard puts 0.5.17 and its pin back within its 30 s period. The lock's lease (46 min by default here) is not
    waited for, nor touched."""
    pin_before = pins(FIELD)
    assert installed(FIELD) == "0.5.17" and not release_guards(FIELD)
    (tmp_path / "rollout").mkdir()
    log = tmp_path / "rollout" / "controller.log"
    rolling = controller(fleet, tmp_path / "rollout", playbook=REPO / "playbooks" / "rollout.yml",
                         sglang_version="0.5.10", rollout_hosts=FIELD, rollout_report_dir=str(tmp_path / "rollout"),
                         rollout_controller_lease=0)
    try:
        assert wait_for(lambda: "under load" in log.read_text(), 420, step=0.2), log.read_text()[-5000:]
        assert installed(FIELD) == "0.5.10"
        os.kill(rolling.pid, signal.SIGKILL)   # ansible-playbook only: its worker sees it gone
        assert wait_for(lambda: installed(FIELD) == "0.5.17" and not release_guards(FIELD), 120), \
            release_guards(FIELD) + log.read_text()[-3000:]
    finally:
        try:
            os.killpg(rolling.pid, signal.SIGKILL)   # what is left of it
        except ProcessLookupError:
            pass
        rolling.wait(30)
    assert wait_for(lambda: serving(FIELD) == {"0.5.17"}, 180), ssh(FIELD, "systemctl status sglang.service || true")
    assert pins(FIELD) == pin_before and not trial_left(FIELD) and not revert_timers(FIELD)
    assert not locked(FIELD)


def test_a_controller_whose_machine_dies_leaves_the_host_to_go_back_once_the_heartbeats_short_lease_ends(
        fleet, tmp_path, lb):
    """The same rollout with a 20 s heartbeat (rollout_controller_lease: 20), and every process of it stopped and
    killed at once once the field host runs 0.5.10: ansible-playbook, its workers and the heartbeat, as when the
    controller's machine dies. Nobody tells the host. The heartbeat had brought the lock, which the rollout renews
    for the restart and the re-tune after the install (42 min here), down to 20 s at a time, so it lapses within
    those 20 s and the guard's timer puts 0.5.17 and its pin back."""
    pin_before, started = pins(FIELD), starts(FIELD)
    assert installed(FIELD) == "0.5.17" and not release_guards(FIELD)
    reports = tmp_path / "rollout"
    reports.mkdir()
    rolling = controller(fleet, reports, playbook=REPO / "playbooks" / "rollout.yml", sglang_version="0.5.10",
                         rollout_hosts=FIELD, rollout_report_dir=str(reports), rollout_controller_lease=20)
    try:
        assert wait_for(lambda: installed(FIELD) == "0.5.10" and starts(FIELD) != started, 300), \
            (reports / "controller.log").read_text()[-5000:]
        assert wait_for(lambda: 0 < lock_lasts(FIELD) <= 20, 15), lock_lasts(FIELD)
        run = re.search(r"llmserve-release-guard-([0-9a-f]{8})\.timer", release_guards(FIELD)).group(1)
    finally:
        processes = controller_processes(str(reports))
        for signum in (signal.SIGSTOP, signal.SIGKILL):    # stopped first: none of them sees another die
            for pid in processes:
                try:
                    os.kill(pid, signum)
                except ProcessLookupError:
                    pass
        rolling.wait(30)
    assert rolling.pid in processes and len(processes) >= 2      # ansible-playbook and its heartbeat at least
    assert wait_for(lambda: installed(FIELD) == "0.5.17" and not release_guards(FIELD), 120), release_guards(FIELD)
    assert wait_for(lambda: serving(FIELD) == {"0.5.17"}, 180), ssh(FIELD, "systemctl status sglang.service || true")
    assert pins(FIELD) == pin_before and not trial_left(FIELD) and not revert_timers(FIELD)
    assert "lapsed before every server was verified" in ssh(
        FIELD, "journalctl -u llmserve-release-guard-%s.service -o cat --no-pager" % run)


def test_a_drain_hook_that_hangs_fails_the_host_and_leaves_nothing_drained(fleet, tmp_path, lb):
    # A drain script that hangs: after rollout_hook_timeout the hook fails, the rollout stops on the canary and names
    # it, and the undrain hook puts the host back once it serves.
    hook = tmp_path / "hanging_drain.yml"
    hook.write_text("- name: A drain script that never returns\n  ansible.builtin.command: sleep 600\n"
                    "  changed_when: false\n  delegate_to: localhost\n  become: false\n")
    started, version = starts(CANARY), served(CANARY)
    run = rollout(fleet, tmp_path, lb, sglang_version="0.5.10", rollout_hook_timeout=10, rollout_drain_tasks=str(hook))
    assert run.status == "failed", run.stdout[-8000:]
    assert {row["phase"] for row in canary_rows(summary(tmp_path))} == {"drain"}, summary(tmp_path)
    assert "Timed out after 10 second(s)" in run.stdout, run.stdout[-8000:]
    assert lb.calls == [(CANARY, "undrain")], lb.calls     # the other host was never touched
    assert starts(CANARY) == started and served(CANARY) == version
    assert not ssh(CANARY, "ls /run/llmserve/ | grep '\\.lock$' || true").strip()


def test_a_server_that_systemd_starts_again_before_the_rescue_reads_it_is_re_tuned_for_its_lack_of_memory(
        fleet, tmp_path, lb):
    """RestartSec 1 s: systemd starts each server that failed on its old pin again long before the rescue reads its
    log (the race a loaded controller with the default 15 s runs). Each start of the old pin on 0.5.17 loads its
    weights 20 s longer (the simulator's slow_start_s, from that value up), so the start systemd began is still loading
    when the rescue reads. The rescue reads the start the upgrade's wait saw failing (sglang_ready's
    failed_invocation_id), not that one, whose log says nothing yet: a lack of memory, re-tuned and kept, not rolled
    back for "no failure in the log"."""
    values_before = {unit: running_fraction(CANARY, unit) for unit in SERVERS[CANARY]}
    set_faults(CANARY, slow_start_s=20, from_mem_fraction_static=min(values_before.values()) - 0.0005,
               for_sglang_versions=["0.5.17"], _memory_for_sglang_versions=dict(
                   LARGER_WORKSPACE, **{"0.5.17": dict(LARGER_WORKSPACE["0.5.10"], graph_mib_base=6144)}))
    run = rollout(fleet, tmp_path, lb, sglang_version="0.5.17", rollout_hosts=CANARY, sglang_service_restart_sec=1,
                  kv_tune_strategy="per_class")
    assert run.status == "successful", run.stdout[-8000:]
    for row in canary_rows(summary(tmp_path)):
        assert (row["status"], row["phase"], row["retune"]) == ("retuned", "upgrade", "tuned"), row
        assert "a lack of memory on the old pin (" in row["cause"] and "capture_oom" in row["cause"], row["cause"]
        assert float(row["pin_after"]["value"]) == running_fraction(CANARY, row["unit"]) < values_before[row["unit"]]
    assert installed(CANARY) == "0.5.17" and served(CANARY) == {"0.5.17"}

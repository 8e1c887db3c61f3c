# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""playbooks/tune_kv.yml against an attacker and a bad day, on one simulated field host (prefix simfault): each test
is a fault that once ended with root running the server's code, an unverified value pinned, or a host not serving;
each must end with the host serving a value proven under load, and the controller saying what happened.

The tests run in file order on one host, tuned once by the fixture; each puts the host back as it found it. What
only the kv_tune action decides (reset, a module error after a trial started, revert timers without a trial, a pin
that no longer starts, a kv_tune_start below the lowest viable value, the host_vars file) is tested against a scripted
host, in tests/unit/plugins/action/; what kv_trial and kv_fingerprint do on the host (a fact file that is not JSON,
moved aside; an SGLang installed after the server started: stale) in tests/unit/plugins/modules/, and the restart
before the fingerprint that it asks for in the action's cases; a crash with memory to spare ending the search in
tests/unit/plugins/module_utils/test_kv_tune.yaml. One run at a time (a second run refused on a unit another run
holds) is tested with real controllers in test_rollout_on_simhost.py (a tune and a rollout of one unit) and
test_units_on_simhost.py (two tunes of units that share GPUs).
"""
from __future__ import annotations

import functools
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import simhost_lib
from simhost_lib import (FACT_FILE as FACT, REPO, controller, deployed, fact, generates, invocation,
                         report, running_fraction, set_faults, ssh, trial_left, wait_for)

PREFIX = "simfault"
HOST = f"{PREFIX}1"
VENV = "/opt/sglang/venv"

tune = functools.partial(simhost_lib.tune, serial="100%")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    with deployed(tmp_path_factory.mktemp("simfault"), PREFIX, ["field"]) as inventory:
        first = tune(inventory, tmp_path_factory.mktemp("first"))
        assert first.status == "successful", first.stdout[-5000:]
        yield inventory


def lkg() -> float:
    return fact(HOST)["mem_fraction_static"]


def serving(_fleet: Path, timeout: float = 60) -> bool:
    """Whether the host's server runs and answers a real generation within ``timeout`` seconds."""
    return generates(HOST, timeout=timeout)


# --- 1. root never runs what the served process controls -----------------------------------------------------------

def test_root_never_runs_the_servers_argv0(fleet, tmp_path):
    """The server rewrites its own argv[0] (as setproctitle does) to a script its user wrote: a no-op tune and a forced
    one must not run it as root (before: kv_fingerprint ran argv[0] -c 'import sglang')."""
    ssh(HOST, "install -o sglang -g sglang -m 0755 /dev/null /var/lib/sglang/python && "
              "printf '#!/bin/sh\\ntouch /var/lib/sglang/ran-as-$(id -u)\\nexec /opt/sglang/venv/bin/python \"$@\"\\n' "
              "> /var/lib/sglang/python")
    set_faults(HOST, argv0="/var/lib/sglang/python")
    try:
        ssh(HOST, "systemctl restart sglang.service")
        assert serving(fleet)
        assert ssh(HOST, "cat /proc/$(systemctl show -p MainPID --value sglang.service)/cmdline | tr '\\0' ' '"
                   ).startswith("/var/lib/sglang/python ")
        for extravars in ({}, {"kv_tune_force": True}):
            run = tune(fleet, tmp_path, **extravars)
            assert run.status == "successful", run.stdout[-5000:]
        assert ssh(HOST, "ls /var/lib/sglang/").split().count("ran-as-0") == 0
    finally:
        set_faults(HOST)
        ssh(HOST, "rm -f /var/lib/sglang/python /var/lib/sglang/ran-as-*; systemctl restart sglang.service")
        assert serving(fleet)


def test_a_venv_the_service_user_can_write_is_refused(fleet, tmp_path):
    ssh(HOST, f"chown sglang {VENV}/lib")
    started = invocation(HOST)
    try:
        run = tune(fleet, tmp_path, kv_tune_force=True)
        assert run.status == "failed" and "refusing to read the SGLang version" in run.stdout, run.stdout[-4000:]
        assert "belongs to uid" in run.stdout
    finally:
        ssh(HOST, f"chown root {VENV}/lib")
    assert invocation(HOST) == started


# --- 2. nothing unverified is pinned ---------------------------------------------------------------------------------

def test_a_network_cut_longer_than_the_confirm_timeout_pins_nothing(fleet, tmp_path):
    """The host reverts the trial by itself while the controller cannot reach it; when the network is back, the
    controller must see that the server that answered is not the trial's start (before: it stressed the reverted
    server and committed the trial's value)."""
    before, pinned = lkg(), fact(HOST)
    set_faults(HOST, slow_start_s=8, from_mem_fraction_static=0.5)
    proc = controller(fleet, tmp_path, kv_tune_force=True, kv_tune_start=round(before - 0.02, 3),
                      kv_tune_ready_timeout=14, kv_tune_stress_duration=3, kv_tune_confirm_timeout=20)
    try:
        assert wait_for(lambda: trial_left(HOST), 120), "no trial started"
        subprocess.run(["ip", "-n", f"llmsim-{HOST}", "link", "set", "eth0", "down"], check=True)
        # The host's timer fires 20 s after the trial started (the shortest confirm timeout over a trial of 14 s
        # and a 3 s load) and reverts it; the last-known-good value starts in about 10 s (slow_start_s 8).
        time.sleep(34)
        subprocess.run(["ip", "-n", f"llmsim-{HOST}", "link", "set", "eth0", "up"], check=True)
        assert proc.wait(300) != 0
    finally:
        subprocess.run(["ip", "-n", f"llmsim-{HOST}", "link", "set", "eth0", "up"], check=False)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        set_faults(HOST)
    log = (tmp_path / "controller.log").read_text()
    assert "the host reverted it" in log, log[-4000:]
    assert fact(HOST) == pinned
    assert running_fraction(HOST) == pytest.approx(before) and serving(fleet)


# --- 3. a tune never takes a serving host down -----------------------------------------------------------------------

def test_another_process_on_one_gpu_stops_the_tune_before_any_restart(fleet, tmp_path):
    started = invocation(HOST)
    set_faults(HOST, gpu_occupied_mib={"3": 16384})
    try:
        run = tune(fleet, tmp_path, kv_tune_force=True)
    finally:
        set_faults(HOST)
    assert run.status == "failed", run.stdout[-4000:]
    assert "GPU 3: 16.0 GiB held by pid 90003" in run.stdout and "nothing was restarted" in run.stdout
    assert invocation(HOST) == started and serving(fleet)


# Memory another process takes while a start loads, seen only in the log (different weights on ranks of one stage;
# different memory lost between the weights and the pool; a pool off the formula): the simulator's log of each is
# parsed by the product's parser in tests/sim/test_load_contention.py, each finding is unit-tested in
# test_boot_trust.py and test_kv_tune_model.py, and the run's answer to an untrusted trial (start it again, then stop
# on the last-known-good value) in the action's scripted-host cases. Here: what only a host shows, the GPUs watched
# through nvidia-smi over ssh while the server starts and before the commit.
@pytest.mark.parametrize("faults, why", [
    # 2 GiB on each GPU: every rank reports the same weights, 2.8% over the checkpoint's share, so the log alone looks
    # clean; sglang_ready's watch of the GPUs sees the other process, listed on GPUs 0-3, and on 4-7 (another
    # container's, nvidia-smi lists no process for it) in memory.used. The simulator loads in 0.3 s what takes
    # minutes on a real host: slow_start_s holds the load (and the memory) 3 s.
    ({"load_contention_mib": {str(gpu): 2048 for gpu in range(8)}, "load_contention_unlisted": [4, 5, 6, 7],
      "slow_start_s": 3},
     ["another process held up to 2.00 GiB on GPU 0 while the server started",
      "GPU 4 used up to 2.00 GiB that no process was listed for while the server started"]),
    # 2 GiB on every GPU once the load has ended (the simulator: 0.1 s after kv_stress's last request, when its watch
    # has stopped), listed on GPUs 0-3, not on 4-7: the start and the load were clean; the trial's look at the GPUs
    # before the commit sees it. (That look reads the processes and the totals in two nvidia-smi queries: the
    # memory may come between them, so only the listed process is sure to be seen.)
    ({"load_contention_mib": {str(gpu): 2048 for gpu in range(8)}, "load_contention_unlisted": [4, 5, 6, 7],
      "load_contention_from": "idle"},
     ["another process held up to 2.00 GiB on GPU 0 between the load and the commit"]),
], ids=["on every GPU, seen by the watch, listed or not", "on every GPU after the load, seen before the commit"])
def test_memory_taken_while_each_start_loads_pins_nothing(fleet, tmp_path, faults, why):
    # Another process takes memory while each start loads its weights and gives it back after the pool: the pool
    # comes out smaller and the memory given back reads as headroom (before: 0.955 and 0.93 pinned, oracle 0.910).
    # Such a trial is started again, then the run stops on the last-known-good value and pins nothing.
    pinned = fact(HOST)
    set_faults(HOST, **faults)
    try:
        run = tune(fleet, tmp_path, kv_tune_force=True, kv_tune_start=round(pinned["mem_fraction_static"] - 0.02, 3))
    finally:
        set_faults(HOST)
    result = report(tmp_path, HOST)
    assert [trial["outcome"] for trial in result["trials"]] == ["untrusted", "unverified"], result["trials"]
    assert result["status"] == "failed" and run.status == "failed", run.stdout[-4000:]
    assert all(line in result["trials"][0]["why"] for line in why), result["trials"][0]["why"]
    assert running_fraction(HOST) == pytest.approx(pinned["mem_fraction_static"]) and not trial_left(HOST)
    assert fact(HOST)["time"] == pinned["time"] and serving(fleet)
    # The run's revert started the server while the other process was still there; it is gone now, and the host is
    # restarted clean: the next run's first look (the pool check's reference among it) is a clean start's.
    restarted = invocation(HOST)
    ssh(HOST, "systemctl restart sglang.service")
    assert invocation(HOST) != restarted and serving(fleet, timeout=120)


def test_a_draft_replaced_in_place_changes_the_fingerprint(fleet):
    # The draft's config.json is read by content, as root reads it on the host (its path stays the same): the
    # tuner's probe gives the reason to tune again (what the tuner does with a reason: the other tests). The copy
    # put back keeps its time: a config newer than the server would have the next run restart it first.
    config = "/models/field/draft/config.json"
    ssh(HOST, f"cp -p {config} {config}.orig && python3 - <<'EOF'\nimport json\np='{config}'\nd=json.load(open(p))\n"
              f"d['llmserve_test_revision']=2\njson.dump(d, open(p, 'w'))\nEOF")
    try:
        probe = simhost_lib.ansible(fleet, "llmserve.sglang.kv_fingerprint", "unit=sglang.service")[HOST]
    finally:
        ssh(HOST, f"mv {config}.orig {config}")
    assert probe["retune_reason"] == "fingerprint changed: model.draft_config_sha256", probe.get("retune_reason")
    again = simhost_lib.ansible(fleet, "llmserve.sglang.kv_fingerprint", "unit=sglang.service")[HOST]
    assert again["retune_reason"] is None and again["stale"] == [], again


# --- 4. a startup log rotated away costs one restart, not the tune ---------------------------------------------------

def test_a_startup_log_rotated_out_of_the_journal_is_measured_again(fleet, tmp_path):
    # The vacuum removes archived files whose every entry is over a second old: the last ones must be.
    ssh(HOST, "journalctl --rotate --quiet && sleep 2 && journalctl --vacuum-time=1s --quiet")
    run = tune(fleet, tmp_path, kv_tune_force=True)
    assert run.status == "successful", run.stdout[-4000:]
    result = report(tmp_path, HOST)
    assert result["status"] == "tuned" and result["trials"][0]["restart"]


# --- 5. a value that died of its own OOM, started again by systemd before the tuner looked -----------------------------

def test_a_running_value_started_again_by_systemd_after_its_oom_is_judged_by_its_own_log(fleet, tmp_path):
    """Fault: the deployed value dies under the first load (measured in place, with the unit's own Restart=on-failure;
    a trial's drop-in says Restart=no), and systemd starts it again before the tuner looks (RestartSec=0 here; 15 s
    by default, which a busy controller can take): the unit runs another start of that value. Before, the trial was
    `unverified` and the run failed with the host left on the value that dies (the benchmark's llama-70b fp8
    deployment, deployed at 0.96, bench/results/convergence.md). Now the trial's boot is read from its own start,
    whose log says runtime OOM, and the search goes on from that verdict."""
    before = lkg()
    deployed_dropin = "/etc/systemd/system/sglang.service.d/00-deployed.conf"
    ssh(HOST, f"rm -f /etc/systemd/system/sglang.service.d/50-kv-tune.conf {FACT} && printf "
              f"'[Service]\\nEnvironment=\"LLMSERVE_KV_ARGS=--mem-fraction-static 0.95\"\\nRestartSec=0\\n' "
              f"> {deployed_dropin} && systemctl daemon-reload && systemctl restart sglang.service")
    assert serving(fleet, 120) and running_fraction(HOST) == pytest.approx(0.95)
    since = ssh(HOST, "date +%s").strip()
    try:
        run = tune(fleet, tmp_path, kv_tune_budget=3)
    finally:
        ssh(HOST, f"rm -f {deployed_dropin} && systemctl daemon-reload")
    result = report(tmp_path, HOST)
    first = result["trials"][0]
    assert first["text"] == "0.950" and not first["restart"] and first["outcome"] == "runtime_oom", result["trials"]
    # The fault happened: systemd started the value that died again by itself, before the tuner's next restart.
    assert "Scheduled restart job" in ssh(HOST, f"journalctl -u sglang.service --since @{since} -o cat")
    assert run.status == "successful", run.stdout[-6000:]
    assert result["after"]["mem_fraction_static"] == pytest.approx(before), result["trials"]
    assert running_fraction(HOST) == pytest.approx(before) and fact(HOST)["mem_fraction_static"] == pytest.approx(before)


def test_a_value_that_cannot_start_caught_starting_by_the_probe_is_tuned_from_that_start(fleet, tmp_path):
    """Fault: the deployed value cannot start (its pool does not fit: an OOM as it starts) and systemd starts it
    again and again; the probe finds one of those starts running (a 500 GB model loads for minutes: here 8 s of
    loading at that value). Before, the tune failed ("must serve its last-known-good value before it is tuned", or
    the command line of a process that had just exited could not be read: 3 of 16 hosts of the benchmark's
    cannot-start run, bench/results/convergence.md). Now the start that failed is read by its own InvocationID and
    the search begins from a safe value, without a restart onto the value that fails. Each start loads for 20 s, so
    the probe finds one loading; where it finds the unit between two starts instead (CI, under load), the tuner
    starts it on that value once and reads that start's failure by its own InvocationID (the action's unit cases
    pin both paths)."""
    before = lkg()
    deployed_dropin = "/etc/systemd/system/sglang.service.d/00-deployed.conf"
    set_faults(HOST, slow_start_s=20, from_mem_fraction_static=0.99)
    ssh(HOST, f"rm -f /etc/systemd/system/sglang.service.d/50-kv-tune.conf {FACT} && printf "
              f"'[Service]\\nEnvironment=\"LLMSERVE_KV_ARGS=--mem-fraction-static 0.99\"\\n' > {deployed_dropin} "
              f"&& systemctl daemon-reload && systemctl restart sglang.service")
    try:
        run = tune(fleet, tmp_path, kv_tune_budget=3)
    finally:
        ssh(HOST, f"rm -f {deployed_dropin} && systemctl daemon-reload")
        set_faults(HOST)
    assert run.status == "successful", run.stdout[-6000:]
    assert "the last-known-good value 0.99 no longer starts (" in run.stdout, run.stdout[-6000:]
    result = report(tmp_path, HOST)
    assert [trial["text"] for trial in result["trials"] if trial["text"] == "0.990"] == [], result["trials"]
    assert result["after"]["mem_fraction_static"] == pytest.approx(before), result["trials"]
    assert running_fraction(HOST) == pytest.approx(before) and fact(HOST)["mem_fraction_static"] == pytest.approx(before)


# --- bad input: a clear error naming the variable, before any restart ---------------------------------------------

# What a real host's answers decide (the role's argument spec, the memory after the weights, a unit that does not
# exist); the checks of the settings alone and against the running value are the action's unit tests.
@pytest.mark.parametrize("extravars, message", [
    ({"kv_tune_min_tokens": "lots"}, "kv_tune_min_tokens"),
    ({"kv_tune_safety_gib": 40}, "kv_tune_safety_gib (40.0 GiB) is not below the memory left after the weights"),
    ({"kv_tune_unit": "sglang-typo.service"}, "sglang-typo.service does not exist on the host"),
])
def test_bad_input_is_refused_before_any_restart(fleet, tmp_path, extravars, message):
    started = invocation(HOST)
    run = tune(fleet, tmp_path, kv_tune_force=True, **extravars)
    assert run.status == "failed" and message in run.stdout, run.stdout[-4000:]
    assert invocation(HOST) == started
    assert not (tmp_path / "summary.json").exists()     # no host reached the tuner: no summary over the last one


def test_reports_without_pwd_go_beside_the_playbook(fleet, tmp_path):
    env = {key: value for key, value in os.environ.items() if key != "PWD"}
    env.update(ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_COLLECTIONS_PATH=str(Path(sys.prefix) / "collections"))
    reports = REPO / "playbooks" / "kv_tune_reports"
    shutil.rmtree(reports, ignore_errors=True)
    try:
        proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(fleet),
                               str(REPO / "playbooks" / "tune_kv.yml")], env=env, cwd="/", capture_output=True,
                              text=True, timeout=600, check=False)
        assert proc.returncode == 0, proc.stdout[-3000:]
        assert (reports / "summary.json").exists() and not Path("/kv_tune_reports").exists()
    finally:
        shutil.rmtree(reports, ignore_errors=True)

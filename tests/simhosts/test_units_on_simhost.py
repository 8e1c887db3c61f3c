# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Two SGLang servers on each of two simulated 8x H100 hosts (prefix simunits), deployed by site.yml with
sglang_service_instances:

- simunits1: sglang@a.service on GPUs 0-3 and sglang@b.service on GPUs 4-7, each Llama-3.1-70B at TP4. One
  tune_kv.yml run tunes both units, one after the other, each with its own trials, load (sampled on its own GPUs),
  pin, fact entry and report; the simulator's oracle judges each unit on its own arguments. A re-run changes
  nothing, and per_class treats the two units as one class (same GPUs, model and memory arguments): b verifies a's
  value with one restart.
- simunits2: both servers on all 8 GPUs (TP8 each), a at 0.5 and b at 0.85 (of what a left free): each holds its
  load alone, but not both at once (b runs out of memory). b is down when the run starts: it is started on its
  last-known-good value first (its GPUs come from its configuration, not from what runs), and every trial of one
  loads the other at the same time, so the tuned pair holds the joint load with the margin. A second controller
  started while the first searches a stops on both units (b shares a's GPUs) and restarts nothing.
"""
from __future__ import annotations

import json
import os
import signal

import pytest

import simhost_lib
from simhost_lib import (controller, deployed, generates, invocation, play, running_fraction, ssh, wait_for,
                         write_host_vars)

PREFIX = "simunits"
HOST = f"{PREFIX}1"
SHARED = f"{PREFIX}2"
UNITS = {"sglang@a.service": [0, 1, 2, 3], "sglang@b.service": [4, 5, 6, 7]}
RES = 0.005
DEPLOY = {
    HOST: {"sglang_service_server_args": {"served_model_name": "llama-3.1-70b-instruct", "tp_size": 4},
           "sglang_service_instances": [{"name": "a", "server_args": {"port": 30001, "base_gpu_id": 0}},
                                        {"name": "b", "server_args": {"port": 30002, "base_gpu_id": 4}}]},
    SHARED: {"sglang_service_server_args": {"served_model_name": "llama-3.1-70b-instruct", "tp_size": 8},
             "sglang_service_instances": [{"name": "a", "server_args": {"port": 30001}, "mem_fraction_static": 0.5},
                                          {"name": "b", "server_args": {"port": 30002}, "mem_fraction_static": 0.85}]},
}
A_URL, B_URL = "http://127.0.0.1:30001", "http://127.0.0.1:30002"


@pytest.fixture(scope="module")
def units(tmp_path_factory):
    with deployed(tmp_path_factory.mktemp("simunits"), PREFIX, ["h100-llama70b"] * 2,
                  prepare=lambda inventory: write_host_vars(inventory, DEPLOY)) as inventory:
        # site.yml starts both servers of SHARED at once; b sizes its pool from what a left free when started after.
        ssh(SHARED, "systemctl restart sglang@b.service")
        assert serving(inventory, "sglang@b.service", B_URL), "sglang@b.service of %s does not serve" % SHARED
        yield inventory


def on_shared(inventory, task: dict) -> dict:
    """One task on SHARED only; its result."""
    run = play(inventory, tasks=[dict(task, register="out", when="inventory_hostname == %r" % SHARED),
                                 {"name": "result", "ansible.builtin.debug": {"var": "out"},
                                  "when": "inventory_hostname == %r" % SHARED}])
    return run.results["result"]["out"]


def serving(_inventory, unit: str, url: str) -> bool:
    """The unit runs (after systemd's restart of a server that died: RestartSec) and answers a generation."""
    return generates(SHARED, port=int(url.rsplit(":", 1)[1]), timeout=120, unit=unit)


def load(inventory, urls: list) -> dict:
    """kv_stress on SHARED: the first server, and the others at the same time."""
    return on_shared(inventory, {"name": "load", "llmserve.sglang.kv_stress": {
        "url": urls[0], "also_urls": urls[1:], "duration": 3}, "failed_when": False})


def tune(inventory, reports, limit=HOST, **extravars):
    return simhost_lib.tune(inventory, reports, limit=limit, **extravars)


def oracle_max(unit: str) -> float:
    """The simulator's ground truth for the unit's own launch arguments, at the tuner's margin and grid."""
    return simhost_lib.oracle_max_at(HOST, RES, unit)


def facts() -> dict:
    return simhost_lib.facts(HOST)


def report(reports, unit: str) -> dict:
    return simhost_lib.report(reports, "%s_%s" % (HOST, unit[:-len(".service")]))


def test_one_run_tunes_each_unit_on_its_own_gpus_and_pins_each(units, tmp_path, measured):
    run = tune(units, tmp_path)
    assert run.status == "successful", run.stdout[-8000:]
    pinned = facts()
    for unit, gpus in UNITS.items():
        result = report(tmp_path, unit)
        assert result["status"] == "tuned" and result["unit"] == unit, result
        truth, value = oracle_max(unit), pinned[unit]["mem_fraction_static"]
        assert truth - RES - 1e-9 <= value <= truth + 1e-9, (unit, value, truth)
        assert running_fraction(HOST, unit) == pytest.approx(value)
        assert ssh(HOST, f"cat /etc/systemd/system/{unit}.d/50-kv-tune.conf").count(str(result["after"]["text"])) == 1
        # The load of each trial was judged on the unit's own GPUs.
        sampled = [set(trial["min_free_gib_per_gpu"]) for trial in result["trials"] if trial["min_free_gib_per_gpu"]]
        assert sampled and all(found == {str(gpu) for gpu in gpus} for found in sampled), sampled
        assert "%s/%s:" % (HOST, unit[:-len(".service")]) in run.stdout
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert sorted(row["host"] for row in summary) == ["%s/sglang@a" % HOST, "%s/sglang@b" % HOST]
    results = {unit: report(tmp_path, unit) for unit in UNITS}
    lines = ["%s %s -> %s in %d restart(s)" % (unit, result["before"]["mem_fraction_static"],
                                               result["after"]["mem_fraction_static"], result["restarts"])
             for unit, result in results.items()]
    measured("two units on one host (TP4 + TP4): %s" % ", ".join(lines))


def test_a_rerun_changes_nothing_on_either_unit(units, tmp_path):
    before = {unit: invocation(HOST, unit) for unit in UNITS}
    run = tune(units, tmp_path)
    assert run.status == "successful", run.stdout[-5000:]
    assert run.stats["changed"].get(HOST, 0) == 0, run.stdout[-5000:]
    assert {unit: invocation(HOST, unit) for unit in UNITS} == before


def test_servers_that_share_the_gpus_are_tuned_to_hold_a_joint_load(units, tmp_path, measured):
    # As deployed, both at once do not hold: one of them runs out of memory (each holds its load alone on a fresh
    # pair, but the caching allocator keeps what one load took, so one after the other would not show that here).
    before = load(units, [A_URL, B_URL])
    assert not before["held"], before
    for unit, url in (("sglang@a.service", A_URL), ("sglang@b.service", B_URL)):
        assert serving(units, unit, url)     # systemd restarted the one that died
    # b is down when the run starts (crashed, or stopped by hand): the GPUs it is given are still b's. a tuned alone
    # would take the memory b needs to start again; b is started on its last-known-good value before a's search.
    ssh(SHARED, "systemctl stop sglang@b.service")
    run = tune(units, tmp_path, limit=SHARED)
    assert run.status == "successful", run.stdout[-8000:]
    assert "%s/sglang@a: sglang@b.service, which is given the same GPUs (0-7), is not running: starting it on its " \
           "last-known-good value 0.85 before the search" % SHARED in run.stdout, run.stdout[-8000:]
    pinned = json.loads(ssh(SHARED, "cat /etc/ansible/facts.d/sglang_kv.fact"))
    results = {unit: json.loads((tmp_path / ("%s_%s.json" % (SHARED, unit[:-len(".service")]))).read_text())
               for unit in UNITS}
    for unit, result in results.items():
        assert result["status"] == "tuned", result
        assert pinned[unit]["mem_fraction_static"] == pytest.approx(running_fraction(SHARED, unit))
    # Every loaded trial of one loaded the other too (the same GPUs sampled), and the pair now holds the joint load
    # with the margin.
    after = load(units, [A_URL, B_URL])
    assert after["held"] and after["also"][B_URL]["held"] and after["min_free_gib"] >= 0.95, after
    lines = ["%s %s -> %s in %d restart(s)" % (unit, result["before"]["mem_fraction_static"],
                                               result["after"]["mem_fraction_static"], result["restarts"])
             for unit, result in results.items()]
    measured("two servers sharing 8 GPUs (TP8 + TP8), joint load: %s; min free under the joint load after: %s GiB"
             % (", ".join(lines), after["min_free_gib"]))
    rerun = tune(units, tmp_path / "again", limit=SHARED)
    assert rerun.status == "successful" and rerun.stats["changed"].get(SHARED, 0) == 0, rerun.stdout[-5000:]


def test_two_controllers_at_once_never_tune_the_units_of_shared_gpus_together(units, tmp_path):
    # One operator's run searches sglang@a (forced: a load at the running value, then one trial, 10 s loads: the
    # lock is held for 20 s and more); a second operator starts the same playbook on the host: a is held, and b
    # shares a's GPUs, so the second run stops on both units and restarts nothing.
    first_dir, second_dir = tmp_path / "first", tmp_path / "second"
    first_dir.mkdir()
    first = controller(units, first_dir, kv_tune_hosts=SHARED, kv_tune_force=True, kv_tune_budget=1,
                       kv_tune_stress_duration=10)
    try:
        lock = "/run/llmserve/kv-tune-sglang@a.service.lock"
        assert wait_for(lambda: ssh(SHARED, "test -e %s && echo yes || true" % lock).strip() == "yes", 180), \
            (first_dir / "controller.log").read_text()[-5000:]
        b_started = invocation(SHARED, "sglang@b.service")
        second = tune(units, second_dir, limit=SHARED, kv_tune_force=True)
        assert second.status == "failed", second.stdout[-6000:]
        assert "sglang@b.service shares its GPUs with sglang@a.service, which run" in second.stdout, second.stdout[-6000:]
        assert invocation(SHARED, "sglang@b.service") == b_started
        assert first.wait(900) == 0, (first_dir / "controller.log").read_text()[-5000:]
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGTERM)
    # The first run tuned both, each with the other loaded: the pair holds the joint load with the margin.
    after = load(units, [A_URL, B_URL])
    assert after["held"] and after["also"][B_URL]["held"] and after["min_free_gib"] >= 0.95, after

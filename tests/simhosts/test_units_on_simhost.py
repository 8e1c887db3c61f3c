# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Two SGLang servers on one simulated 8x H100 host (prefix simunits): sglang@a.service on GPUs 0-3 and
sglang@b.service on GPUs 4-7, each Llama-3.1-70B at TP4, deployed by site.yml with sglang_service_instances.

One tune_kv.yml run tunes both units, one after the other, each with its own trials, load (sampled on its own
GPUs), pin, fact entry and report; the simulator's oracle judges each unit on its own arguments. A re-run changes
nothing, and per_class treats the two units as one class (same GPUs, model and memory arguments): b verifies a's
value with one restart.
"""
from __future__ import annotations

import json

import pytest

from test_collection_on_simhost import play
from test_simhosts import REPO, _cannot_run_nspawn, sim_inventory
from test_tune_kv_on_simhost import HOST_JSON, SAFETY_GIB, invocation, running_fraction, server_argv, ssh

PREFIX = "simunits"
HOST = f"{PREFIX}1"
UNITS = {"sglang@a.service": [0, 1, 2, 3], "sglang@b.service": [4, 5, 6, 7]}
RES = 0.005
DEPLOY = {
    "sglang_service_server_args": {"served_model_name": "llama-3.1-70b-instruct", "tp_size": 4},
    "sglang_service_instances": [{"name": "a", "server_args": {"port": 30001, "base_gpu_id": 0}},
                                 {"name": "b", "server_args": {"port": 30002, "base_gpu_id": 4}}],
}

pytestmark = pytest.mark.skipif(_cannot_run_nspawn() is not None, reason=str(_cannot_run_nspawn()))


@pytest.fixture(scope="module")
def units(tmp_path_factory):
    with sim_inventory(tmp_path_factory.mktemp("simunits"), PREFIX, ["h100-llama70b"]) as inventory:
        site = play(inventory, playbook=REPO / "playbooks" / "site.yml", extravars=DEPLOY)
        assert site.status == "successful", site.stdout[-5000:]
        yield inventory


def tune(inventory, reports, **extravars):
    return play(inventory, playbook=REPO / "playbooks" / "tune_kv.yml",
                extravars={**DEPLOY, "kv_tune_report_dir": str(reports), **extravars})


def oracle_max(unit: str) -> float:
    """The simulator's ground truth for the unit's own launch arguments, at the tuner's margin and grid."""
    words = server_argv(HOST, unit)
    args = words[words.index("-m") + 2:]
    index = args.index("--mem-fraction-static")
    del args[index:index + 2]
    out = ssh(HOST, " ".join(["/opt/sglang-sim/bin/sglang-sim-oracle", "--host", HOST_JSON, *args,
                              "--safety-gib", str(SAFETY_GIB), "--resolution", str(RES)]))
    return json.loads(out)["max_mem_fraction_static"]


def facts() -> dict:
    return json.loads(ssh(HOST, "cat /etc/ansible/facts.d/sglang_kv.fact"))


def report(reports, unit: str) -> dict:
    return json.loads((reports / ("%s_%s.json" % (HOST, unit[:-len(".service")]))).read_text())


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


def test_per_class_makes_the_second_unit_verify_the_first_ones_value(units, tmp_path):
    reset = tune(units, tmp_path / "reset", kv_tune_reset=True)
    assert reset.status == "successful", reset.stdout[-5000:]
    run = tune(units, tmp_path, kv_tune_force=True, kv_tune_strategy="per_class")
    assert run.status == "successful", run.stdout[-8000:]
    canary, member = report(tmp_path, "sglang@a.service"), report(tmp_path, "sglang@b.service")
    assert "%s/sglang@a: canary of class" % HOST in run.stdout
    assert canary["verify"] is None
    assert member["verify"]["value"] == pytest.approx(canary["after"]["mem_fraction_static"] - RES)
    assert member["verify"]["held"] and member["restarts"] == 1, member["trials"]
    assert facts()["sglang@b.service"]["mem_fraction_static"] == pytest.approx(member["verify"]["value"])

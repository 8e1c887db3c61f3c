# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""run/host.py: which GPUs a unit holds, its last-known-good value, and which calls outlive the controller."""
from __future__ import annotations

import pytest

from ansible_collections.llmserve.sglang.plugins.plugin_utils.run import host as host_run
from ansible_collections.llmserve.sglang.tests.unit.plugins.plugin_utils.run.scripted_run import ARGS


def gpu(index, server_bytes):
    return {"index": index, "total_bytes": 80 * 2 ** 30, "reserved_bytes": 0, "server_bytes": server_bytes,
            "other_bytes": 0, "other_processes": []}


def test_a_stopped_neighbour_counts_by_the_gpus_it_is_given():
    running = {"configured_gpus": None, "gpu_memory": [gpu(0, 5), gpu(1, 5)]}
    stopped = {"configured_gpus": [1, 2], "gpu_memory": [gpu(0, 0), gpu(1, 0)]}
    assert host_run.held_gpus(running) == [0, 1] and host_run.held_gpus(stopped) == [1, 2]
    assert host_run.held_gpus({"configured_gpus": None, "gpu_memory": None}) is None
    assert [host_run.gpu_text(gpus) for gpus in ([0, 1, 2, 3, 4, 5, 6, 7], [4, 5], [0, 2, 5])] == [
        "0-7", "4, 5", "0, 2, 5"]


@pytest.mark.parametrize("info, expected", [
    ({"pin": {"mem_fraction_static": 0.91}, "mem_fraction_static": 0.93, "trial_pending": True}, "0.91"),
    ({"pin": None, "mem_fraction_static": 0.85, "trial_pending": False}, "0.85"),
    ({"pin": None, "mem_fraction_static": 0.93, "trial_pending": True}, "(its base unit file's)"),
    ({"pin": None, "mem_fraction_static": None}, "(its base unit file's)"),
])
def test_the_last_known_good_value_of_a_unit_that_does_not_run(info, expected):
    assert host_run.lkg_text(info) == expected


def test_only_what_puts_the_host_back_outlives_the_controller_and_only_waits_are_cut_short():
    # issue 32, item 5: once ansible-playbook is gone, a call in progress is cut short and no other is made, except
    # the revert of the trial and the release of the lock, which run to their end
    assert host_run.outlives_controller("kv_trial", {"state": "reverted", "run_id": "r1"})
    assert host_run.outlives_controller("kv_trial", {"state": "unlocked", "run_id": "r1"})
    states = ("started", "committed", "prepared", "locked", "disarmed", "reset")
    calls = [("kv_trial", {"state": state}) for state in states] + [
        ("kv_stress", {"duration": 40}), ("gpu_info", {"watch": 45}), ("sglang_ready", {"timeout": 1800}),
        ("kv_fingerprint", {}), ("sglang_startup_facts", {}), ("kv_trial", None)]
    for name, args in calls:
        assert not host_run.outlives_controller(name, args), (name, args)
        assert host_run.cut_short(name, args) == (name != "kv_trial"), (name, args)
    # a kv_trial call finishes on the host whatever happens on the controller: it is never cut short
    assert not host_run.cut_short("kv_trial", {"state": "reverted"})


def test_a_host_of_one_unit_runs_it_as_one_step():
    steps = host_run.host_steps("gpu1", dict(ARGS))
    step = next(steps)
    assert (step["tune_unit"], step["label"], step["info"], step["neighbours"]) == ("sglang.service", "gpu1", None, {})
    with pytest.raises(StopIteration) as stop:
        steps.send({"changed": False, "status": "unchanged", "unit": "sglang.service", "label": "gpu1"})
    assert stop.value.value["status"] == "unchanged"

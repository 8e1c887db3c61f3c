# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""playbooks/rollout.yml refuses a bad input before any host is gated, drained or changed (issue 18): run against
localhost with a drain hook that only leaves a mark, so that a check after the drain would show."""
from __future__ import annotations

import pytest

from conftest import REPO

DRAIN = "- name: Mark the drain\n  ansible.builtin.copy: {content: drained, dest: \"%s\", mode: \"0644\"}\n"


def tasks_run(runner):
    return [event["event_data"].get("task") for event in runner.events if event.get("event") == "runner_on_start"]


@pytest.mark.parametrize("extravars, problem", [
    ({"sglang_version": ""}, "sglang_version must be an exact PEP 440 version"),
    ({"sglang_version": "0.5.9 && reboot"}, "sglang_version must be an exact PEP 440 version"),
    ({"rollout_serial": 0}, "rollout_serial each batch must be a host count >= 1"),
    ({"rollout_undrain_tasks": "/nonexistent/undrain.yml"}, "/nonexistent/undrain.yml is not a regular file"),
    # a server of the host left out of the rollout (the upgrade restarts them all), and a server that spans hosts
    # whose other node is not in the rollout (its nodes change together): refused before anything is touched
    ({"sglang_service_instances": [{"name": "a"}, {"name": "b", "server_args": {"port": 30001}}],
      "rollout_units": ["sglang@a.service"]},
     "rollout_units leaves out sglang@b.service, which the upgrade restarts on the new release"),
    ({"sglang_service_server_args": {"nnodes": 2, "node_rank": 0, "dist_init_addr": "10.0.0.1:5000"}},
     "node rank 1 is not among the rollout's hosts (localhost): its nodes change together"),
])
def test_a_bad_input_fails_before_the_gate_and_the_drain(ansible, tmp_path, extravars, problem):
    mark = tmp_path / "drained"
    hook = tmp_path / "drain.yml"
    hook.write_text(DRAIN % mark)
    runner = ansible.playbook(REPO / "playbooks" / "rollout.yml", extravars={
        "ansible_become": False, "rollout_drain_tasks": str(hook), "rollout_undrain_tasks": str(hook),
        "rollout_report_dir": str(tmp_path / "reports"), **extravars})
    output = runner.stdout.read()
    assert runner.status == "failed", output[-3000:]
    assert problem in output and "nothing was done" in output, output[-3000:]
    ran = tasks_run(runner)
    assert ran[-1] in ("Check every input of the rollout on every host",
                       "Put the nodes of each server in one batch, canary first"), ran
    assert not any(name.startswith("Rollout |") for name in ran), ran
    assert not mark.exists()


def test_good_inputs_pass_the_check_and_reach_the_gate(ansible, tmp_path):
    """The same run with valid inputs goes on to the role (and fails at its first gate: nothing serves here)."""
    hook = tmp_path / "drain.yml"
    hook.write_text(DRAIN % (tmp_path / "drained"))
    runner = ansible.playbook(REPO / "playbooks" / "rollout.yml", extravars={
        "ansible_become": False, "rollout_drain_tasks": str(hook), "rollout_undrain_tasks": str(hook),
        "rollout_report_dir": str(tmp_path / "reports"), "sglang_version": "0.5.10", "rollout_gate_timeout": 1,
        "rollout_ready_interval": 1})
    ran = tasks_run(runner)
    assert "Check every input of the rollout on every host" in ran
    assert "Rollout | Record what each server runs before the upgrade" in ran, ran
    assert not (tmp_path / "drained").exists()

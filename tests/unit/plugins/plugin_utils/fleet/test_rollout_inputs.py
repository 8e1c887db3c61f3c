# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""rollout_inputs: every host's rollout inputs, checked before any host is touched."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ansible_collections.llmserve.sglang.plugins.plugin_utils.fleet import rollout_inputs as rollout

HOOK = "/srv/hooks/drain.yml"
UNHOOK = "/srv/hooks/undrain.yml"
GOOD = {"sglang_version": "0.5.10", "rollout_serial": [1, "25%"], "rollout_drain_tasks": HOOK,
        "rollout_undrain_tasks": UNHOOK, "rollout_gate_timeout": 120, "rollout_ready_interval": 5,
        "rollout_ready_timeout": "1800", "rollout_max_fail_percentage": 0, "rollout_units": ["sglang.service"],
        "rollout_retune": "yes", "nvidia_driver_branch": 580,
        "nvidia_driver_version": "580.105.08"}
FILES = frozenset({HOOK, UNHOOK, "/work/playbooks/rollout_hooks/example_lb_drain.yml"})


@pytest.mark.parametrize("version", ["0.5.10", "0.4.6.post5", "0.5.0rc2", "1!2.0.dev1", "0.5.9+cu128", "1"])
def test_a_pep_440_version_is_accepted(version):
    assert rollout.input_problems(dict(GOOD, sglang_version=version), FILES) == []


@pytest.mark.parametrize("changes, problem", [
    ({"sglang_version": ""}, "sglang_version must be an exact PEP 440 version such as 0.5.10 or 0.4.6.post5 (got '')"),
    ({"sglang_version": "0.5.9 && reboot"}, "sglang_version must be an exact PEP 440 version"),
    ({"sglang_version": ">=0.5.9"}, "sglang_version must be an exact PEP 440 version"),
    ({"sglang_version": "0.5.*"}, "sglang_version must be an exact PEP 440 version"),
    ({"sglang_version": "v0.5.9"}, "sglang_version must be an exact PEP 440 version"),
    ({"sglang_version": "0.5.9\n"}, "sglang_version must be an exact PEP 440 version"),
    ({"rollout_serial": 0}, "rollout_serial each batch must be a host count >= 1"),
    ({"rollout_serial": [1, "0%"]}, "rollout_serial a percentage must lie in (0, 100]% (got '0%')"),
    ({"rollout_serial": "150%"}, "rollout_serial a percentage must lie in (0, 100]%"),
    ({"rollout_serial": []}, "rollout_serial must name at least one batch"),
    ({"rollout_serial": [True]}, "rollout_serial each batch must be a host count"),
    ({"rollout_serial": "all"}, "rollout_serial each batch must be a host count"),
    ({"rollout_max_fail_percentage": 101}, "rollout_max_fail_percentage must lie in [0, 100] (got 101)"),
    ({"rollout_gate_timeout": 0}, "rollout_gate_timeout must lie in [1, 21600] (got 0)"),
    ({"rollout_gate_timeout": "1e12"}, "rollout_gate_timeout must lie in [1, 21600]"),
    ({"rollout_ready_timeout": "soon"}, "rollout_ready_timeout must be a whole number (got 'soon')"),
    ({"rollout_ready_interval": 0}, "rollout_ready_interval must lie in [1, 60]"),
    ({"rollout_units": ["sglang; reboot"]}, "rollout_units must be a list of systemd service names"),
    ({"rollout_units": "sglang.service"}, "rollout_units must be a list of systemd service names"),
    ({"rollout_units": []}, "rollout_units must be a list of systemd service names"),
    ({"rollout_retune": "maybe"}, "rollout_retune must be true or false (got 'maybe')"),
    ({"rollout_lock_lease": 60}, "rollout_lock_lease must lie in [600, 86400] (got 60)"),
    ({"rollout_lock_lease": "1e9"}, "rollout_lock_lease must lie in [600, 86400]"),
    ({"rollout_hook_timeout": 0}, "rollout_hook_timeout must lie in [10, 21600] (got 0)"),
    ({"rollout_hook_timeout": "forever"}, "rollout_hook_timeout must be a whole number"),
    ({"rollout_drain_tasks": "/srv/hooks/missing.yml"},
     "rollout_drain_tasks must be empty or a task file on the controller, absolute or relative to the playbook: "
     "/srv/hooks/missing.yml is not a regular file"),
    ({"rollout_undrain_tasks": "/srv/hooks"}, "rollout_undrain_tasks must be empty or a task file"),
    ({"rollout_undrain_tasks": ""}, "rollout_drain_tasks is set without rollout_undrain_tasks"),
    ({"nvidia_driver_branch": "58", "nvidia_driver_version": ""}, "nvidia_driver_branch must be a driver branch such as '580'"),
    ({"nvidia_driver_version": "570.1.2"}, "nvidia_driver_version must be empty or an upstream version"),
])
def test_a_bad_input_is_named(changes, problem):
    problems = rollout.input_problems(dict(GOOD, **changes), FILES)
    assert len(problems) == 1 and problem in problems[0], problems


def test_the_role_defaults_and_no_input_pass():
    """A host that sets nothing takes the roles' defaults (empty hooks, the default batches) and passes."""
    assert rollout.input_problems({}) == []
    assert rollout.input_problems({"rollout_drain_tasks": "", "rollout_undrain_tasks": "",
                                   "rollout_serial": [1, "25%"], "nvidia_driver_version": ""}) == []


def test_a_relative_hook_is_the_playbooks():
    values = {"rollout_drain_tasks": "rollout_hooks/example_lb_drain.yml",
              "rollout_undrain_tasks": "rollout_hooks/example_lb_drain.yml"}
    assert rollout.input_problems(values, FILES, "/work/playbooks") == []
    assert rollout.input_problems(values, FILES, "/elsewhere") != []


def test_check_inputs_names_every_bad_input_and_its_hosts():
    with pytest.raises(rollout.RolloutInputError) as error:
        rollout.check_inputs({"h1": dict(GOOD, sglang_version=""), "h2": dict(GOOD, sglang_version=""),
                              "h3": dict(GOOD, rollout_gate_timeout=0), "h4": GOOD}, FILES)
    message = str(error.value)
    assert message.startswith("Invalid input for playbooks/rollout.yml, nothing was done: ")
    assert "(got '') (h1, h2)" in message and "rollout_gate_timeout must lie in [1, 21600] (got 0) (h3)" in message
    assert "h4" not in message


def test_check_inputs_says_what_it_checked():
    assert rollout.check_inputs({"h1": GOOD, "h2": dict(GOOD, sglang_version="0.5.9"), "h3": {}}, FILES) == {
        "hosts": 3, "sglang_versions": ["0.5.10", "0.5.9"]}


def test_the_rollout_roles_defaults_pass():
    """The defaults a host takes when it sets nothing (roles/rollout/defaults/main.yml, sglang's version) are valid."""
    root = Path(__file__).resolve().parents[5]
    defaults = yaml.safe_load((root / "roles" / "rollout" / "defaults" / "main.yml").read_text())
    defaults.update(sglang_version=yaml.safe_load((root / "roles" / "sglang" / "defaults" / "main.yml").read_text())
                    ["sglang_version"])
    plain = {name: value for name, value in defaults.items() if name in rollout.INPUTS and "{{" not in str(value)}
    assert "sglang_version" in plain and rollout.input_problems(plain) == []


@pytest.mark.parametrize("topology, problems", [
    # issue 35: every server of the host is upgraded, gated, re-tuned and rolled back (the default lists them all)
    ({"sglang_service_instances": [{"name": "a"}, {"name": "b", "server_args": {"port": 30001}}],
      "rollout_units": ["sglang@a.service", "sglang@b.service"]}, []),
    ({"sglang_service_instances": [{"name": "a"}, {"name": "b", "server_args": {"port": 30001}}]}, []),
    # ... but a list that leaves one out would restart it with no lock, gate or re-tune
    ({"sglang_service_instances": [{"name": "a"}, {"name": "b", "server_args": {"port": 30001}}],
      "rollout_units": ["sglang@a.service"]},
     ["rollout_units leaves out sglang@b.service, which the upgrade restarts on the new release"]),
    # a server that spans hosts is batched (rollout_batches), not refused here
    ({"sglang_service_server_args": {"nnodes": 2, "node-rank": 0, "dist_init_addr": "10.0.0.1:5000"}}, []),
    ({"sglang_service_instances": [{"name": "a"}], "rollout_units": ["sglang@a.service"]}, []),
    ({"sglang_service_name": "llm", "rollout_units": ["llm.service"], "sglang_service_server_args": {"nnodes": 1}},
     []),
    ({}, []),
])
def test_a_topology_rollout_yml_does_not_handle_is_refused_first(topology, problems):
    values = dict(GOOD, **topology)
    if "rollout_units" not in topology:
        values.pop("rollout_units", None)
    found = rollout.input_problems(values, FILES)
    assert len(found) == len(problems) and all(want in got for want, got in zip(problems, found)), found
    if problems:
        with pytest.raises(rollout.RolloutInputError, match="nothing was done"):
            rollout.check_inputs({"h1": values}, FILES)

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filter rollout_check_inputs: Check every input of playbooks/rollout.yml on every host before any host is
touched."""
from __future__ import annotations

DOCUMENTATION = r"""
name: rollout_check_inputs
short_description: Check every input of playbooks/rollout.yml on every host before any host is touched
version_added: 1.0.0
author:
  - llmserve.sglang contributors (@llmserve)
description:
  - Reads, for each host, the rollout's inputs it sets (C(sglang_version), C(nvidia_driver_branch),
    C(nvidia_driver_version), C(rollout_serial), C(rollout_max_fail_percentage), C(rollout_gate_timeout),
    C(rollout_ready_timeout), C(rollout_ready_interval), C(rollout_units), C(rollout_retune),
    C(rollout_drain_tasks), C(rollout_undrain_tasks)) and fails naming each bad one and its hosts.
  - C(sglang_version) must be an exact PEP 440 version in its normal form; a hook must be empty or a regular file on
    the controller (absolute, or relative to the playbook), and a drain hook needs an undrain hook; C(rollout_serial)
    batches are host counts >= 1 or percentages in (0, 100]; the timeouts lie in [1, 21600] seconds.
  - From the C(sglang_service) role's inputs a host sets (C(sglang_service_name), C(sglang_service_instances),
    C(sglang_service_server_args)), refuses a server of the host that C(rollout_units) leaves out (the upgrade
    restarts every server of a host) and what the rollout does not handle yet, a server that spans hosts
    (C(nnodes) above 1).
options:
  _input:
    description: The hosts of the play, every batch (C(ansible_play_hosts_all)).
    type: list
    elements: str
    required: true
  playbook_dir:
    description: Where relative hook paths are resolved (C(playbook_dir)).
    type: str
    required: true
extends_documentation_fragment:
  - llmserve.sglang.hostvars
"""

EXAMPLES = r"""
- name: Check every input of the rollout on every host
  ansible.builtin.debug:
    msg: "{{ ansible_play_hosts_all | llmserve.sglang.rollout_check_inputs(hostvars, playbook_dir) }}"
  run_once: true
"""

RETURN = r"""
_value:
  description: C(hosts) (how many were checked) and C(sglang_versions) (the versions they set, sorted).
  type: dict
"""

import os

from ansible.errors import AnsibleFilterError

from ansible_collections.llmserve.sglang.plugins.plugin_utils.fleet import rollout_inputs
from ansible_collections.llmserve.sglang.plugins.plugin_utils.plain import plain


def rollout_check_inputs(hosts, hostvars, playbook_dir):
    """Every host's rollout inputs checked (plugin_utils/fleet/rollout_inputs.py check_inputs); raises with each bad
    one."""
    values = {}
    for host in plain(hosts):
        own = hostvars[host]
        values[host] = {name: plain(own[name]) for name in rollout_inputs.INPUTS + rollout_inputs.TOPOLOGY if name in own}
    # The one observation the pure check needs: which hook files exist on the controller.
    paths = {rollout_inputs.hook_path(str(one.get(name) or ""), str(playbook_dir))
             for one in values.values() for name in rollout_inputs.HOOKS if one.get(name)}
    try:
        return rollout_inputs.check_inputs(values, frozenset(path for path in paths if os.path.isfile(path)),
                                           str(playbook_dir))
    except rollout_inputs.RolloutInputError as exc:
        raise AnsibleFilterError(str(exc))


class FilterModule:
    def filters(self):
        return {"rollout_check_inputs": rollout_check_inputs}

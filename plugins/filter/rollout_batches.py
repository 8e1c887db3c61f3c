# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filter rollout_batches: The rollout's batches, whole servers in each."""
from __future__ import annotations

DOCUMENTATION = r"""
name: rollout_batches
short_description: The rollout's batches, whole servers in each
version_added: 1.0.0
author:
  - llmserve.sglang contributors (@llmserve)
description:
  - The nodes of a server that spans hosts (C(nnodes) above 1 in the C(sglang_service) role's server arguments, or an
    instance's) change together, so they go in one batch, node 0 first; the batches count servers, not hosts, and the
    canary is a whole server.
  - Fails naming the server whose nodes are not all among the hosts, or disagree (a rank twice, another node count).
options:
  _input:
    description: The hosts of the play in inventory order (C(ansible_play_hosts_all)).
    type: list
    elements: str
    required: true
  serial:
    description: Servers per batch, as Ansible's C(serial) (a count or a percentage, or a list of them, the last
      repeated); C(rollout_serial).
    type: raw
    default: [1, "25%"]
extends_documentation_fragment:
  - llmserve.sglang.hostvars
"""

EXAMPLES = r"""
- name: Put the nodes of each server in one batch, canary first
  ansible.builtin.set_fact:
    rollout_batches: "{{ ansible_play_hosts_all | llmserve.sglang.rollout_batches(hostvars, [1, '25%']) }}"
  run_once: true
  delegate_to: localhost
  delegate_facts: true
"""

RETURN = r"""
_value:
  description: C(order) (the hosts, each server's nodes together), C(serial) (hosts per batch, for the play's
    C(serial)), C(servers) (each batch's servers, as lists of hosts) and C(nodes) (host -> the hosts of its
    multi-node server by rank).
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.llmserve.sglang.plugins.plugin_utils.fleet import rollout_batches as plan
from ansible_collections.llmserve.sglang.plugins.plugin_utils.fleet.rollout_inputs import RolloutInputError
from ansible_collections.llmserve.sglang.plugins.plugin_utils.plain import plain

_READ = ("sglang_service_server_args", "sglang_service_instances")


def rollout_batches(hosts, hostvars, serial=(1, "25%")):
    """The play's hosts in batches of whole servers (plugin_utils/fleet/rollout_batches.py)."""
    names = [str(host) for host in plain(hosts)]
    values = {host: {key: plain(hostvars[host][key]) for key in _READ if key in hostvars[host]} for host in names}
    try:
        return plan.batches(names, values, plain(serial))
    except RolloutInputError as exc:
        raise AnsibleFilterError("Invalid input for playbooks/rollout.yml, nothing was done: %s" % exc) from exc


class FilterModule:
    def filters(self):
        return {"rollout_batches": rollout_batches}

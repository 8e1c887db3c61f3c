# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filter rollout_peers: What the other nodes of a server that spans hosts say, in the rollout."""
from __future__ import annotations

DOCUMENTATION = r"""
name: rollout_peers
short_description: What the other nodes of a server that spans hosts say, in the rollout
version_added: 1.0.0
author:
  - llmserve.sglang contributors (@llmserve)
description:
  - For the rollout role, at a step where every node of a server waits for the others (the nodes of a server are in
    one batch, and Ansible runs a batch's hosts task by task).
  - C(failed) names each other node that failed (its phase and task), so that a node stops where a peer failed and
    goes to the rescue with it; C(retuned) says whether every node kept the re-tune after a lack of memory.
options:
  _input:
    description: The hosts of the server by rank (a single host for a server on one host).
    type: list
    elements: str
    required: true
extends_documentation_fragment:
  - llmserve.sglang.hostvars
  - llmserve.sglang.hostvars.this_host
"""

EXAMPLES = r"""
- name: Stop where another node of the server failed
  ansible.builtin.fail:
    msg: "{{ peers.failed | join('; ') }}"
  vars:
    peers: "{{ server_nodes | llmserve.sglang.rollout_peers(hostvars, inventory_hostname) }}"
  when: peers.failed | length > 0
"""

RETURN = r"""
_value:
  description: C(failed) (a line per other node that failed) and C(retuned) (every node kept the re-tune).
  type: dict
"""

from ansible_collections.llmserve.sglang.plugins.plugin_utils.fleet import rollout
from ansible_collections.llmserve.sglang.plugins.plugin_utils.plain import plain

_READ = ("__rollout_phase", "__rollout_retuned")


def rollout_peers(nodes, hostvars, host):
    """What the other nodes of this host's server say (plugin_utils/fleet/rollout.py peers_state)."""
    names = [str(node) for node in plain(nodes)]
    peers = {}
    for name in names:
        found = hostvars[name]
        peers[name] = {key: plain(found[key]) for key in _READ if key in found}
        # Ansible sets ansible_failed_result when a task of the host fails in a block with a rescue. Its task
        # (ansible_failed_task) is not read: templating it would template the failed task's own arguments.
        if "ansible_failed_result" in found:
            try:
                result = plain(found["ansible_failed_result"])
            except Exception:  # pylint: disable=broad-exception-caught
                result = {}
            peers[name]["failed"] = {"msg": str((result or {}).get("msg") or "failed")}
    return rollout.peers_state(str(host), names, peers)


class FilterModule:
    def filters(self):
        return {"rollout_peers": rollout_peers}

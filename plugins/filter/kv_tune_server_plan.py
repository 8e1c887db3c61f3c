# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filter kv_tune_server_plan: The SGLang servers that span hosts (--nnodes), each tuned as one by the KV tuner."""
from __future__ import annotations

DOCUMENTATION = r"""
name: kv_tune_server_plan
short_description: The SGLang servers that span hosts (--nnodes), each tuned as one by the KV tuner
version_added: 1.0.0
author:
  - llmserve.sglang contributors (@llmserve)
description:
  - Groups the hosts whose server is one node of a multi-node SGLang server (C(--nnodes), C(--node-rank),
    C(--dist-init-addr), as M(llmserve.sglang.kv_tune) read them in check mode) by server, and says for each node
    whether the server needs tuning (any of its nodes does) and which host leads the search (node 0).
  - A server whose nodes are not all among the hosts (a rank missing or given twice) cannot be tuned; C(error)
    says why when it would need tuning.
options:
  _input:
    description: C(hostvars).
    type: dict
    required: true
  hosts:
    description: The hosts of the play.
    type: list
    elements: str
    required: true
  probe_var:
    description: The variable each host registered the check-mode result of M(llmserve.sglang.kv_tune) in.
    type: str
    default: kv_tune_probe
"""

EXAMPLES = r"""
- name: This host's server, when it spans hosts
  ansible.builtin.set_fact:
    kv_tune_server: "{{ (hostvars | llmserve.sglang.kv_tune_server_plan(ansible_play_hosts))[inventory_hostname] | default(none) }}"
"""

RETURN = r"""
_value:
  description: Host -> C(key) (the server, from its C(--dist-init-addr)), C(node_rank), C(leader) (node 0's
    host), C(nodes) (hosts by rank), C(tune) (the server is tuned in this run), C(why) and C(error) (why it cannot
    be tuned, or null); hosts of servers on one host are not in it.
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.llmserve.sglang.plugins.plugin_utils.fleet.multinode import server_plan
from ansible_collections.llmserve.sglang.plugins.plugin_utils.report_files import registered_outcomes


def kv_tune_server_plan(hostvars, hosts, probe_var="kv_tune_probe"):
    """host -> {key, node_rank, leader, nodes, tune, why, error} for every node of a multi-node server among
    ``hosts``, from what each registered when kv_tune was asked in check mode."""
    if isinstance(hosts, str) or not hasattr(hosts, "__iter__"):
        raise AnsibleFilterError("kv_tune_server_plan expects a list of hosts, got %s" % type(hosts).__name__)
    hosts = [str(host) for host in hosts]
    probes = registered_outcomes(hostvars, hosts, probe_var)
    return server_plan(probes, hosts)


class FilterModule:
    def filters(self):
        return {"kv_tune_server_plan": kv_tune_server_plan}

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""kv_tune_server_plan: the SGLang servers that span hosts, tuned as one. Documentation: kv_tune_server_plan.yml."""
from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.llmserve.sglang.plugins.module_utils.kv_multinode import server_plan
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

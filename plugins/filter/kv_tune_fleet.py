# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""kv_tune_fleet_plan: the whole tuning run's plan, once, on the controller. Documentation: kv_tune_fleet_plan.yml."""
from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.llmserve.sglang.plugins.module_utils.kv_fleet_plan import fleet_plan
from ansible_collections.llmserve.sglang.plugins.plugin_utils.plain import flag
from ansible_collections.llmserve.sglang.plugins.plugin_utils.report_files import registered_outcomes


def kv_tune_fleet_plan(hostvars, hosts, strategy="per_host", force=False, probe_var="kv_tune_probe"):
    """{hosts, groups, memberships, errors, classes, servers} from what each host of ``hosts`` registered when
    kv_tune was asked in check mode (module_utils/kv_fleet_plan.py)."""
    if isinstance(hosts, str) or not hasattr(hosts, "__iter__"):
        raise AnsibleFilterError("kv_tune_fleet_plan expects a list of hosts, got %s" % type(hosts).__name__)
    hosts = [str(host) for host in hosts]
    probes = registered_outcomes(hostvars, hosts, probe_var)
    return fleet_plan(probes, hosts, strategy=str(strategy), force=flag("force", force))


class FilterModule:
    def filters(self):
        return {"kv_tune_fleet_plan": kv_tune_fleet_plan}

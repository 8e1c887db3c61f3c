# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""kv_tune_class_plan: canaries and members for kv_tune_strategy per_class. Documentation: kv_tune_class_plan.yml."""
from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.llmserve.sglang.plugins.module_utils.kv_tune_classes import class_plan_units
from ansible_collections.llmserve.sglang.plugins.plugin_utils.plain import flag
from ansible_collections.llmserve.sglang.plugins.plugin_utils.report_files import registered_outcomes


def kv_tune_class_plan(hostvars, hosts, probe_var="kv_tune_probe", force=False):
    """host -> {canary, units: {unit: {role, class, canary, value, why, ...}}, lines} from what each host of ``hosts``
    registered when kv_tune was asked in check mode."""
    if isinstance(hosts, str) or not hasattr(hosts, "__iter__"):
        raise AnsibleFilterError("kv_tune_class_plan expects a list of hosts, got %s" % type(hosts).__name__)
    hosts = [str(host) for host in hosts]
    probes = registered_outcomes(hostvars, hosts, probe_var)
    return class_plan_units(probes, hosts, force=flag("force", force))


class FilterModule:
    def filters(self):
        return {"kv_tune_class_plan": kv_tune_class_plan}

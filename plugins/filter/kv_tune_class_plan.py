# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filter kv_tune_class_plan: Canaries and members of each class of identical hosts, for the KV tuner's per_class
strategy."""
from __future__ import annotations

DOCUMENTATION = r"""
name: kv_tune_class_plan
short_description: Canaries and members of each class of identical hosts, for the KV tuner's per_class strategy
version_added: 1.0.0
author:
  - llmserve.sglang contributors (@llmserve)
description:
  - Groups the hosts by the fingerprint hash each registered from M(llmserve.sglang.kv_fingerprint) (GPUs, driver,
    SGLang, model, memory arguments) and names, per class, the host that searches (V(canary), the first in
    inventory order that must be tuned) and the hosts that verify its value (V(member)).
  - A class in which a host still holds a pin of this very fingerprint needs no canary; its members verify that
    pin's value. Hosts without a fingerprint are V(alone) and search on their own.
  - A host with several servers (C(kv_tune_units)) has an entry per unit; units of one host may be one class.
options:
  _input:
    description: C(hostvars).
    type: dict
    required: true
  hosts:
    description: The hosts, in inventory order.
    type: list
    elements: str
    required: true
  probe_var:
    description: The variable each host registered the M(llmserve.sglang.kv_fingerprint) result in.
    type: str
    default: kv_tune_probe
  force:
    description: Every class gets a canary, even where a host holds a pin of its fingerprint (C(kv_tune_force)).
    type: bool
    default: false
"""

EXAMPLES = r"""
- name: This host's part
  ansible.builtin.set_fact:
    kv_tune_class: "{{ (hostvars | llmserve.sglang.kv_tune_class_plan(ansible_play_hosts))[inventory_hostname] }}"
"""

RETURN = r"""
_value:
  description: Host -> C(canary) (true when one of its units searches for a class), C(lines) (one per unit, for
    the output) and C(units), unit -> C(role) (V(canary), V(member) or V(alone)), C(class) (the first 12 hex digits
    of the fingerprint hash), C(canary) (who gives the value a member verifies, C(host) or C(host/unit)),
    C(canary_host) and C(canary_unit), C(value) (a pinned value of the class, when one is known already) and
    C(why).
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner.class_values import class_plan_units
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

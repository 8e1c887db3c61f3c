# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filter kv_tune_fleet_plan: The KV tuner's plan for a whole run, computed once on the controller."""
from __future__ import annotations

DOCUMENTATION = r"""
name: kv_tune_fleet_plan
short_description: The KV tuner's plan for a whole run, computed once on the controller
version_added: 1.0.0
author:
  - llmserve.sglang contributors (@llmserve)
description:
  - From what every host registered when M(llmserve.sglang.kv_tune) was asked in check mode, in one pass over
    the hosts - which hosts need tuning (group C(kv_tune_todo)), the servers that span hosts
    (P(llmserve.sglang.kv_tune_server_plan#filter), group C(kv_tune_multinode)) and, with O(strategy=per_class),
    the classes of identical fingerprints (P(llmserve.sglang.kv_tune_class_plan#filter), group
    C(kv_tune_canaries)).
  - The C(probe) entry point of the P(llmserve.sglang.kv_tune#role) role runs it once (C(run_once)), so that a
    run costs time linear in its hosts; every host reads its entry under C(hosts).
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
  strategy:
    description: C(kv_tune_strategy) of the run; the classes are planned for V(per_class) only.
    type: str
    default: per_host
    choices: [per_host, per_class]
  force:
    description: Every class gets a canary, even where a host holds a pin of its fingerprint (C(kv_tune_force)).
    type: bool
    default: false
  probe_var:
    description: The variable each host registered the check-mode M(llmserve.sglang.kv_tune) result in.
    type: str
    default: kv_tune_probe
"""

EXAMPLES = r"""
- name: The plan of the run, once
  ansible.builtin.set_fact:
    kv_tune_fleet: "{{ hostvars | llmserve.sglang.kv_tune_fleet_plan(ansible_play_hosts, strategy=kv_tune_strategy) }}"
  run_once: true
"""

RETURN = r"""
_value:
  description:
    - C(hosts), host -> C(unchanged) (every unit's pin holds), C(server) (its entry of
      P(llmserve.sglang.kv_tune_server_plan#filter) or V(null)), C(class) (its entry of
      P(llmserve.sglang.kv_tune_class_plan#filter) under V(per_class), else V(null)), C(lines) (the class lines
      to print), C(error) (why its server cannot be tuned in this run, or V(null)) and C(groups).
    - C(groups), group -> hosts (C(kv_tune_todo), C(kv_tune_multinode), C(kv_tune_canaries)); C(memberships), a list
      of C(host) and C(groups) for the hosts in any group; C(errors), host -> message; C(classes), class ->
      C(canary), C(members) and C(value); C(servers), server key -> C(nodes), C(tune), C(why) and C(error).
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.llmserve.sglang.plugins.plugin_utils.fleet.fleet_plan import fleet_plan
from ansible_collections.llmserve.sglang.plugins.plugin_utils.plain import flag
from ansible_collections.llmserve.sglang.plugins.plugin_utils.report_files import registered_outcomes


def kv_tune_fleet_plan(hostvars, hosts, strategy="per_host", force=False, probe_var="kv_tune_probe"):
    """{hosts, groups, memberships, errors, classes, servers} from what each host of ``hosts`` registered when
    kv_tune was asked in check mode (plugin_utils/fleet/fleet_plan.py)."""
    if isinstance(hosts, str) or not hasattr(hosts, "__iter__"):
        raise AnsibleFilterError("kv_tune_fleet_plan expects a list of hosts, got %s" % type(hosts).__name__)
    hosts = [str(host) for host in hosts]
    probes = registered_outcomes(hostvars, hosts, probe_var)
    return fleet_plan(probes, hosts, strategy=str(strategy), force=flag("force", force))


class FilterModule:
    def filters(self):
        return {"kv_tune_fleet_plan": kv_tune_fleet_plan}

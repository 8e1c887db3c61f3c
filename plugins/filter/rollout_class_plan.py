# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filter rollout_class_plan: a host's per_class plan for its re-tune in the rollout."""
from __future__ import annotations

DOCUMENTATION = r"""
name: rollout_class_plan
short_description: A host's per_class plan for its re-tune in the rollout
version_added: 1.0.0
author:
  - llmserve.sglang contributors (@llmserve)
description:
  - For the rollout role with C(kv_tune_strategy=per_class), before a host's re-tune on the new release.
  - A server whose fingerprint on the new release is one that a host of an earlier batch re-tuned, or found holding,
    verifies that value with one restart under the load; the first server of a fingerprint searches for it, and the
    other servers of its host with the same fingerprint verify its value.
  - Hosts of one batch run at once, so two of them with a new fingerprint both search.
  - Returns the kv_tune role's C(kv_tune_class) (C(canary), C(units), C(lines)).
options:
  _input:
    description: The results of M(llmserve.sglang.kv_fingerprint) for each of the host's units (a registered loop).
    type: list
    elements: dict
    required: true
  hosts:
    description: The play's hosts (C(ansible_play_hosts_all)); those with a C(kv_tune_outcome) have re-tuned.
    type: list
    elements: str
    required: true
extends_documentation_fragment:
  - llmserve.sglang.hostvars
  - llmserve.sglang.hostvars.this_host
"""

EXAMPLES = r"""
- name: Plan the re-tune of the host's servers by class
  ansible.builtin.set_fact:
    kv_tune_class: "{{ fingerprints.results | llmserve.sglang.rollout_class_plan(hostvars, ansible_play_hosts_all,
                                                                                inventory_hostname) }}"
"""

RETURN = r"""
_value:
  description: C(canary) (a unit of the host searches for a class), C(units) (unit -> its class entry), C(lines).
  type: dict
"""

from ansible_collections.llmserve.sglang.plugins.plugin_utils.fleet import rollout_classes
from ansible_collections.llmserve.sglang.plugins.plugin_utils.plain import plain


def rollout_class_plan(fingerprints, hostvars, hosts, host):
    """plugin_utils/fleet/rollout_classes.py class_plan, with the kv_tune outcomes of the hosts that re-tuned."""
    host = str(host)
    earlier = {}
    for name in [str(other) for other in plain(hosts)]:
        found = hostvars[name]
        if name != host and "kv_tune_outcome" in found:
            earlier[name] = plain(found["kv_tune_outcome"])
    return rollout_classes.class_plan(host, plain(fingerprints), earlier)


class FilterModule:
    def filters(self):
        return {"rollout_class_plan": rollout_class_plan}

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filter rollout_rescue_plan: What the rollout does with a host that failed in a phase."""
from __future__ import annotations

DOCUMENTATION = r"""
name: rollout_rescue_plan
short_description: What the rollout does with a host that failed in a phase
version_added: 1.0.0
author:
  - llmserve.sglang contributors (@llmserve)
description:
  - For the rollout role's rescue; the host's servers are handled together, since they share its SGLang.
  - A failure in V(upgrade) or V(gate_after) for a lack of memory on the old pin (an out-of-memory at start, in
    the CUDA-graph capture or under the load, read from each server's startup log) is re-tuned for the new release
    (C(retune)), unless O(retune) is false.
  - Any other failure after the upgrade began (phases V(upgrade), V(gate_after), V(retune)) rolls SGLang back to
    the version recorded before it, with each server's pin verified on that version; a failure after the drain
    hook started (except in the undrain hook itself) calls the undrain hook once every server answers a real
    generation again.
options:
  _input:
    description: The phase that failed, one of V(lock), V(gate_before), V(drain), V(upgrade), V(gate_after),
      V(retune), V(undrain).
    type: str
    required: true
  before:
    description:
      - The M(llmserve.sglang.kv_fingerprint) results recorded before the upgrade, one per unit (a loop's
        C(results)); their SGLang version is the one rolled back to. Without them nothing is rolled back.
    type: list
    elements: dict
  boots:
    description:
      - The M(llmserve.sglang.sglang_startup_facts) results of each unit read after the failure (a loop's
        C(results)), which tell whether it was a lack of memory.
    type: list
    elements: dict
  retune:
    description: Whether a lack of memory is re-tuned (C(rollout_retune)).
    type: bool
    default: true
  nodes:
    description:
      - The hosts of this host's server by rank, where it spans hosts; with O(hostvars), every node's O(boots)
        (C(__rollout_boots)) decide, so that the nodes decide alike, and a node's lost connection beside another
        node's lack of memory is only its echo.
    type: list
    elements: str
  hostvars:
    description: C(hostvars), with O(nodes).
    type: dict
  cause:
    description: The cause to keep (a roll-back after the re-tune an earlier plan asked for failed).
    type: dict
"""

EXAMPLES = r"""
- name: Decide
  ansible.builtin.set_fact:
    plan: "{{ 'gate_after' | llmserve.sglang.rollout_rescue_plan(fingerprints_before.results, boots=boots.results) }}"
"""

RETURN = r"""
_value:
  description: C(retune) (bool), C(stop) (the units to stop before the re-tune, those whose last start failed) and
    C(cause) (C(memory), C(why)); C(roll_back) (bool), C(version) (the version to
    reinstall, or V(null)), C(pins) (the kv_trial arguments that put back each unit's pin, with C(unit)),
    C(restart) (the units to restart after it); C(undrain) (bool), C(gate) (whether to check a real generation
    from each server), C(no_record) (a roll-back was due but no version was recorded).
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.llmserve.sglang.plugins.plugin_utils.fleet import rollout
from ansible_collections.llmserve.sglang.plugins.plugin_utils.plain import plain


def rollout_rescue_plan(phase, before=None, boots=None, retune=True, nodes=None, hostvars=None, cause=None):
    """What the rescue does after a failure in ``phase``, given the kv_fingerprint results recorded before."""
    node_boots = None
    if nodes and len(nodes) > 1 and hostvars is not None:
        node_boots = {host: plain((hostvars[host].get("__rollout_boots") or {}).get("results")) for host in nodes}
    try:
        return rollout.rescue_plan(plain(phase), plain(before) or None, boots=plain(boots) or None,
                                   retune=bool(plain(retune)), node_boots=node_boots, cause=plain(cause) or None)
    except rollout.RolloutError as exc:
        raise AnsibleFilterError(str(exc))


class FilterModule:
    def filters(self):
        return {"rollout_rescue_plan": rollout_rescue_plan}

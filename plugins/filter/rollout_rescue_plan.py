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
  - For the rollout role's rescue. A failure after the upgrade began (phases V(upgrade), V(gate_after),
    V(retune)) rolls SGLang back to the version recorded before it; a failure after the drain hook started
    (except in the undrain hook itself) calls the undrain hook once the host answers a real generation again.
options:
  _input:
    description: The phase that failed, one of V(gate_before), V(drain), V(upgrade), V(gate_after), V(retune),
      V(undrain).
    type: str
    required: true
  before:
    description:
      - The M(llmserve.sglang.kv_fingerprint) result recorded before the upgrade; its SGLang version is the one
        rolled back to. Without it nothing is rolled back.
    type: dict
"""

EXAMPLES = r"""
- name: Decide
  ansible.builtin.set_fact:
    plan: "{{ 'gate_after' | llmserve.sglang.rollout_rescue_plan(fingerprint_before) }}"
"""

RETURN = r"""
_value:
  description: C(roll_back) (bool), C(version) (the version to reinstall, or V(null)), C(undrain) (bool),
    C(gate) (whether to check a real generation), C(no_record) (a roll-back was due but no version was recorded).
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.llmserve.sglang.plugins.plugin_utils.fleet import rollout
from ansible_collections.llmserve.sglang.plugins.plugin_utils.plain import plain


def rollout_rescue_plan(phase, before=None):
    """What the rescue does after a failure in ``phase``, given the kv_fingerprint result recorded before."""
    try:
        return rollout.rescue_plan(plain(phase), plain(before) or None)
    except rollout.RolloutError as exc:
        raise AnsibleFilterError(str(exc))


class FilterModule:
    def filters(self):
        return {"rollout_rescue_plan": rollout_rescue_plan}

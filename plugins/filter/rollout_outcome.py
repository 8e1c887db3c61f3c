# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filter rollout_outcome: A host's outcome in a rollout, from what the rollout role observed."""
from __future__ import annotations

DOCUMENTATION = r"""
name: rollout_outcome
short_description: A host's outcome in a rollout, from what the rollout role observed
version_added: 1.0.0
author:
  - llmserve.sglang contributors (@llmserve)
description:
  - The status (V(upgraded), V(unchanged), V(rolled_back), V(rollback_failed), V(not_upgraded),
    V(undrain_failed)), what the host ended on (SGLang and driver versions, model path) and, for a failed host,
    the message it fails with, naming what failed and what it is back on.
options:
  _input:
    description: The host (inventory name).
    type: str
    required: true
  phase:
    description: The phase the host reached, V(done) after the whole rollout.
    type: str
    required: true
  before:
    description: The M(llmserve.sglang.kv_fingerprint) result before the upgrade.
    type: dict
  after:
    description: The M(llmserve.sglang.kv_fingerprint) result at the end.
    type: dict
  failure:
    description: C(task) and C(msg) of the task that failed.
    type: dict
  plan:
    description: The P(llmserve.sglang.rollout_rescue_plan#filter) answer.
    type: dict
  rollback:
    description: C(failed) and C(msg) of the roll-back, when one ran.
    type: dict
  gate:
    description: The M(llmserve.sglang.sglang_ready) result after the rescue.
    type: dict
  retune:
    description: The M(llmserve.sglang.kv_tune) result.
    type: dict
"""

EXAMPLES = r"""
- name: The outcome
  ansible.builtin.set_fact:
    rollout_outcome: "{{ inventory_hostname | llmserve.sglang.rollout_outcome(phase='done', before=fp_before, after=fp_after) }}"
"""

RETURN = r"""
_value:
  description: C(host), C(status), C(phase), C(before), C(after), C(retune), C(retune_why), C(error), C(failed)
    (whether the host must fail), C(msg) and C(line).
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.llmserve.sglang.plugins.plugin_utils.fleet import rollout
from ansible_collections.llmserve.sglang.plugins.plugin_utils.plain import plain


def rollout_outcome(host, phase, before=None, after=None, failure=None, plan=None, rollback=None, gate=None,
                    retune=None):
    """The host's outcome: status, what it ended on, the failure message."""
    try:
        return rollout.outcome(plain(host), plain(phase), before=plain(before), after=plain(after),
                               failure=plain(failure), plan=plain(plan), rollback=plain(rollback), gate=plain(gate),
                               retune=plain(retune))
    except rollout.RolloutError as exc:
        raise AnsibleFilterError(str(exc))


class FilterModule:
    def filters(self):
        return {"rollout_outcome": rollout_outcome}

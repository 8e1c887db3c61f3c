# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filter rollout_outcome: A host's outcome in a rollout, from what the rollout role observed."""
from __future__ import annotations

DOCUMENTATION = r"""
name: rollout_outcome
short_description: A host's outcome in a rollout, a row per server, from what the rollout role observed
version_added: 1.0.0
author:
  - llmserve.sglang contributors (@llmserve)
description:
  - For each server of the host, its status (V(upgraded), V(retuned), V(unchanged), V(rolled_back),
    V(rollback_failed), V(not_upgraded), V(undrain_failed), V(not_serving)), what it ended on (SGLang and driver
    versions, model path), its pin before and after (value and verified pool tokens), why a failure was or was not
    re-tuned and, for a failed host, the message it fails with, naming what failed and what it is back on.
options:
  _input:
    description: The host (inventory name).
    type: str
    required: true
  phase:
    description: The phase the host reached, V(done) after the whole rollout.
    type: str
    required: true
  units:
    description: The host's servers (C(rollout_units)).
    type: list
    elements: str
  before:
    description: The M(llmserve.sglang.kv_fingerprint) results before the upgrade, one per unit.
    type: list
    elements: dict
  after:
    description: The M(llmserve.sglang.kv_fingerprint) results at the end, one per unit.
    type: list
    elements: dict
  failure:
    description: The task that failed, C(task) (its name) and C(result) (C(ansible_failed_result)) or C(msg).
    type: dict
  plan:
    description: The P(llmserve.sglang.rollout_rescue_plan#filter) answer.
    type: dict
  rollback:
    description: C(failed) and C(msg) of the roll-back, when one ran.
    type: dict
  gate:
    description: The M(llmserve.sglang.sglang_ready) results after the rescue, one per unit.
    type: list
    elements: dict
  retune:
    description: The M(llmserve.sglang.kv_tune) result.
    type: dict
  retuned:
    description: The re-tune that the plan asked for after a lack of memory succeeded.
    type: bool
    default: false
  retune_failure:
    description: Where that re-tune failed instead, as O(failure).
    type: dict
  undrain_failure:
    description: Where the undrain hook after the rescue failed, as O(failure).
    type: dict
"""

EXAMPLES = r"""
- name: The outcome
  ansible.builtin.set_fact:
    rollout_outcome: >-
      {{ inventory_hostname | llmserve.sglang.rollout_outcome(phase='done', units=['sglang.service'],
         before=fingerprints_before.results, after=fingerprints_after.results) }}
"""

RETURN = r"""
_value:
  description: C(host), C(failed) (whether the host must fail), C(msg), C(line) and C(rows), one per server with
    C(host), C(server), C(unit), C(status), C(phase), C(before), C(after), C(pin_before), C(pin_after), C(retune),
    C(retune_why), C(cause), C(error), C(failed), C(msg) and C(line).
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.llmserve.sglang.plugins.plugin_utils.fleet import rollout
from ansible_collections.llmserve.sglang.plugins.plugin_utils.plain import plain


def rollout_outcome(host, phase, units=None, before=None, after=None, failure=None, plan=None, rollback=None,
                    gate=None, retune=None, retuned=False, retune_failure=None, undrain_failure=None):
    """The host's outcome: a row per server, what each ended on, the failure message."""
    try:
        return rollout.outcome(plain(host), plain(phase), units=plain(units), before=plain(before),
                               after=plain(after), failure=plain(failure), plan=plain(plan),
                               rollback=plain(rollback), gate=plain(gate), retune=plain(retune),
                               retuned=bool(plain(retuned)), retune_failure=plain(retune_failure),
                               undrain_failure=plain(undrain_failure))
    except rollout.RolloutError as exc:
        raise AnsibleFilterError(str(exc))


class FilterModule:
    def filters(self):
        return {"rollout_outcome": rollout_outcome}

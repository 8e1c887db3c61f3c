# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filter rollout_upgrade_trials: The servers whose upgrade restart starts on the value the tuner would try first."""
from __future__ import annotations

DOCUMENTATION = r"""
name: rollout_upgrade_trials
short_description: The servers whose upgrade restart starts on the value the tuner would try first
version_added: 1.0.0
author:
  - llmserve.sglang contributors (@llmserve)
description:
  - Where the capacity engine knows that the new SGLang sizes memory differently from the one a pin was verified on,
    the value the tuner would try first on it, for the upgrade's own restart to start as a trial (M(llmserve.sglang.kv_trial)
    O(llmserve.sglang.kv_trial#module:restart=false)) that the re-tune measures in place under the load.
  - One difference is known. From SGLang 0.5.14 an EAGLE-family draft's weights and KV count in
    C(--mem-fraction-static), which they did not before, so the value rises by them and by the pin's own spare
    headroom under the load, over P, on the grid and at or below the cap.
  - With C(kv_tune_strategy=per_class), a member whose class (its fingerprint on the new release) a host of an
    earlier batch verified a value under starts that value, less O(margin_steps) grid steps, which its re-tune
    verifies in place; nothing is predicted for the others.
  - Elsewhere the pin itself is started and measured in place, as before; so for a server that spans hosts.
options:
  _input:
    description: The M(llmserve.sglang.kv_fingerprint) results before the upgrade, one per unit (a loop's C(results)).
    type: list
    elements: dict
    required: true
  on_disk:
    description: The M(llmserve.sglang.kv_fingerprint) results once the new SGLang is installed, before the servers
      restart.
    type: list
    elements: dict
    required: true
  boots:
    description: The M(llmserve.sglang.sglang_startup_facts) results of the running servers, one per unit.
    type: list
    elements: dict
    required: true
  per_class:
    description: Whether the re-tune runs per class (then only O(class_plan)'s members get a value).
    type: bool
    default: false
  class_plan:
    description: With O(per_class), the host's classes on the new release (the filter
      P(llmserve.sglang.rollout_class_plan#filter) of the O(on_disk) results).
    type: dict
  margin_steps:
    description: With O(per_class), the grid steps a member verifies below its class's value
      (C(kv_tune_class_margin_steps)).
    type: int
    default: 0
  settings:
    description: This run's C(kv_tune_resolution), C(kv_tune_cap) and C(kv_tune_safety_gib) as C(resolution), C(cap)
      and C(safety_gib), where the inventory or C(-e) sets them (V(null) or absent, each); where not, those the pin
      was verified with. A value is never predicted above the cap that the re-tune runs with.
    type: dict
"""

EXAMPLES = r"""
- name: Start the new release on the value the tuner would try first
  llmserve.sglang.kv_trial:
    unit: "{{ item.unit }}"
    run_id: "{{ run_id }}"
    state: started
    restart: false
    value: "{{ item.value }}"
  loop: "{{ before.results | llmserve.sglang.rollout_upgrade_trials(on_disk.results, boots.results) }}"
"""

RETURN = r"""
_value:
  description: One entry per such unit, with C(unit), C(value) (the value's text) and C(why) (the numbers).
  type: list
  elements: dict
"""

from ansible_collections.llmserve.sglang.plugins.plugin_utils.fleet import upgrade_value
from ansible_collections.llmserve.sglang.plugins.plugin_utils.plain import plain


def rollout_upgrade_trials(before, on_disk, boots, per_class=False, class_plan=None, margin_steps=0, settings=None):
    """The units to arm a first trial on (plugin_utils/fleet/upgrade_value.py upgrade_trials)."""
    return upgrade_value.upgrade_trials(plain(before), plain(on_disk), plain(boots), bool(per_class),
                                        plain(class_plan), int(margin_steps), plain(settings))


class FilterModule:
    def filters(self):
        return {"rollout_upgrade_trials": rollout_upgrade_trials}

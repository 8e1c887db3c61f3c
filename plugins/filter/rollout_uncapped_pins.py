# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filter rollout_uncapped_pins: The pins whose pool cap the upgrade must not carry into the new release."""
from __future__ import annotations

DOCUMENTATION = r"""
name: rollout_uncapped_pins
short_description: The pins whose pool cap the upgrade must not carry into the new release
version_added: 1.0.0
author:
  - llmserve.sglang contributors (@llmserve)
description:
  - A pin's C(--max-total-tokens) (C(kv_tune_pin_tokens)) is the pool verified on the release, driver and model it
    was tuned on, in that release's cell size. For each unit whose pin has one and whose fingerprint on disk no
    longer matches the pin's once the upgrade installed the new SGLang or model, the kv_trial arguments that keep
    the value and drop the cap until the re-tune pins (and caps) anew.
options:
  _input:
    description: The M(llmserve.sglang.kv_fingerprint) results before the upgrade, one per unit (a loop's C(results)).
    type: list
    elements: dict
    required: true
  on_disk:
    description: The M(llmserve.sglang.kv_fingerprint) results once the new SGLang or model is installed, before the
      servers restart.
    type: list
    elements: dict
    required: true
"""

EXAMPLES = r"""
- name: Drop the old release's pool cap from each pin
  llmserve.sglang.kv_trial:
    unit: "{{ item.unit }}"
    state: committed
    value: "{{ item.value }}"
    fact: "{{ item.fact }}"
  loop: "{{ before.results | llmserve.sglang.rollout_uncapped_pins(on_disk.results) }}"
"""

RETURN = r"""
_value:
  description: One entry per such unit, with C(unit), C(value) (the pinned value's text) and C(fact) (its entry
    without C(max_total_tokens)).
  type: list
  elements: dict
"""

from ansible_collections.llmserve.sglang.plugins.plugin_utils.fleet import rollout
from ansible_collections.llmserve.sglang.plugins.plugin_utils.plain import plain


def rollout_uncapped_pins(before, on_disk):
    """The pins to commit again without their cap (plugin_utils/fleet/rollout.py uncapped_pins)."""
    return rollout.uncapped_pins(plain(before), plain(on_disk))


class FilterModule:
    def filters(self):
        return {"rollout_uncapped_pins": rollout_uncapped_pins}

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filter rollout_failed_starts: The start of each server seen failing, for the rollout's rescue to read."""
from __future__ import annotations

DOCUMENTATION = r"""
name: rollout_failed_starts
short_description: The start of each server seen failing, for the rollout's rescue to read
version_added: 1.0.0
author:
  - llmserve.sglang contributors (@llmserve)
description:
  - For the rollout role's rescue. Maps each unit to the C(InvocationID) of its start that the upgrade's wait (the
    sglang_service role) or the rollout's gate (M(llmserve.sglang.sglang_ready)) saw fail, so that
    M(llmserve.sglang.sglang_startup_facts) reads that start's own log. By then systemd may have begun another start
    of the unit (its C(RestartSec)), whose log says nothing yet.
options:
  _input:
    description: The sglang_service role's C(sglang_service_failed_starts) (unit -> C(InvocationID)), or V({}).
    type: dict
    required: true
  gate_results:
    description: The results of the rollout's gate, a loop of M(llmserve.sglang.sglang_ready) over the units.
    type: list
    elements: dict
    default: []
"""

EXAMPLES = r"""
- name: Read the start of each server that failed
  llmserve.sglang.sglang_startup_facts:
    unit: "{{ item }}"
    invocation_id: "{{ failed_starts[item] | default(omit) }}"
  loop: "{{ rollout_units }}"
  vars:
    failed_starts: "{{ sglang_service_failed_starts | default({}) | llmserve.sglang.rollout_failed_starts(gate.results) }}"
"""

RETURN = r"""
_value:
  description: Unit -> the C(InvocationID) of its start seen failing; a unit seen failing by neither is absent.
  type: dict
"""

from ansible_collections.llmserve.sglang.plugins.plugin_utils.fleet import rollout
from ansible_collections.llmserve.sglang.plugins.plugin_utils.plain import plain


def rollout_failed_starts(service_failed, gate_results=None):
    """plugin_utils/fleet/rollout.py failed_starts."""
    return rollout.failed_starts(plain(service_failed), plain(gate_results))


class FilterModule:
    def filters(self):
        return {"rollout_failed_starts": rollout_failed_starts}

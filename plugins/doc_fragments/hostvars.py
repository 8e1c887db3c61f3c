# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations


class ModuleDocFragment:
    # The option of the rollout's filters that read other hosts' variables (rollout_check_inputs, rollout_batches,
    # rollout_peers, rollout_class_plan).
    DOCUMENTATION = r"""
options:
  hostvars:
    description: C(hostvars).
    type: dict
    required: true
"""

    # The filters that answer for one host of the play (rollout_peers, rollout_class_plan).
    THIS_HOST = r"""
options:
  host:
    description: This host (C(inventory_hostname)).
    type: str
    required: true
"""

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""rollout_rescue_plan and rollout_outcome: the rollout role's decisions (module_utils/rollout.py). Documentation:
rollout_rescue_plan.yml and rollout_outcome.yml beside this file."""
from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.llmserve.sglang.plugins.module_utils import rollout
from ansible_collections.llmserve.sglang.plugins.plugin_utils.plain import plain


def rollout_rescue_plan(phase, before=None):
    """What the rescue does after a failure in ``phase``, given the kv_fingerprint result recorded before."""
    try:
        return rollout.rescue_plan(plain(phase), plain(before) or None)
    except rollout.RolloutError as exc:
        raise AnsibleFilterError(str(exc))


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
        return {"rollout_rescue_plan": rollout_rescue_plan, "rollout_outcome": rollout_outcome}

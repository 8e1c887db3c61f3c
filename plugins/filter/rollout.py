# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""rollout_rescue_plan, rollout_outcome and rollout_check_inputs: the rollout's decisions (module_utils/rollout.py).
Documentation: the .yml file of each beside this file."""
from __future__ import annotations

import os

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


def rollout_check_inputs(hosts, hostvars, playbook_dir):
    """Every host's rollout inputs checked (module_utils/rollout.py check_inputs); raises with each bad one."""
    values = {}
    for host in plain(hosts):
        own = hostvars[host]
        values[host] = {name: plain(own[name]) for name in rollout.INPUTS if name in own}
    # The one observation the pure check needs: which hook files exist on the controller.
    paths = {rollout.hook_path(str(one.get(name) or ""), str(playbook_dir))
             for one in values.values() for name in rollout.HOOKS if one.get(name)}
    try:
        return rollout.check_inputs(values, frozenset(path for path in paths if os.path.isfile(path)),
                                    str(playbook_dir))
    except rollout.RolloutError as exc:
        raise AnsibleFilterError(str(exc))


class FilterModule:
    def filters(self):
        return {"rollout_rescue_plan": rollout_rescue_plan, "rollout_outcome": rollout_outcome,
                "rollout_check_inputs": rollout_check_inputs}

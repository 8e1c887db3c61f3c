# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The fleet summary of a rollout, on the controller (documentation: plugins/modules/rollout_summary.py).

The rows are plugin_utils/fleet/rollout.py's summary_rows; this file reads the hosts' recorded outcomes and writes
rollout_summary.json on the controller itself.
"""
from __future__ import annotations

import os
from typing import Any

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.llmserve.sglang.plugins.plugin_utils.fleet.rollout import failed_row, summary_rows
from ansible_collections.llmserve.sglang.plugins.plugin_utils.report_files import (
    handed_on,
    pending_hosts,
    registered_outcomes,
    workflow_stats,
    write_summary,
)

display = Display()

ARGUMENT_SPEC = dict(
    hosts=dict(type="list", elements="str", required=True),
    report_dir=dict(type="path", required=True),
    result_var=dict(type="str", default="rollout_outcome"),
    pending=dict(type="list", elements="str", default=[]),
    stats_name=dict(type="str", default="llmserve_rollout"),
)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp: str | None = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        super(ActionModule, self).run(tmp, task_vars)
        if task_vars is None:
            task_vars = {}
        _validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        outcomes = registered_outcomes(task_vars.get("hostvars", {}), args["hosts"], args["result_var"])
        rows = summary_rows(outcomes, pending=pending_hosts(task_vars, outcomes, set(args["pending"])))
        path = os.path.join(args["report_dir"], "rollout_summary.json")
        changed = write_summary(path, rows, self._task.check_mode)
        for row in rows:
            display.display(row["line"])
        display.display("rollout summary: %s" % path)
        stats = workflow_stats(rows, args["report_dir"], failed_row, environ=os.environ)
        return dict(handed_on(args["stats_name"], stats), changed=changed, rows=rows, path=path, stats=stats)

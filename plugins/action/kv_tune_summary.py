# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The fleet summary of a KV tuning run, on the controller (documentation: plugins/modules/kv_tune_summary.py).

The rows are plugin_utils/tuner/tuner.py's summary_rows; this file reads the hosts' registered results and writes
summary.json on the controller itself (no module process: a no-op run of tune_kv.yml stays cheap).
"""
from __future__ import annotations

import os
from typing import Any

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner.report_lines import (
    failed_row,
    restarts_line,
    restarts_total,
    summary_rows,
)
from ansible_collections.llmserve.sglang.plugins.module_utils.service.host_units import expand_units
from ansible_collections.llmserve.sglang.plugins.plugin_utils.report_files import (
    handed_on,
    host_vars_warning,
    pending_hosts,
    registered_outcomes,
    workflow_stats,
    write_summary,
)

display = Display()

ARGUMENT_SPEC = dict(
    hosts=dict(type="list", elements="str", required=True),
    report_dir=dict(type="path", required=True),
    result_var=dict(type="str", default="kv_tune_outcome"),
    pending=dict(type="list", elements="str", default=[]),
    host_vars_dir=dict(type="path", default=""),
    stats_name=dict(type="str", default="llmserve_kv_tune"),
)

# Files that podman and docker put in their containers (an execution environment runs in one).
CONTAINER_MARKERS = ("/run/.containerenv", "/.dockerenv")


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp: str | None = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        super(ActionModule, self).run(tmp, task_vars)
        if task_vars is None:
            task_vars = {}
        _validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        outcomes = registered_outcomes(task_vars.get("hostvars", {}), args["hosts"], args["result_var"])
        # A host with several servers gives a row per unit.
        rows = summary_rows(expand_units(outcomes), pending=pending_hosts(task_vars, outcomes, set(args["pending"])))
        path: str | None
        path = os.path.join(args["report_dir"], "summary.json")
        changed = False
        # A run in which no host got as far as the tuner (bad input, nothing reachable) keeps the last summary.
        reached = [row for row in rows if not row["status"].startswith("not tuned")]
        if not reached:
            display.display("no host reached the tuner: %s is left as it was" % path)
            path = None
        elif rows:
            changed = write_summary(path, rows, self._task.check_mode)
        for row in rows:
            display.display(row["line"])
        display.display(restarts_line(rows))
        display.display("reports: %s" % args["report_dir"])
        stats = workflow_stats(rows, args["report_dir"], failed_row, environ=os.environ,
                               restarts=restarts_total(rows))
        result = dict(handed_on(args["stats_name"], stats), changed=changed, rows=rows, path=path if rows else None,
                      stats=stats)
        # Once, after the last batch: pins written to the controller's host_vars that the job will not keep.
        if not any(row["status"] == "not tuned: its batch has not run" for row in rows):
            warning = host_vars_warning(args["host_vars_dir"], os.environ,
                                        in_container=any(os.path.exists(marker) for marker in CONTAINER_MARKERS))
            if warning:
                result["warnings"] = [warning]
        return result

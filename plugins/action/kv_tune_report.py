# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""One host's KV tuning reports, written on the controller (documentation: plugins/modules/kv_tune_report.py).

The files are plugin_utils/report_files.py's tune_report_files; this file writes them from the controller's own
process: a file and two copy tasks per report started a module process each on the controller (about 0.4 s of CPU
apiece, on every host of a fleet run)."""
from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.llmserve.sglang.plugins.module_utils import checks
from ansible_collections.llmserve.sglang.plugins.module_utils.service.host_units import report_items
from ansible_collections.llmserve.sglang.plugins.plugin_utils.plain import plain
from ansible_collections.llmserve.sglang.plugins.plugin_utils.report_files import tune_report_files, write_files

ARGUMENT_SPEC = dict(
    outcome=dict(type="dict", required=True),
    report_dir=dict(type="path", required=True),
    host_vars_dir=dict(type="path", default=""),
)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp: str | None = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        super(ActionModule, self).run(tmp, task_vars)
        _validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        host = (task_vars or {}).get("inventory_hostname")
        try:
            host_dir = checks.file_name("The inventory host name", host) if args["host_vars_dir"] else None
        except checks.InvalidInput as exc:
            raise AnsibleActionFail(str(exc)) from None
        items = report_items(plain(args["outcome"]))
        files = tune_report_files(items, args["report_dir"], args["host_vars_dir"], host_dir)
        written = write_files(files, self._task.check_mode)
        return {"changed": bool(written), "written": written, "files": [path for path, _text in files],
                "reports": [{"name": item["name"], "unit": item["unit"], "line": item["line"]} for item in items]}

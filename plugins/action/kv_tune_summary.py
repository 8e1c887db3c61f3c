# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The fleet summary of a KV tuning run, on the controller (documentation: plugins/modules/kv_tune_summary.py).

The rows are module_utils/kv_tune.py's summary_rows; this file reads the hosts' registered results and writes
summary.json on the controller itself (no module process: a no-op run of tune_kv.yml stays cheap).
"""
from __future__ import annotations

import json
import os

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.llmserve.sglang.plugins.module_utils.kv_tune import restarts_line, summary_rows
from ansible_collections.llmserve.sglang.plugins.plugin_utils.plain import plain
from ansible_collections.llmserve.sglang.plugins.plugin_utils.report_files import write_if_changed

display = Display()

ARGUMENT_SPEC = dict(
    hosts=dict(type="list", elements="str", required=True),
    report_dir=dict(type="path", required=True),
    result_var=dict(type="str", default="kv_tune_outcome"),
    pending=dict(type="list", elements="str", default=[]),
)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    @staticmethod
    def _pending(task_vars, hosts, later):
        """Hosts that have not had their turn yet: ``later`` (a later play of the playbook tunes them) or a later
        serial batch of this play, unless this play already dropped them (failed, unreachable)."""
        play_all = task_vars.get("ansible_play_hosts_all") or []
        active = task_vars.get("ansible_play_hosts") or []
        batch = task_vars.get("ansible_play_batch") or []
        dropped = set(play_all) - set(active)
        return {host for host in hosts if host not in dropped
                and (host in later or (host in active and host not in batch))}

    def run(self, tmp=None, task_vars=None):
        super(ActionModule, self).run(tmp, task_vars)
        _validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        hostvars = task_vars.get("hostvars", {})
        hosts = [host for host in args["hosts"] if host != "localhost"]
        outcomes = {}
        for host in hosts:
            outcome = hostvars[host].get(args["result_var"]) if host in hostvars else None
            outcomes[host] = plain(dict(outcome)) if outcome is not None else None
        rows = summary_rows(outcomes, pending=self._pending(task_vars, hosts, set(args["pending"])))
        path = os.path.join(args["report_dir"], "summary.json")
        changed = False
        # A run in which no host got as far as the tuner (bad input, nothing reachable) keeps the last summary.
        reached = [row for row in rows if not row["status"].startswith("not tuned")]
        if not reached:
            display.display("no host reached the tuner: %s is left as it was" % path)
            path = None
        elif rows:
            try:
                changed = write_if_changed(path, json.dumps(rows, indent=4, sort_keys=True) + "\n",
                                           self._task.check_mode)
            except OSError as exc:
                raise AnsibleActionFail("cannot write %s: %s" % (path, exc))
        for row in rows:
            display.display(row["line"])
        display.display(restarts_line(rows))
        display.display("reports: %s" % args["report_dir"])
        return {"changed": changed, "rows": rows, "path": path if rows else None}

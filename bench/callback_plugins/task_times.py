# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The benchmark's profile of a playbook: every task's wall time (from its start to the next task's), written as
JSON to $BENCH_TASK_TIMES at the end of the run. Enabled by bench/bench_fleet.py only."""
from __future__ import annotations

import json
import os
import time

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
name: task_times
type: aggregate
short_description: Every task's wall time, as JSON
description:
  - Writes [[seconds, task name], ...] in the order the tasks ran to the file named by BENCH_TASK_TIMES.
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "task_times"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super().__init__()
        self.times, self.current, self.started = [], None, None

    def _close(self):
        if self.current is not None:
            self.times.append([round(time.monotonic() - self.started, 4), self.current])
        self.current = None

    def v2_playbook_on_task_start(self, task, is_conditional):
        self._close()
        self.current, self.started = task.get_name(), time.monotonic()

    def v2_playbook_on_handler_task_start(self, task):
        self.v2_playbook_on_task_start(task, False)

    def v2_playbook_on_stats(self, stats):
        self._close()
        path = os.environ.get("BENCH_TASK_TIMES")
        if path:
            with open(path, "w", encoding="utf-8") as handle:
                json.dump(self.times, handle)

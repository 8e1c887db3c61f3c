# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The module release_guard, and once it armed a guard, the controller's heartbeat to it (documentation:
plugins/modules/release_guard.py; the heartbeat: plugin_utils/release_heartbeat.py).

The heartbeat is a process of its own, in a session of its own, so that it outlives the task, this worker, and a
signal to ansible-playbook's process group: it has to see ansible-playbook gone to say so to the host. It reaches
the host through this task's connection (a new ssh client for each beat), as root through the task's become.
"""
from __future__ import annotations

import os
import shlex
import signal
from typing import Any, Optional

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.llmserve.sglang.plugins.module_utils.service.release_guard import CONTROLLER_LEASE
from ansible_collections.llmserve.sglang.plugins.plugin_utils.release_heartbeat import (
    Heartbeat,
    beat_period,
    bounded,
    process_alive,
    process_identity,
)

display = Display()

# Connections that keep a live session in the worker (a socket and its thread): a forked process cannot use them.
_SESSION_CONNECTIONS = ("paramiko", "paramiko_ssh", "ansible.builtin.paramiko_ssh")


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def run(self, tmp: Optional[str] = None, task_vars: Optional[dict[str, Any]] = None) -> dict[str, Any]:
        result = super(ActionModule, self).run(tmp, task_vars)
        result.update(self._execute_module(module_name="llmserve.sglang.release_guard", module_args=self._task.args,
                                           task_vars=task_vars))
        args = self._task.args
        lease = int(args.get("controller_lease", CONTROLLER_LEASE))
        result["heartbeat"] = None
        if args.get("state") == "armed" and result.get("changed") and not result.get("failed") and lease:
            if self._connection.transport in _SESSION_CONNECTIONS:
                display.warning("release_guard: no heartbeat over the %s connection; the host goes back only when "
                                "the rollout's locks lapse" % self._connection.transport)
            else:
                result["heartbeat"] = self._start_heartbeat(args["run_id"], lease)
        return result

    def _start_heartbeat(self, run_id: str, lease: int) -> dict[str, Any]:
        """Fork the heartbeat (a grandchild that init adopts: nobody waits for it); its pid and period."""
        controller = os.getppid()       # ansible-playbook: this worker's parent
        identity = process_identity(controller)
        read_end, write_end = os.pipe()
        child = os.fork()
        if child == 0:
            try:
                os.close(read_end)
                os.setsid()
                grandchild = os.fork()
                if grandchild:
                    os.write(write_end, str(grandchild).encode("ascii"))
                else:
                    self._detach()
                    Heartbeat(run_id, lease, lambda argv: bounded(lambda: self._on_host(argv), beat_period(lease)),
                              lambda: process_alive(controller, identity)).run()
            finally:
                os._exit(0)     # never the worker's own exit path (its queue, its atexit handlers)
        os.close(write_end)
        pid = os.read(read_end, 32)
        os.close(read_end)
        os.waitpid(child, 0)
        return {"pid": int(pid) if pid else None, "lease": lease, "every": beat_period(lease),
                "controller_pid": controller}

    @staticmethod
    def _detach() -> None:
        """No stdio of the worker's, none of its other files (its result queue), default signals; what it would
        print goes nowhere rather than through the worker's queue, which no longer exists for it."""
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        os.closerange(3, os.sysconf("SC_OPEN_MAX") if hasattr(os, "sysconf") else 1024)
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, signal.SIG_DFL)
        display.verbosity = 0
        if hasattr(display, "_final_q"):
            display._final_q = None     # pylint: disable=protected-access

    def _on_host(self, argv: list[str]) -> int:
        """Run the host script's command as root (the task's become); its exit status."""
        return int(self._low_level_execute_command(shlex.join(argv), sudoable=True).get("rc", 255))

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The child processes of an Ansible worker, on the controller: what runs a module call in progress (the connection's
ssh client, or the module itself on a local connection), which the kv_tune action stops to cut that call short once
ansible-playbook is gone (plugin_utils/run/unit_run.py's outlives_controller decides which calls)."""
from __future__ import annotations

import os
import signal


def children(pid: int, proc: str = "/proc") -> list[int]:
    """The pids of ``pid``'s child processes, from ``proc`` (Linux's /proc: ``<pid>/stat``); [] where there is none."""
    found: list[int] = []
    try:
        entries = os.listdir(proc)
    except OSError:
        return found
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(os.path.join(proc, entry, "stat"), encoding="utf-8", errors="replace") as handle:
                text = handle.read()
        except OSError:   # gone meanwhile
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so the fields follow its last ")".
        fields = text[text.rfind(")") + 2:].split()
        if len(fields) > 1 and fields[1].isdigit() and int(fields[1]) == pid:
            found.append(int(entry))
    return sorted(found)


def stop_children(pid: int | None = None, proc: str = "/proc") -> list[int]:
    """SIGKILL every child process of ``pid`` (this process by default); the pids signalled. The call that waits on
    one (ansible's ssh connection) sees it exit and returns a module failure: an ssh client killed by a signal is
    not retried (ansible retries exit code 255 only)."""
    stopped: list[int] = []
    for child in children(os.getpid() if pid is None else pid, proc):
        try:
            os.kill(child, signal.SIGKILL)
        except OSError:   # gone meanwhile, or not ours
            continue
        stopped.append(child)
    return stopped

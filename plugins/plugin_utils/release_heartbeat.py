# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The controller's heartbeat to a host's release guard (action release_guard), on the controller.

The guard (module_utils/service/release_guard.py) puts the host back on the release and pins of before the upgrade
once the rollout's locks lapse. Without a heartbeat they last the leases of the rollout's steps: up to hours during
an install. With one, a process of its own on the controller renews them for a short lease (90 s) while
ansible-playbook lives, and tells the host at once when it is gone (killed, interrupted, cancelled): the host goes
back within seconds, or, where the controller's machine or network died with it, once the short lease ends.
"""
from __future__ import annotations

import os
import signal
import time
from typing import Any, Callable

from ansible_collections.llmserve.sglang.plugins.module_utils.service import kv_pin
from ansible_collections.llmserve.sglang.plugins.module_utils.service.release_guard import (
    NOTHING_TO_KEEP,
    SCRIPT_PATH,
    check_controller_lease,
)


def beat_period(lease: int) -> int:
    """Seconds between beats: four beats per lease, so that three lost in a row do not yet let the locks lapse."""
    return max(5, lease // 4)


def process_identity(pid: int) -> str | None:
    """The start time of process ``pid`` (/proc), so that a pid reused by another process is not taken for it;
    None where /proc does not say (another OS: then only whether the pid exists counts)."""
    try:
        with open("/proc/%d/stat" % pid, encoding="ascii", errors="replace") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] in ("Z", "X") else fields[19]     # a zombie is dead, its parent has yet to reap it


def process_alive(pid: int, identity: str | None) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return identity is None or process_identity(pid) == identity


class Heartbeat(object):
    """Run by a process of its own on the controller for one host: while ansible-playbook lives, renew the run's
    locks there every :func:`beat_period` seconds for ``lease`` seconds; once it is gone, tell the host at once
    (its guard puts it back), trying until the locks would have lapsed anyway. ``on_host(argv)`` runs the host
    script's command as root and returns its exit status (not 0 or 3: not reached, try again)."""

    def __init__(self, run_id: str, lease: int, on_host: Callable[[list[str]], int],
                 controller_alive: Callable[[], bool], sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic):
        self.run_id = kv_pin.check_run_id(run_id)
        self.lease = check_controller_lease(lease)
        self.on_host = on_host
        self.controller_alive = controller_alive
        self.sleep = sleep
        self.clock = clock

    def run(self) -> str:
        """Beat until the guard is retired (``retired``) or the controller is gone (``told`` the host, or
        ``lapsed``: it could not be reached, and its locks lapse by themselves)."""
        next_beat = self.clock()
        while True:
            if not self.controller_alive():
                return self.gone()
            if self.clock() >= next_beat:
                status = self.on_host([SCRIPT_PATH, self.run_id, "beat", str(self.lease)])
                if status == NOTHING_TO_KEEP:
                    return "retired"
                next_beat = self.clock() + beat_period(self.lease)
            self.sleep(1)

    def gone(self) -> str:
        """Tell the host (it releases the run's locks and starts its guard's check), every 5 s until it heard or
        the locks would have lapsed anyway."""
        deadline = self.clock() + self.lease
        while self.clock() < deadline:
            if self.on_host([SCRIPT_PATH, self.run_id, "gone"]) == 0:
                return "told"
            self.sleep(5)
        return "lapsed"


class _Expired(BaseException):
    """Not an Exception: what the call does with those (a connection's retries) must not swallow it."""


def bounded(call: Callable[[], int], seconds: int, failed: int = 255) -> int:
    """``call()``'s status, or ``failed`` when it raises or takes more than ``seconds`` (SIGALRM: the heartbeat is a
    process of its own, single-threaded): a beat whose ssh hangs on a dead network must not keep the heartbeat from
    seeing ansible-playbook gone."""
    def expire(_signum: int, _frame: Any) -> None:
        raise _Expired()

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(max(1, int(seconds)))
    try:
        return call()
    except (_Expired, Exception):   # pylint: disable=broad-except  # unreachable, ssh failed or hung: try again later
        return failed
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)

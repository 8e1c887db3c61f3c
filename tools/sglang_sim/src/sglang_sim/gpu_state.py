# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The live state of the simulated GPUs: what each running server holds on each GPU, for ``nvidia-smi``.

Every server rewrites its own small JSON file (``gpus-<pid>.json`` in ``/run/sglang-sim``, or in $SGLANG_SIM_STATE)
whenever its memory changes (at most ten times a second) and removes it on exit, so several servers on one host
(``sglang@a`` on GPUs 0-3, ``sglang@b`` on 4-7) each have theirs. Readers ignore a file whose process is gone, so a
server killed with SIGKILL leaves the GPUs free, as a dead process does on a real GPU.

File: ``{"pid": 1234, "gpus": {"0": {"used_bytes": 123, "process_name": "sglang::scheduler_TP0"}, ...}}``, plus,
while the faults.load_contention_mib neighbour holds memory on the server's GPUs (weight load to KV pool),
``"neighbours": {"0": {"used_bytes": 456, "process_name": "/usr/bin/python3", "pid": 91000}}``: another process,
listed under its own pid (NEIGHBOUR_PID + GPU index), that goes when the server's file goes; with
``"unlisted": true`` (faults.load_contention_unlisted) nvidia-smi counts its memory but lists no process for it.
"""
from __future__ import annotations

import contextlib
import fcntl
import glob
import json
import os
import threading
import time

NEIGHBOUR_PID = 91000
NEIGHBOUR_NAME = "/usr/bin/python3"


def pid_alive(pid: int) -> bool:
    """True when a process with this pid exists (zombies, which hold no GPU memory, count as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open("/proc/%d/stat" % pid, encoding="utf-8") as handle:
            return handle.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return True


def file_of(directory: str, pid: int) -> str:
    """The state file of the server with this pid."""
    return os.path.join(directory, "gpus-%d.json" % pid)


def _read_one(path: str) -> tuple:
    """(pid, [(gpu index, {"used_bytes", "process_name", "pid"[, "neighbour"]}), ...]) of one live server: its
    own memory, then its load_contention neighbour's (``"neighbour": True``); (None, []) when the file is unreadable
    or its process is gone."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
        pid = int(data["pid"])
        entries = [(int(index), dict(entry, pid=pid)) for index, entry in data["gpus"].items()]
        for index, entry in (data.get("neighbours") or {}).items():
            entries.append((int(index), dict(entry, pid=int(entry.get("pid", NEIGHBOUR_PID + int(index))),
                                             neighbour=True)))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None, []
    if not pid_alive(pid):
        return None, []
    return pid, entries


@contextlib.contextmanager
def allocation(directory: str):
    """Hold the host's allocation lock: a real GPU's allocations are atomic, so a server that grows on a shared GPU
    checks its room and writes its new size before another server checks (their files are otherwise written up to
    0.1 s late, and two batches that grow at the same moment would both fit)."""
    path = os.path.join(directory, "allocation.lock")
    try:
        # Read-only, and created only when missing: servers of other users share it in a sticky directory.
        descriptor = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        os.makedirs(directory, exist_ok=True)
        descriptor = os.open(path, os.O_RDONLY | os.O_CREAT, 0o644)
        os.fchmod(descriptor, 0o644)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)   # releases the lock


def read_state(directory: str, exclude_pid: int | None = None) -> dict:
    """``{gpu index: [{"used_bytes", "process_name", "pid"}, ...]}``: every live server's memory per GPU, by pid,
    and that of a server's load_contention neighbour (``"neighbour": True``, its own pid) while it holds some
    (``exclude_pid``'s own file left out)."""
    found = {}
    for path in sorted(glob.glob(os.path.join(directory, "gpus-*.json"))):
        pid, entries = _read_one(path)
        if pid is None or pid == exclude_pid:
            continue
        for index, entry in entries:
            found.setdefault(index, []).append(entry)
    return found


class StateWriter:
    """Keeps the state file in step with the server's per-GPU memory, from a background thread."""

    def __init__(self, directory: str, names: dict):
        self.path = file_of(directory, os.getpid())
        self.names = names          # gpu index -> process name (setproctitle of the scheduler)
        self.used = {}              # gpu index -> bytes
        self.neighbours = {}        # gpu index -> bytes of the load_contention neighbour
        self.unlisted = set()       # gpu indexes where nvidia-smi does not list it (load_contention_unlisted)
        self.lock = threading.Lock()
        self.write_lock = threading.Lock()   # a flush and the final removal never interleave
        self.dirty = threading.Event()
        self.stopped = False
        self.warned = False
        self.thread = threading.Thread(target=self._run, name="gpu-state", daemon=True)
        self.thread.start()

    def set(self, used: dict):
        """Replace the per-GPU bytes; written within 0.1 s."""
        with self.lock:
            self.used = dict(used)
        self.dirty.set()

    def set_neighbours(self, held: dict, unlisted=()):
        """The bytes the load_contention neighbour holds per GPU now ({}: it gave them back), not listed as a process
        on the GPUs ``unlisted``; written within 0.1 s."""
        with self.lock:
            self.neighbours = {index: size for index, size in held.items() if size > 0}
            self.unlisted = set(unlisted)
        self.dirty.set()

    def _run(self):
        while not self.stopped:
            self.dirty.wait()
            self.dirty.clear()
            self.flush()
            time.sleep(0.1)

    def flush(self):
        """Write the file now (atomically: a reader never sees half of it)."""
        with self.lock:
            gpus = {str(index): {"used_bytes": used, "process_name": self.names.get(index, "python3")}
                    for index, used in self.used.items()}
            neighbours = {}
            for index, size in self.neighbours.items():
                neighbours[str(index)] = {"used_bytes": size, "process_name": NEIGHBOUR_NAME, "pid": NEIGHBOUR_PID + index}
                if index in self.unlisted:
                    neighbours[str(index)]["unlisted"] = True
        data = {"pid": os.getpid(), "updated": time.time(), "gpus": gpus}
        if neighbours:
            data["neighbours"] = neighbours
        temporary = "%s.%d.tmp" % (self.path, os.getpid())
        with self.write_lock:
            if self.stopped:
                return
            try:
                os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
                with open(temporary, "w", encoding="utf-8") as handle:
                    # What the driver knows of the GPUs, every user's nvidia-smi reads (whatever the server's umask).
                    os.fchmod(handle.fileno(), 0o644)
                    json.dump(data, handle)
                os.replace(temporary, self.path)
            except OSError as exc:
                if not self.warned:
                    self.warned = True
                    print("sglang-sim: cannot write the GPU state file %s: %s" % (self.path, exc), flush=True)

    def clear(self):
        """Stop writing and remove the file (the GPUs are free again)."""
        with self.write_lock:
            self.stopped = True
            for path in (self.path, "%s.%d.tmp" % (self.path, os.getpid())):
                try:
                    os.unlink(path)
                except OSError:
                    pass
        self.dirty.set()

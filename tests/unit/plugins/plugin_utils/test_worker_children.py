# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""worker_children: the processes of a module call in progress, stopped once ansible-playbook is gone."""
from __future__ import annotations

import os
import subprocess
import sys

from ansible_collections.llmserve.sglang.plugins.plugin_utils.worker_children import children, stop_children


def _stat(proc, pid, comm, ppid):
    os.makedirs(proc / str(pid))
    (proc / str(pid) / "stat").write_text("%d (%s) S %d 1 1 0 -1\n" % (pid, comm, ppid))


def test_children_are_read_from_proc_whatever_their_names(tmp_path):
    _stat(tmp_path, 10, "ansible-playboo", 1)
    _stat(tmp_path, 11, "ssh", 10)
    _stat(tmp_path, 12, "a (odd) name) 10", 99)    # its parent is 99, whatever its name says
    _stat(tmp_path, 13, "python3", 10)
    os.makedirs(tmp_path / "self")
    (tmp_path / "14").mkdir()                       # gone meanwhile: no stat
    assert children(10, str(tmp_path)) == [11, 13]
    assert children(99, str(tmp_path)) == [12]
    assert children(11, str(tmp_path)) == []
    assert children(10, str(tmp_path / "absent")) == []


def test_stop_children_kills_the_call_in_progress():
    # A process of its own, with one child: what a worker with an ssh client of a module call in progress is.
    parent = subprocess.Popen([sys.executable, "-c", "import subprocess, sys; "
                               "child = subprocess.Popen(['sleep', '60']); print(child.pid, flush=True); "
                               "sys.exit(-child.wait())"], stdout=subprocess.PIPE, text=True)
    try:
        child = int(parent.stdout.readline())
        assert children(parent.pid) == [child]
        assert stop_children(parent.pid) == [child]
        assert parent.wait(10) == 9    # the call that waited on it returned at once: SIGKILL
        assert children(parent.pid) == []
    finally:
        parent.kill()
        parent.wait()

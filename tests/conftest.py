# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Plain `pytest` from a checkout: find the collection where `make venv` links it (ansible-test does its own)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

for _entry in (os.environ.get("ANSIBLE_COLLECTIONS_PATH") or "").split(os.pathsep) + [
        str(Path(__file__).resolve().parents[1] / ".venv" / "collections")]:
    if _entry and os.path.isdir(_entry) and _entry not in sys.path:
        sys.path.append(_entry)


def pytest_configure(config):
    # Python 3.12+ warns on every forkpty() in a process with threads: ansible-runner's pexpect forks ansible-playbook
    # (functional and simulated-host tests) from a pytest-xdist worker (execnet's threads), and the child execs at
    # once, holding none of their locks.
    config.addinivalue_line(
        "filterwarnings", r"ignore:This process \(pid=\d+\) is multi-threaded, use of forkpty\(\):DeprecationWarning")

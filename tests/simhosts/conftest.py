# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Every test here needs simulated hosts: where they cannot run (no root, no namespaces) a test is skipped, and with
CI=true in the environment it fails with the reason instead (a CI machine that cannot run them must not pass green).

Measured numbers of the simulated-host tests (restarts, wall time), printed at the end of the run.
`make simhosts` runs the files on three pytest-xdist workers (one file per worker at a time): the lines go to a file
beside the repository's .tmp that the controlling process prints."""
from __future__ import annotations

from pathlib import Path

import pytest

from simhost_lib import cannot_run_nspawn, in_ci

_FILE = Path(__file__).resolve().parents[2] / ".tmp" / "simhosts-measured.txt"

# Seconds each file takes (setup + calls + teardown: `make simhosts`' .tmp/simhosts-junit.xml on the 2-core machine,
# 2026-12-06 at a897c1b, issue 35, three workers, 67 min of test time in all). The files run longest first, so that
# the workers end together (`make simhosts` passes --no-loadscope-reorder, else pytest-xdist orders the files by
# their number of tests); a file not listed runs last.
FILE_SECONDS = {
    "test_rollout_on_simhost.py": 935, "test_multinode_on_simhost.py": 693, "test_tune_kv_on_simhost.py": 516,
    "test_tune_kv_faults_on_simhost.py": 500, "test_kv_watch_on_simhost.py": 379, "test_units_on_simhost.py": 373,
    "test_fleet_on_simhost.py": 250, "test_hybrid_on_simhost.py": 174, "test_site_on_simhost.py": 130,
    "test_simhosts.py": 36, "test_collection_on_simhost.py": 32,
}


def pytest_collection_modifyitems(items):
    """Longest file first; each file's tests keep their order (they build on each other's state)."""
    items.sort(key=lambda item: -FILE_SECONDS.get(item.path.name, 0))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Before any fixture (the hosts' `up` among them) of a test of this directory."""
    reason = cannot_run_nspawn()
    if reason is not None:
        if in_ci():
            pytest.fail(f"CI=true and simulated hosts cannot run here: {reason}", pytrace=False)
        pytest.skip(reason)


def _is_worker(config) -> bool:
    return hasattr(config, "workerinput")


def pytest_sessionstart(session):
    if not _is_worker(session.config):
        _FILE.parent.mkdir(parents=True, exist_ok=True)
        _FILE.write_text("")


@pytest.fixture
def measured():
    """Call it with a line: it appears under "measured on simulated hosts" at the end of the run."""
    def add(line: str) -> None:
        with _FILE.open("a") as handle:
            handle.write(line.replace("\n", " ") + "\n")
    return add


def pytest_terminal_summary(terminalreporter):
    lines = _FILE.read_text().splitlines() if _FILE.exists() else []
    if lines:
        terminalreporter.section("measured on simulated hosts")
        for line in lines:
            terminalreporter.write_line(line)

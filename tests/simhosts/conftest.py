# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Measured numbers of the simulated-host tests (restarts, wall time), printed at the end of the run."""
from __future__ import annotations

import pytest

_LINES: list[str] = []


@pytest.fixture
def measured():
    """Call it with a line: it appears under "measured on simulated hosts" at the end of the run."""
    return _LINES.append


def pytest_terminal_summary(terminalreporter):
    if _LINES:
        terminalreporter.section("measured on simulated hosts")
        for line in _LINES:
            terminalreporter.write_line(line)

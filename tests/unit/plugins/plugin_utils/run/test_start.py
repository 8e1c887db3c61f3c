# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""run/start.py: the search's limits, and a running server that must serve before it is tuned."""
from __future__ import annotations

import pytest

from ansible_collections.llmserve.sglang.plugins.plugin_utils.run.steps import RunFailed
from ansible_collections.llmserve.sglang.tests.unit.plugins.plugin_utils.run.scripted_run import (
    INFO, PIN, drive, settled_run)

TUNE = {"do": "tune", "why": "never tuned", "dry_run": False}


def test_a_value_that_missed_under_real_traffic_is_never_searched_again():
    run = settled_run()
    pin = dict(PIN, fingerprint_hash="H1", missed=0.93)
    _none, said = drive(run.start.limits(dict(INFO, pin=pin), dict(TUNE, why="SGLang upgraded"), None, None), [])
    assert run.state.missed == 0.93 and run.state.settings["cap"] == 0.925
    assert said == ["gpu1: 0.93 missed under real traffic on this fingerprint (the headroom watch): the search "
                    "stays at or below 0.925"]


def test_no_limit_without_a_miss():
    run = settled_run()
    _none, said = drive(run.start.limits(dict(INFO), TUNE, None, None), [])
    assert run.state.missed is None and run.state.settings["cap"] == 0.98 and said == []


def test_a_running_server_that_does_not_serve_is_not_tuned():
    run = settled_run()
    with pytest.raises(RunFailed, match=r"must serve its last-known-good value before it is tuned \(timeout: slow\)"):
        drive(run.start.tuner(dict(INFO), None, None, TUNE), [
            ("sglang_ready", {"ready": False, "reason": "timeout", "detail": "slow"})])

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""run/search.py: a trial's log judged (a pool off the formula by more than the first trusted start's), and the
fact entry a commit writes. The search itself: test_unit_run.py, and the action's scripted-host cases."""
from __future__ import annotations

from ansible_collections.llmserve.sglang.plugins.plugin_utils.run import search
from ansible_collections.llmserve.sglang.plugins.plugin_utils.run.context import UnitState
from ansible_collections.llmserve.sglang.tests.unit.plugins.plugin_utils.run.scripted_run import (
    INFO, PIN, drive, settled_run)


def test_the_first_trusted_start_is_the_pools_reference_and_a_later_one_off_it_is_untrusted(monkeypatch):
    monkeypatch.setattr(search, "pool_residual_gib", lambda inputs, boot: boot["residual"])
    state = UnitState(url="u", pool_inputs=("inputs",))
    assert search.judge_pool(state, {"residual": 0.4, "untrusted": ["moved"]}) == {"residual": 0.4,
                                                                                   "untrusted": ["moved"]}
    assert state.pool_reference is None   # an untrusted start is no reference
    assert search.judge_pool(state, {"residual": 0.4}) == {"residual": 0.4} and state.pool_reference == 0.4
    assert search.judge_pool(state, {"residual": 0.45}) == {"residual": 0.45}
    assert search.judge_pool(state, {"residual": 3.4})["untrusted"]
    assert search.judge_pool(UnitState(url="u"), {"residual": 9}) == {"residual": 9}   # nothing to judge by


def test_a_commit_keeps_what_missed_and_a_pin_that_changes_nothing_keeps_its_time():
    run = settled_run()
    run.state.missed = 0.93
    entry = {"mem_fraction_static": 0.92, "fingerprint_hash": "H1", "tokens": 131000, "time": "now"}
    found, said = drive(run.search._pin_entry(entry, dict(INFO, pin=PIN)), [])
    assert (found["missed"], found["time"], said) == (0.93, PIN["time"], [])

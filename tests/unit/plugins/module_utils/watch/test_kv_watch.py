# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""kv_watch: what the watch asks of the tuner (decision), the running pool, and what survives a re-pin."""
from __future__ import annotations

import pytest

from ansible_collections.llmserve.sglang.plugins.module_utils.watch import kv_watch
from ansible_collections.llmserve.sglang.plugins.module_utils.watch import settings as watch_settings
from ansible_collections.llmserve.sglang.plugins.module_utils.watch.verdict import verdict
from ansible_collections.llmserve.sglang.tests.unit.plugins.module_utils.watch.watch_standins import (
    PIN,
    _day,
    _window,
)


def test_a_near_miss_lowers_by_the_missing_memory_in_whole_steps():
    records = _day(2.0)
    records[5] = _window(records[5]["end"], least_full=2.0, least=0.25)
    result = verdict(PIN, records)
    # 0.75 GiB missing, 0.4 GiB a step: 2 steps, 0.9 -> 0.89.
    assert (result["evidence"]["lower_steps"], result["evidence"]["lower_to"]) == (2, 0.89)
    asked = kv_watch.decision(result, PIN)
    assert asked["lower_to"] == 0.89 and "lowering the pin 2 step(s) to 0.89" in asked["retune"]


def test_an_oom_lowers_two_steps_at_least_and_a_storm_alone_is_only_said():
    records = _day(5.0)
    records[3]["oom_lines"] = 1
    for record in records[4:]:     # the unit started again after it: systemd's word, not the server's
        record["invocations"] = ["b"]
    assert kv_watch.decision(verdict(PIN, records), PIN)["lower_to"] == 0.89
    records = _day(5.0)
    records[3]["retractions"] = 40
    asked = kv_watch.decision(verdict(PIN, records), PIN)
    assert asked["retune"] is None and "not lowered: a smaller pool would retract more" in asked["proposal"]


def test_headroom_is_a_proposal_unless_the_action_is_act():
    result = verdict(PIN, _day(3.5))
    assert kv_watch.decision(result, PIN)["retune"] is None
    assert "kv_tune_watch_action=act would search from the pin" in kv_watch.decision(result, PIN)["proposal"]
    assert kv_watch.decision(result, PIN, action="act")["retune"].startswith("headroom under real traffic")
    assert kv_watch.decision(verdict(PIN, _day(1.9)), PIN, action="act") == {"retune": None, "lower_to": None,
                                                                             "proposal": None}


def test_a_pool_smaller_than_the_verified_one_is_a_reason_whatever_the_traffic():
    pin = dict(PIN, tokens=200000)
    asked = kv_watch.decision(None, pin, pool_tokens=188000)
    assert asked["retune"] == ("the pool came back 6% smaller at the same value (188000 tokens, verified 200000): "
                               "something else holds memory")
    assert kv_watch.decision(None, pin, pool_tokens=197000)["retune"] is None      # within 2%


def test_the_running_pool_is_the_last_windows_of_the_same_start_and_recent():
    records = [dict(_window(1000.0), pool_tokens=1234, invocations=["a", "b"])]
    assert kv_watch.current_pool(records, "b", now=1100.0) == 1234
    assert kv_watch.current_pool(records, "c", now=1100.0) is None          # another start
    assert kv_watch.current_pool(records, "b", now=1000.0 + 4 * 3600) is None   # an old window
    assert kv_watch.current_pool([], "b", now=1.0) is None


def test_a_pool_tolerance_below_0_is_refused_not_a_retune_of_a_pin_that_holds():
    pin = dict(PIN, tokens=200000)
    with pytest.raises(watch_settings.WatchError, match=r"pool_tolerance must lie in \[0, 0.5\] of the verified pool \(got -0.5\)"):
        kv_watch.decision(None, pin, pool_tokens=200000, pool_tolerance=-0.5)
    assert kv_watch.decision(None, pin, pool_tokens=200000, pool_tolerance=0)["retune"] is None


def test_headroom_never_asks_to_go_back_to_a_value_that_missed_under_real_traffic():
    # issue 32, item 7b: after a near miss lowered 0.885 -> 0.840, 7 s of plain traffic took it straight back
    result = verdict(PIN, _day(3.5))
    lowered = dict(PIN, fingerprint_hash="H1", missed=0.905)
    asked = kv_watch.decision(result, lowered, action="act")
    assert asked["retune"] is None
    assert asked["proposal"].endswith("but 0.905 missed under real traffic on this fingerprint: the pin stays below it")
    # two steps below the miss, one step up is still below it: the search may go (the tuner caps it below the miss)
    assert kv_watch.decision(result, dict(lowered, missed=0.91), action="act")["retune"].startswith("headroom under real")
    assert kv_watch.missed_value(lowered, "H1") == 0.905
    assert kv_watch.missed_value(lowered, "H2") is None and kv_watch.missed_value(PIN, "H1") is None


def test_a_repin_keeps_the_evidence_only_where_it_changes_nothing_the_windows_describe():
    pin = {"mem_fraction_static": 0.9, "fingerprint_hash": "H1", "tokens": 100000, "time": "2026-12-01T00:00:00Z"}
    assert kv_watch.same_pin(pin, dict(pin, tokens=101000, time="later"))       # the same value, pool and fingerprint
    # a pool that came back smaller (memory held elsewhere: its windows are another picture), another value or
    # fingerprint, or no pin: the windows start again from the new pin
    for changes in ({"tokens": 90000}, {"mem_fraction_static": 0.905}, {"fingerprint_hash": "H2"}, {"tokens": None}):
        assert not kv_watch.same_pin(pin, dict(pin, **changes)), changes
    assert not kv_watch.same_pin(None, pin) and not kv_watch.same_pin(dict(pin, time=None), pin)

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""verdict: the windows since a pin against its margin: near miss, headroom, ok or not enough traffic."""
from __future__ import annotations

import pytest

from ansible_collections.llmserve.sglang.plugins.module_utils.watch import kv_watch, store
from ansible_collections.llmserve.sglang.plugins.module_utils.watch import settings as watch_settings
from ansible_collections.llmserve.sglang.plugins.module_utils.watch.verdict import pin_time, verdict
from ansible_collections.llmserve.sglang.tests.unit.plugins.module_utils.watch.watch_standins import (
    Host,
    PIN,
    _day,
    _watcher,
    _window,
)


def test_a_window_begun_before_the_pin_is_the_tuners_own_load_and_does_not_count():
    # The trial's stress load fills the pool at the value then pinned; a window that spans the commit holds it.
    straddling = dict(_window(PIN["time"] + 2, least_full=1.1), start=PIN["time"] - 1)
    result = verdict(PIN, [straddling])
    assert result["verdict"] == "not_enough_traffic" and result["evidence"]["windows"] == 0, result
    assert verdict(PIN, [straddling] + _day(3.5))["evidence"]["windows"] == 24


def test_memory_under_the_margin_is_a_near_miss_with_where_and_when():
    records = _day(2.0)
    records[5] = _window(records[5]["end"], least_full=2.0, least=0.62)
    result = verdict(PIN, records)
    assert result["verdict"] == "near_miss"
    assert "0.62 GiB on GPU 3" in result["reasons"][0] and "under the pin's margin of 1.00 GiB" in result["reasons"][0]


@pytest.mark.parametrize("extra, reason", [
    ({"oom_lines": 1}, "1 out-of-memory line(s)"),
    ({"retractions": 25}, "a retraction storm: 25 request(s)"),
    ({"retracted_logged": 30}, "a retraction storm: 30 request(s)"),
])
def test_an_oom_or_a_retraction_storm_is_a_near_miss_whatever_the_free_memory(extra, reason):
    records = _day(5.0)
    records[3].update(extra)
    result = verdict(PIN, records)
    assert result["verdict"] == "near_miss" and reason in result["reasons"][0]


def test_a_day_at_a_full_pool_with_spare_steps_is_headroom_and_proposes_a_value():
    result = verdict(PIN, _day(3.5))
    # one step is 0.005 x 80 GiB = 0.4 GiB; 2.5 GiB over the margin is 6 steps.
    assert result["verdict"] == "headroom"
    assert (result["evidence"]["spare_steps"], result["evidence"]["proposed_value"]) == (6, 0.93)
    assert "the pin could go up to 0.93" in result["reasons"][0]


def test_spare_memory_within_the_headroom_steps_is_ok():
    result = verdict(PIN, _day(1.9))
    assert result["verdict"] == "ok" and result["evidence"]["spare_steps"] == 2


def test_a_pool_that_was_never_full_long_enough_is_not_enough_traffic_not_a_proposal():
    result = verdict(PIN, _day(30.0, full_seconds=60.0))
    assert result["verdict"] == "not_enough_traffic"
    assert "for 0.40 h of the 24.00 h needed" in result["reasons"][0]
    short = verdict(PIN, [_window(5000.0, least_full=2.0, full_seconds=42.0)], headroom_hours=0.05)
    assert "for 42 s of the 180 s needed" in short["reasons"][0]
    assert verdict(PIN, [])["verdict"] == "not_enough_traffic"


def test_windows_before_the_pin_or_at_another_value_are_not_the_pins():
    records = [_window(900.0, least_full=0.1), _window(5000.0, least_full=0.1, value=0.93)] + _day(1.5)
    result = verdict(PIN, records)
    assert result["verdict"] == "ok" and result["evidence"]["windows"] == 24


def test_the_pins_time_is_the_tuners_utc_text():
    assert pin_time("2026-12-05T10:00:00Z") == 1796464800.0
    records = _day(1.9)
    assert verdict(dict(PIN, time="1970-01-01T00:16:40Z"), records)["evidence"]["windows"] == 24
    with pytest.raises(watch_settings.WatchError, match="the pin's time"):
        verdict(dict(PIN, time="yesterday"), records)


def test_a_pin_without_its_margin_is_an_error():
    with pytest.raises(watch_settings.WatchError, match="safety_gib"):
        verdict({"mem_fraction_static": 0.9, "time": 1.0, "settings": {}}, [])


def test_a_full_usage_that_is_not_a_band_is_refused():
    with pytest.raises(watch_settings.WatchError, match="full_usage must be one of the watch's bands 0.5, 0.6"):
        verdict(PIN, _day(1.9), full_usage=0.85)
    assert verdict(PIN, _day(1.9, full_seconds=3600.0), full_usage=0.95)["verdict"] == "ok"


def test_the_restarts_of_windows_that_kept_only_their_last_starts_are_counted():
    records = [_window(PIN["time"] + 3600, least_full=3.5, invocations=["a", "b"], invocation_count=40),
               _window(PIN["time"] + 7200, least_full=3.5, invocations=["b", "c"], invocation_count=2)]
    assert verdict(PIN, records)["evidence"]["restarts"] == 40      # a..b and 38 more, then c


def test_lines_left_out_are_counted_and_named_in_the_verdict():
    result = verdict(PIN, _day(3.5), unreadable=["line 14: longer than 16384 bytes", "line 20: not JSON (x)"])
    assert result["verdict"] == "headroom" and result["evidence"]["unreadable_lines"] == 2
    assert result["reasons"][-1] == ("2 line(s) of the watch's state file could not be read and are left out of this "
                                     "verdict (line 14: longer than 16384 bytes)")
    assert verdict(PIN, _day(3.5))["evidence"]["unreadable_lines"] == 0


def test_headroom_hours_0_is_refused_not_a_crash_of_the_probe():
    # A day at a full pool whose GPUs could not be read: no least free memory at a full pool.
    records = _day(None)
    with pytest.raises(watch_settings.WatchError) as error:
        verdict(PIN, records, headroom_hours=0)
    assert str(error.value) == ("headroom_hours must lie in [0.0005, 8760] hours (got 0): a verdict needs some time at "
                                "a full pool (a test host's 1.8 s at least), and a year at most.")


def test_a_full_pool_whose_memory_was_never_read_is_not_enough_traffic_not_a_crash():
    result = verdict(PIN, _day(None))
    assert result["verdict"] == "not_enough_traffic"
    assert result["reasons"] == ["the pool was at a token usage of 0.90 or more for 24.00 h, but no GPU's memory was "
                                 "read then: nothing to judge the headroom by"]


@pytest.mark.parametrize("where", ["same window", "next window"])
def test_an_oom_line_counts_only_with_the_units_restart_after_it(where):
    # issue 32, item 7: a prompt holding "CUDA out of memory", logged with --log-requests, lowered a pin two steps
    # (0.885 -> 0.875) with no memory ever short; the served process writes its own journal
    records = _day(5.0)
    records[3]["oom_lines"] = 2
    result = verdict(PIN, records)
    assert result["verdict"] == "near_miss" and result["evidence"]["claimed_only"]
    assert result["reasons"] == ["2 out-of-memory line(s) in the server's journal since the pin with no restart of "
                                 "the unit after them: claimed by the log only (the server can print anything), not "
                                 "acted on"]
    asked = kv_watch.decision(result, PIN)
    assert asked["retune"] is None and asked["lower_to"] is None
    assert asked["proposal"].startswith("a near miss claimed by the server's journal (2 out-of-memory line(s)")
    # the same lines with the unit's own restart after them: a near miss acted on
    if where == "same window":
        records[3]["invocations"] = ["a", "b"]
    else:
        records[4]["invocations"] = ["b"]
    result = verdict(PIN, records)
    assert result["evidence"]["oom_lines_after_restart"] == 2 and not result["evidence"].get("claimed_only")
    assert "each followed by a restart of the unit" in result["reasons"][0]
    assert kv_watch.decision(result, PIN)["lower_to"] == 0.89


def test_claimed_lines_beside_a_measured_shortfall_are_said_and_do_not_add_steps():
    records = _day(2.0)
    records[5] = _window(records[5]["end"], least_full=2.0, least=0.85, oom_lines=3)
    result = verdict(PIN, records)
    # 0.15 GiB missing: one step, not the two an OOM after which the unit restarted would take
    assert result["evidence"]["lower_steps"] == 1 and "claimed by the log only" in result["reasons"][-1]


def test_a_window_that_saw_a_trial_is_the_tuners_load_never_production(tmp_path):
    # issue 32, item 6: a later run's trial at the pin's value died under the tuner's load and was reverted (the
    # pin's time unchanged); the watch read that window as a near miss in real traffic and the next run lowered the
    # pin 0.885 -> 0.845
    host = Host()
    watcher = _watcher(tmp_path, host)
    host.free = 0.2                       # the tuner's load: under the margin
    host.trial = True                     # its drop-in loaded (systemd's DropInPaths)
    for now in range(0, 4):
        watcher.step(now)
    host.trial, host.free, host.invocation = False, 3.0, "c"   # reverted: the pin's start again, real traffic
    for now in range(4, 8):
        watcher.step(now)
    records, bad = store.read_records(str(tmp_path / "windows.jsonl"))
    assert not bad and [record["trial_samples"] for record in records] == [4, 0]
    pin = dict(PIN, time=0.0)
    result = verdict(pin, records, headroom_hours=0.0005)
    assert result["verdict"] != "near_miss" and result["evidence"]["trial_windows"] == 1, result
    assert result["evidence"]["windows"] == 1 and result["evidence"]["least_free_gib"] == 3.0
    # the same windows without the trial's mark: the near miss the issue saw
    unmarked = [dict(record, trial_samples=0) for record in records]
    assert verdict(pin, unmarked, headroom_hours=0.0005)["verdict"] == "near_miss"

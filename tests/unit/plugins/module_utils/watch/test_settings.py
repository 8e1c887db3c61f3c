# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""settings: the range of every setting of the watch, where it enters (the tuner's too), and where a server's watch
lives."""
from __future__ import annotations

import pytest

from ansible_collections.llmserve.sglang.plugins.module_utils.watch import settings as watch_settings
from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner import run_settings


@pytest.mark.parametrize("name, value, message", [
    ("headroom_hours", 0, "kv_tune_watch_headroom_hours must lie in [0.0005, 8760] hours (got 0)"),
    ("headroom_hours", 1e9, "kv_tune_watch_headroom_hours must lie in [0.0005, 8760] hours (got 1e+09)"),
    ("headroom_hours", float("nan"), "kv_tune_watch_headroom_hours must be finite"),
    ("headroom_hours", "lots", "kv_tune_watch_headroom_hours must be a number, got 'lots'"),
    ("headroom_steps", -1, "kv_tune_watch_headroom_steps must lie in [0, 100] grid steps (got -1)"),
    ("headroom_steps", 2.5, "kv_tune_watch_headroom_steps must be an integer"),
    ("storm_retractions", 0, "kv_tune_watch_storm_retractions must lie in [1, 1000000] requests (got 0)"),
    ("pool_tolerance", -0.5, "kv_tune_watch_pool_tolerance must lie in [0, 0.5] of the verified pool (got -0.5)"),
    ("pool_tolerance", 1, "kv_tune_watch_pool_tolerance must lie in [0, 0.5] of the verified pool (got 1)"),
    ("interval", 0.001, "kv_tune_watch_interval must lie in [1, 300] seconds (got 0.001)"),
    ("window", 1e9, "kv_tune_watch_window must lie in [1, 86400] seconds (got 1e+09)"),
    ("keep", 0, "kv_tune_watch_keep must lie in [1, 20160] windows (got 0)"),
    ("keep", True, "kv_tune_watch_keep must be a number, got True"),
    ("recent", -1, "kv_tune_watch_recent must lie in [0, 20160] windows (got -1)"),
    ("full_usage", 0.85, "kv_tune_watch_full_usage must be one of the watch's bands 0.5, 0.6, 0.7, 0.8, 0.9, 0.95"),
    ("action", "maybe", "kv_tune_watch_action must be one of propose, act (got 'maybe')"),
    ("headroom", 1, "kv_tune_watch_headroom is not a setting of the headroom watch"),
])
def test_every_setting_out_of_its_range_is_refused_with_its_name_and_range(name, value, message):
    with pytest.raises(watch_settings.WatchError) as error:
        watch_settings.check_settings({name: value}, prefix="kv_tune_watch_")
    assert message in str(error.value)


def test_a_window_shorter_than_the_interval_is_refused():
    with pytest.raises(watch_settings.WatchError, match=r"--window \(5\) must not be shorter than --interval \(10\)"):
        watch_settings.check_settings({"interval": 10, "window": 5, "keep": 10}, prefix="--")


@pytest.mark.parametrize("name", sorted(watch_settings.BOUNDS))
def test_each_bound_of_the_watch_itself_is_accepted(name):
    low, high = watch_settings.BOUNDS[name][:2]
    for value in (low, high, str(high)):
        assert watch_settings.check_settings({name: value})[name] == float(value)


def test_the_tuner_refuses_a_watch_setting_out_of_range_before_anything_runs():
    settings = {"unit": "sglang.service", "start": None, "cap": 0.98, "resolution": 0.005, "safety_gib": 1.0,
                "budget": 6, "min_tokens": None, "force": False, "ready_timeout": 1800, "ready_interval": 5,
                "stress_fill_ratio": 0.95, "stress_duration": 120, "confirm_timeout": 2640}
    watch = {"action": "propose", "full_usage": 0.9, "headroom_hours": 24, "headroom_steps": 2,
             "storm_retractions": 20, "pool_tolerance": 0.02}
    assert run_settings.check_settings(dict(settings, watch=watch))["watch"]["headroom_hours"] == 24.0
    with pytest.raises(run_settings.TuneError) as error:
        run_settings.check_settings(dict(settings, watch=dict(watch, pool_tolerance=-0.5)))
    assert str(error.value).startswith("Invalid input for llmserve.sglang.kv_tune: kv_tune_watch_pool_tolerance must "
                                       "lie in [0, 0.5] of the verified pool (got -0.5)")
    with pytest.raises(run_settings.TuneError, match="kv_tune_watch_headroom_hours must lie in"):
        run_settings.check_settings(dict(settings, watch=dict(watch, headroom_hours="0")))
    with pytest.raises(run_settings.TuneError, match="the headroom watch's settings must be a dictionary"):
        run_settings.check_settings(dict(settings, watch="yes"))


def test_the_watch_unit_and_state_file_of_a_server():
    assert watch_settings.watch_unit("sglang@a.service") == "llmserve-kv-watch-sglang-a.service"
    assert watch_settings.state_path("sglang.service") == "/var/lib/llmserve-kv-watch-sglang/windows.jsonl"
    with pytest.raises(watch_settings.WatchError):
        watch_settings.watch_unit("../etc.service/x")

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""tuner/run_settings.py: the tuner's settings, checked before anything runs."""
from __future__ import annotations

import pytest

from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner import run_settings
from ansible_collections.llmserve.sglang.tests.unit.plugins.plugin_utils.tuner.tuner_standins import DEFAULT_SETTINGS


@pytest.mark.parametrize("changes, message", [
    ({"start": 1.2}, "kv_tune_start must lie strictly between 0 and 1 (got 1.2)"),
    ({"start": 0.0}, "kv_tune_start must lie strictly between 0 and 1"),
    ({"start": 0.9, "cap": 0.85}, "kv_tune_cap (0.85) is below kv_tune_start (0.9): there is nothing to search."),
    ({"start": 0.8825}, "is not on the kv_tune_resolution grid"),
    ({"resolution": 0.2}, "kv_tune_resolution must be a decimal step"),
    ({"resolution": 1 / 3.0}, "kv_tune_resolution must be a decimal step"),
    ({"unit": "sglang; rm -rf /"}, "kv_tune_unit must be a systemd service name"),
    ({"budget": 0}, "kv_tune_budget must lie in [1, 30] trials (got 0)"),
    ({"budget": 31}, "kv_tune_budget must lie in [1, 30] trials (got 31)"),
    ({"safety_gib": -1}, "kv_tune_safety_gib must lie in [0, 64] GiB (got -1)"),
    ({"safety_gib": 65}, "kv_tune_safety_gib must lie in [0, 64] GiB (got 65)"),
    ({"min_tokens": 0}, "kv_tune_min_tokens must be a positive token count"),
    ({"confirm_timeout": 100}, "kv_tune_confirm_timeout (100) must be longer than a trial"),
    ({"confirm_timeout": 1e14}, "kv_tune_confirm_timeout must lie in [3, 86400] seconds (got 1e+14)"),
    ({"stress_duration": 1e12}, "kv_tune_stress_duration must lie in [1, 3600] seconds (got 1e+12)"),
    ({"stress_duration": 0.5}, "kv_tune_stress_duration must lie in [1, 3600] seconds"),
    ({"ready_timeout": 1e9}, "kv_tune_ready_timeout must lie in [1, 21600] seconds"),
    ({"ready_timeout": 0}, "kv_tune_ready_timeout must lie in [1, 21600] seconds"),
    ({"ready_interval": 1e-9}, "kv_tune_ready_interval must lie in [0.1, 60] seconds (got 1e-09)"),
    ({"ready_interval": 61}, "kv_tune_ready_interval must lie in [0.1, 60] seconds"),
    ({"ready_interval": 10, "ready_timeout": 5}, "kv_tune_ready_interval (10) must not exceed kv_tune_ready_timeout"),
    ({"stress_fill_ratio": 1.5}, "kv_tune_stress_fill_ratio must lie in [0.5, 1] of the pool (got 1.5)"),
    ({"stress_fill_ratio": 0.001}, "kv_tune_stress_fill_ratio must lie in [0.5, 1] of the pool (got 0.001)"),
    ({"stress_duration": float("nan")}, "kv_tune_stress_duration must be"),
    ({"confirm_timeout": float("inf")}, "kv_tune_confirm_timeout must be"),
    ({"cap": "lots"}, "kv_tune_cap must be a number"),
])
def test_bad_settings(changes, message):
    with pytest.raises(run_settings.TuneError) as error:
        run_settings.check_settings(dict(DEFAULT_SETTINGS, **changes))
    assert message in str(error.value)
    assert str(error.value).startswith("Invalid input for llmserve.sglang.kv_tune: ")


@pytest.mark.parametrize("name", sorted(run_settings.BOUNDS))
def test_each_bound_itself_is_accepted(name):
    """The ends of each range are valid settings (the others at their defaults, the confirm timeout long enough)."""
    low, high = run_settings.BOUNDS[name][:2]
    for value in (low, high):
        changes = {name: value, "confirm_timeout": 86400}
        if name == "confirm_timeout":
            changes = {name: value, "ready_timeout": 1, "stress_duration": 1, "ready_interval": 0.1}
        if name == "ready_timeout":
            changes["ready_interval"] = min(value, 5)
        assert run_settings.check_settings(dict(DEFAULT_SETTINGS, **changes))[name] == value


@pytest.mark.parametrize("args", [dict(ready_timeout=float("inf"), stress_duration=120),
                                  dict(ready_timeout=1800, stress_duration=float("nan"))])
def test_no_default_confirm_timeout_from_a_value_that_is_not_finite(args):
    assert run_settings.with_defaults(dict(args, confirm_timeout=None))["confirm_timeout"] is None


def test_settings_from_text():
    settings = run_settings.check_settings(dict(DEFAULT_SETTINGS, start="0.9", budget="4", resolution="0.0005"))
    assert (settings["start"], settings["budget"], settings["resolution"]) == (0.9, 4, 0.0005)


@pytest.mark.parametrize("changes, message", [
    ({"strategy": "per_rack"}, "kv_tune_strategy must be one of per_host, per_class"),
    ({"class_margin_steps": -1}, "kv_tune_class_margin_steps must be a whole number of grid steps"),
])
def test_bad_class_settings(changes, message):
    with pytest.raises(run_settings.TuneError, match=message):
        run_settings.check_settings(dict(DEFAULT_SETTINGS, **changes))

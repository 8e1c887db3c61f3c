# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""tuner/trials.py: a trial judged by the phase in which it ended, and read back."""
from __future__ import annotations

import pytest

from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner import trials


@pytest.mark.parametrize("ready, stress, failure, outcome", [
    ({"ready": True}, {"held": True}, None, "stable"),
    ({"ready": True}, {"held": False}, {"kind": "runtime_oom"}, "runtime_oom"),
    ({"ready": True}, {"held": False}, {"kind": "capture_oom"}, "runtime_oom"),
    ({"ready": True}, {"held": False}, None, "crash"),
    ({"ready": True}, {"held": False, "also": {"http://b": {"held": False}}}, None, "runtime_oom"),
    ({"ready": True}, {"held": False, "also": {"http://b": {"held": True}}}, None, "crash"),
    ({"ready": True}, None, None, "crash"),
    ({"ready": False, "reason": "unit_failed"}, None, {"kind": "init_oom"}, "init_oom"),
    ({"ready": False, "reason": "unit_failed"}, None, {"kind": "runtime_oom"}, "startup_oom"),
    ({"ready": False, "reason": "unit_failed"}, None, {"kind": "capture_oom"}, "startup_oom"),
    ({"ready": False, "reason": "unit_failed"}, None, {"kind": "weights_oom"}, "fatal"),
    ({"ready": False, "reason": "unit_failed"}, None, {"kind": "unbalanced_memory"}, "fatal"),
    ({"ready": False, "reason": "unit_failed"}, None, {"kind": "crash"}, "fatal"),
    ({"ready": True}, {"held": False}, {"kind": "nccl_error"}, "fatal"),
    ({"ready": False, "reason": "timeout"}, None, None, "timeout"),
    ({"ready": False, "reason": "unit_restarted"}, None, None, "crash"),
])
def test_classify_trial_by_phase(ready, stress, failure, outcome):
    assert trials.classify_trial(ready, stress, {"failure": failure})[0] == outcome


@pytest.mark.parametrize("free, outcome", [(0.3, "crash"), (4.0, "crash"), (31.0, "fatal"), (None, "crash")])
def test_a_crash_under_load_with_memory_to_spare_is_not_about_memory(free, outcome):
    stress = {"held": False, "failure_reason": "the server stopped answering", "min_free_gib": free}
    assert trials.classify_trial({"ready": True}, stress, {}, not_memory_gib=8.0)[0] == outcome


@pytest.mark.parametrize("text, argv, log, error", [
    ("0.9125", 0.9125, 0.9125, None),
    ("0.9125", None, 0.9125, None),
    ("0.9125", 0.912, 0.9125, "its command line says 0.912"),
    ("0.9125", 0.9125, 0.91, "its startup log says 0.91"),
    ("0.910", 0.91, None, None),
])
def test_readback(text, argv, log, error):
    found = trials.readback_error(text, argv, log)
    assert (found is None) == (error is None)
    if error:
        assert error in found


def test_growth_and_deficit_from_the_boot():
    assert trials.growth({"kv_size_gib": 10.0, "draft_kv_size_gib": 2.5}) == 1.25
    assert trials.growth({"kv_size_gib": 10.0}) == 1.0
    assert trials.growth({}) is None
    assert trials.oom_deficit_gib({"failure": {"oom": {"tried_gib": 2.0, "free_gib": 0.5}}}) == 1.5
    assert trials.oom_deficit_gib({"failure": {"oom": {"tried_gib": 0.5, "free_gib": 2.0}}}) == 0.0
    assert trials.oom_deficit_gib({"failure": {"kind": "crash"}}) is None

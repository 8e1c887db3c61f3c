# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""run/special.py: the runs that end without a search: kv_tune_reset and a re-pin."""
from __future__ import annotations

import pytest

from ansible_collections.llmserve.sglang.plugins.plugin_utils.run.steps import RunFailed
from ansible_collections.llmserve.sglang.tests.unit.plugins.plugin_utils.run.scripted_run import (
    INFO, PIN, drive, settled_run)


def special(check_mode=False):
    return settled_run(check_mode=check_mode, reset=True).special


def test_a_reset_in_check_mode_says_what_it_would_forget():
    result, said = drive(special(check_mode=True).reset(dict(INFO, pin=PIN)), [])
    assert (result["status"], result["changed"]) == ("would_reset", True)
    assert said == ["gpu1: sglang.service would lose its pin (0.92); check mode restarts nothing."]


def test_a_reset_that_does_not_serve_fails_loudly():
    with pytest.raises(RunFailed, match="IT DOES NOT SERVE: timeout: no answer"):
        drive(special().reset(dict(INFO, pin=PIN)), [
            ("kv_trial locked", {}), ("kv_trial reset", {"invocation_id": "I1"}),
            ("sglang_ready", {"ready": False, "reason": "timeout", "detail": "no answer"}),
            ("kv_fingerprint", {"mem_fraction_static": None})])


def test_a_pin_whose_cap_goes_is_rewritten_without_a_restart():
    pin = dict(PIN, max_total_tokens=131000)
    result, said = drive(special().repin(dict(INFO, pin=pin), {"change": "uncap", "why": "off"}), [
        ("kv_trial locked", {}), ("kv_trial committed 0.920", {"changed": True})])
    assert "max_total_tokens" not in result["pin"] and result["status"] == "unchanged"
    assert said == ["gpu1: sglang.service keeps 0.920; its pin no longer caps the pool, from the next start "
                    "(kv_tune_pin_tokens is off; no restart)."]

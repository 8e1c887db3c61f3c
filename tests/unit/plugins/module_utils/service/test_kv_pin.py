# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""kv_pin: where a unit's value lives, the drop-ins' text, the fact file, the run's lock and revert timers."""
from __future__ import annotations

import json

import pytest

from ansible_collections.llmserve.sglang.plugins.module_utils.service import kv_pin


def test_paths_and_timer_names_per_run():
    paths = kv_pin.paths("sglang@a.service", "1f2e3d4c")
    assert paths["pin"] == "/etc/systemd/system/sglang@a.service.d/50-kv-tune.conf"
    assert paths["trial"] == "/run/systemd/system/sglang@a.service.d/90-kv-trial.conf"
    assert paths["lock"] == "/run/llmserve/kv-tune-sglang@a.service.lock"
    assert paths["revert_unit"] == "llmserve-kv-revert-1f2e3d4c-sglang-a"
    assert kv_pin.paths("sglang.service")["revert_unit"] == "llmserve-kv-revert-sglang"


@pytest.mark.parametrize("name, unit, mine", [
    ("llmserve-kv-revert-1f2e3d4c-sglang.timer", "sglang.service", True),
    ("llmserve-kv-revert-sglang.timer", "sglang.service", True),
    ("llmserve-kv-revert-1f2e3d4c-sglang-a.timer", "sglang.service", False),
    ("llmserve-kv-revert-1f2e3d4c-sglang-a.timer", "sglang@a.service", True),
    ("llmserve-kv-revert-sglang-a.timer", "sglang.service", False),
    ("llmserve-kv-revert-1f2e3d4c-sglang.service", "sglang.service", False),
    ("other.timer", "sglang.service", False),
])
def test_is_revert_timer(name, unit, mine):
    assert kv_pin.is_revert_timer(name, unit) == mine


def test_lock_life():
    text = kv_pin.lock_text("1f2e3d4c", "ops1 pid 7", 1000, 600)
    assert json.loads(text) == {"run_id": "1f2e3d4c", "controller": "ops1 pid 7", "renewed": 1000, "expires": 1600}
    assert kv_pin.lock_holder(text, 1500)[0] == "held"
    assert kv_pin.lock_holder(text, 1500, "1f2e3d4c")[0] == "ours"
    assert kv_pin.lock_holder(text, 1700)[0] == "free"      # its run stopped renewing it: lapsed
    assert kv_pin.lock_holder(None, 0) == ("free", None)
    assert kv_pin.lock_holder("garbage", 0) == ("free", None)
    message = kv_pin.lock_message("sglang.service", json.loads(text), "/run/llmserve/x.lock")
    assert "is held by run 1f2e3d4c from ops1 pid 7" in message and "1970-01-01T00:26:40" in message


@pytest.mark.parametrize("run_id", ["1F2E3D4C", "1f2e3d4", "../x", None, 12345678])
def test_bad_run_ids(run_id):
    with pytest.raises(kv_pin.PinError, match="run_id"):
        kv_pin.check_run_id(run_id)


@pytest.mark.parametrize("entry, problem", [
    ({"mem_fraction_static": 0.91, "fingerprint_hash": "a" * 64}, None),
    ({"mem_fraction_static": "0.91", "fingerprint_hash": "a" * 64}, "mem_fraction_static '0.91'"),
    ({"mem_fraction_static": 1.5, "fingerprint_hash": "a" * 64}, "mem_fraction_static 1.5"),
    ({"mem_fraction_static": 0.91}, "fingerprint_hash None"),
    (["0.91"], "its entry is a list"),
    ({"mem_fraction_static": 0.91, "fingerprint_hash": "a" * 64, "max_total_tokens": 202389}, None),
    ({"mem_fraction_static": 0.91, "fingerprint_hash": "a" * 64, "max_total_tokens": None}, None),
    ({"mem_fraction_static": 0.91, "fingerprint_hash": "a" * 64, "max_total_tokens": "202389"},
     "max_total_tokens '202389'"),
    ({"mem_fraction_static": 0.91, "fingerprint_hash": "a" * 64, "max_total_tokens": True}, "max_total_tokens True"),
])
def test_check_entry(entry, problem):
    found = kv_pin.check_entry(entry)
    assert (found is None) == (problem is None) and (problem is None or problem in found), found


def test_facts_text_sets_and_removes_one_unit():
    text = kv_pin.facts_text(None, "sglang.service", {"mem_fraction_static": 0.91})
    text = kv_pin.facts_text(text, "sglang@b.service", {"mem_fraction_static": 0.9})
    assert set(json.loads(text)) == {"sglang.service", "sglang@b.service"}
    assert set(json.loads(kv_pin.facts_text(text, "sglang.service", None))) == {"sglang@b.service"}
    with pytest.raises(kv_pin.PinError, match="is not JSON"):
        kv_pin.facts_text("{", "sglang.service", {})


@pytest.mark.parametrize("text", ["0.910", "0.9125", ".5", "0.88"])
def test_dropin_values(text):
    assert 'Environment="LLMSERVE_KV_ARGS=--mem-fraction-static %s"' % text in kv_pin.dropin_text(
        "sglang.service", text, trial=False)


@pytest.mark.parametrize("text", ["0.910", "0.9125", ".5"])
def test_the_value_a_drop_in_sets_reads_back(text):
    assert kv_pin.dropin_value(kv_pin.dropin_text("sglang.service", text, trial=True, run_id="1f2e3d4c")) == float(text)
    assert kv_pin.dropin_value(kv_pin.dropin_text("sglang.service", text, False, max_total_tokens=9)) == float(text)


@pytest.mark.parametrize("text", [None, "", "[Service]\n", 'Environment="LLMSERVE_KV_ARGS=--max-total-tokens 9"\n',
                                  '# Environment="LLMSERVE_KV_ARGS=--mem-fraction-static 0.9"\n'])
def test_a_drop_in_without_the_line_has_no_value(text):
    assert kv_pin.dropin_value(text) is None


@pytest.mark.parametrize("text", ["1.0", "0", "0.9\"\nExecStartPre=/bin/sh", "1e-5", "0.9 --tp 1"])
def test_dropin_refuses_anything_but_a_plain_fraction(text):
    with pytest.raises(kv_pin.PinError):
        kv_pin.dropin_text("sglang.service", text, trial=True)


def test_a_pin_with_a_cap_sets_both_flags_and_a_trial_never_caps():
    text = kv_pin.dropin_text("sglang.service", "0.910", trial=False, max_total_tokens=202389)
    assert 'Environment="LLMSERVE_KV_ARGS=--mem-fraction-static 0.910 --max-total-tokens 202389"' in text
    assert "capped at the one that load verified" in text
    with pytest.raises(kv_pin.PinError, match="takes no max_total_tokens"):
        kv_pin.dropin_text("sglang.service", "0.910", trial=True, max_total_tokens=202389)
    for cap in (0, -5, 1.5, "202389", True):
        with pytest.raises(kv_pin.PinError, match="positive whole number"):
            kv_pin.dropin_text("sglang.service", "0.910", trial=False, max_total_tokens=cap)


ENTRY = {"mem_fraction_static": 0.91, "fingerprint_hash": "a" * 64, "max_total_tokens": 202389}
BASE = ["/opt/sglang/venv/bin/python", "-m", "sglang.launch_server", "--model-path", "/models/m"]


@pytest.mark.parametrize("argv, entry, stripped, cap", [
    # the pin's words at the end, and the pin records that cap: the tuner's output, taken out
    (BASE + ["--mem-fraction-static", "0.910", "--max-total-tokens", "202389"], ENTRY,
     BASE + ["--mem-fraction-static", "0.910"], 202389),
    # a start from before the cap was pinned (the trial the pin was committed on)
    (BASE + ["--mem-fraction-static", "0.910"], ENTRY, BASE + ["--mem-fraction-static", "0.910"], None),
    # the operator's own cap, with no pinned cap: it stays (it sizes what a trial measures)
    (BASE + ["--max-total-tokens", "100000", "--mem-fraction-static", "0.910"], dict(ENTRY, max_total_tokens=None),
     BASE + ["--max-total-tokens", "100000", "--mem-fraction-static", "0.910"], None),
    # the operator's own cap before the pin's: only the pin's goes
    (BASE + ["--max-total-tokens", "300000", "--mem-fraction-static", "0.910", "--max-total-tokens", "202389"],
     ENTRY, BASE + ["--max-total-tokens", "300000", "--mem-fraction-static", "0.910"], 202389),
    # a cap the pin did not write (a hand edit of the drop-in): the server's input, so the fingerprint moves
    (BASE + ["--mem-fraction-static", "0.910", "--max-total-tokens", "150000"], ENTRY,
     BASE + ["--mem-fraction-static", "0.910", "--max-total-tokens", "150000"], None),
    # an operator's command line that happens to end the same way, with no pin or a pin without a cap
    (BASE + ["--mem-fraction-static", "0.910", "--max-total-tokens", "202389"], None,
     BASE + ["--mem-fraction-static", "0.910", "--max-total-tokens", "202389"], None),
    (BASE + ["--mem-fraction-static", "0.910", "--max-total-tokens", "202389"], {"max_total_tokens": 202389},
     BASE + ["--mem-fraction-static", "0.910", "--max-total-tokens", "202389"], None),
    # the unit's API key after the pin's words (the sglang_service unit appends it): still the pin's cap (issue 32,
    # item 10: the cap was left in, the fingerprint moved and a pin that holds was re-tuned)
    (BASE + ["--mem-fraction-static", "0.910", "--max-total-tokens", "202389", "--api-key", "k3y"], ENTRY,
     BASE + ["--mem-fraction-static", "0.910", "--api-key", "k3y"], 202389),
    # anything else after the pin's words is not the unit's tail: the cap stays an input
    (BASE + ["--mem-fraction-static", "0.910", "--max-total-tokens", "202389", "--api-key"], ENTRY,
     BASE + ["--mem-fraction-static", "0.910", "--max-total-tokens", "202389", "--api-key"], None),
    (BASE + ["--mem-fraction-static", "0.910", "--max-total-tokens", "202389", "--tp", "8"], ENTRY,
     BASE + ["--mem-fraction-static", "0.910", "--max-total-tokens", "202389", "--tp", "8"], None),
])
def test_tuner_cap_takes_out_only_the_pins_own_cap(argv, entry, stripped, cap):
    assert kv_pin.tuner_cap(argv, entry) == (stripped, cap)


@pytest.mark.parametrize("tokens, split, class_tokens, cap, why", [
    (202389, False, None, 202389, None),
    (202389, False, 200000, 200000, None),    # a member with more memory than its canary: the class's pool
    (190000, False, 200000, 190000, None),    # one with less: its own, never more than verified on it
    (202389, True, None, None, "applies --max-total-tokens to a hybrid model's pool before it splits it"),
    (202389, None, None, None, "neither the model's config.json nor a startup log tells"),
    (None, False, None, None, "the verified pool's size is unknown"),
])
def test_pool_cap(tokens, split, class_tokens, cap, why):
    found, why_not = kv_pin.pool_cap(tokens, split, class_tokens)
    assert found == cap and (why_not is None) == (why is None) and (why is None or why in why_not), why_not


@pytest.mark.parametrize("entry, pin_tokens, change", [
    ({"mem_fraction_static": 0.91}, True, "cap"),
    ({"mem_fraction_static": 0.91}, False, None),
    ({"mem_fraction_static": 0.91, "max_total_tokens": 202389}, True, None),
    ({"mem_fraction_static": 0.91, "max_total_tokens": 202389}, False, "uncap"),
    ({"mem_fraction_static": 0.91, "max_total_tokens": None}, True, None),    # decided: a hybrid model's
    ({"mem_fraction_static": 0.91, "max_total_tokens": None}, False, None),
    (None, True, None),
])
def test_cap_change(entry, pin_tokens, change):
    assert kv_pin.cap_change(entry, pin_tokens) == change

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""plugin_utils/fleet/upgrade_value.py: the value the upgrade's own restart starts a server on."""
from __future__ import annotations

import pytest

from ansible_collections.llmserve.sglang.plugins.plugin_utils.fleet.upgrade_value import upgrade_trials, upgrade_value

# The field case on 0.5.9 (the simulator's Kimi-K2.5 with its EAGLE3 draft on 8x RTX PRO 6000, as its startup log
# says): P 94.04 GiB; the draft's weights (1.55 GiB) and KV (0.76 GiB) come after the target's pool; the pin 0.910
# kept 1.29 GiB under the load with a 1 GiB margin.
PIN = {"mem_fraction_static": 0.91, "text": "0.910", "tokens": 202389, "fingerprint_hash": "a" * 64,
       "settings": {"cap": 0.98, "resolution": 0.005, "safety_gib": 1.0},
       "trials": [{"n": 1, "f": 0.88, "outcome": "stable", "min_free_gib": 4.1},
                  {"n": 2, "f": 0.91, "outcome": "stable", "min_free_gib": 1.29}]}
BOOT = {"pre_load_free_gib": 94.04, "post_load_free_gib": 21.71, "draft_weights_gib": 1.55, "draft_kv_size_gib": 0.76,
        "untrusted": [], "server_args": {"mem_fraction_static": 0.91, "speculative_algorithm": "EAGLE3"}}


def test_a_release_that_counts_the_draft_in_the_fraction_starts_higher_by_what_moved_and_the_pins_spare():
    decided = upgrade_value(PIN, BOOT, "0.5.9", "0.5.17")
    # 0.910 + (1.55 + 0.76 + 0.29) / 94.04 = 0.9376, down to the grid (the simulator's oracle: 0.935 on 0.5.17)
    assert decided["value"] == "0.935"
    assert "counts the EAGLE3 draft's weights and KV (2.31 GiB)" in decided["why"]
    assert decided["why"].endswith("0.910 -> 0.935")


@pytest.mark.parametrize("old,new", [("0.5.9", "0.5.10"), ("0.5.14", "0.5.23"), ("0.5.17", "0.5.9"),
                                     ("0.5.5.post3", "0.5.9")])
def test_a_release_that_sizes_memory_alike_starts_on_the_pin(old, new):
    decided = upgrade_value(PIN, BOOT, old, new)
    assert decided["value"] is None and "measured in place" in decided["why"]


@pytest.mark.parametrize("boot,why", [
    (dict(BOOT, server_args={"mem_fraction_static": 0.91}, draft_weights_gib=None), "no EAGLE-family draft"),
    (dict(BOOT, server_args={"mem_fraction_static": 0.91, "speculative_algorithm": "NGRAM"}), "no EAGLE-family draft"),
    (dict(BOOT, server_args={"mem_fraction_static": 0.88, "speculative_algorithm": "EAGLE3"}), "does not give"),
    (dict(BOOT, untrusted=["rank 3 moved 2 GiB while the weights loaded"]), "does not give"),
    (dict(BOOT, pre_load_free_gib=None), "does not give"),
    (None, "no EAGLE-family draft"),
])
def test_without_the_running_starts_numbers_for_the_pin_the_pin_is_started(boot, why):
    decided = upgrade_value(PIN, boot, "0.5.9", "0.5.17")
    assert decided["value"] is None and why in decided["why"]


def test_without_the_pins_own_measurement_only_what_moved_counts():
    pin = dict(PIN, trials=[{"n": 1, "f": 0.88, "outcome": "stable", "min_free_gib": 4.1}])
    # 0.910 + 2.31 / 94.04 = 0.9346: 0.930
    assert upgrade_value(pin, BOOT, "0.5.9", "0.5.17")["value"] == "0.930"


def test_the_prediction_stays_at_or_below_the_cap():
    pin = dict(PIN, settings=dict(PIN["settings"], cap=0.92))
    assert upgrade_value(pin, BOOT, "0.5.9", "0.5.17")["value"] == "0.920"
    pin = dict(PIN, settings=dict(PIN["settings"], cap=0.91))
    assert upgrade_value(pin, BOOT, "0.5.9", "0.5.17") == {"value": None, "why": "the prediction does not move the pin"}


def test_this_runs_cap_and_grid_win_over_the_pins():
    """A rollout run with -e kv_tune_cap below the pin's: its re-tune would refuse a value above that cap (and the
    host would be rolled back), so the prediction stays below it; settings it does not give are the pin's."""
    assert upgrade_value(PIN, BOOT, "0.5.9", "0.5.17", {"cap": 0.92, "resolution": None})["value"] == "0.920"
    assert upgrade_value(PIN, BOOT, "0.5.9", "0.5.17", {"resolution": 0.01})["value"] == "0.93"
    # a larger safety margin than the pin's leaves none of its spare headroom: 0.910 + 2.31 / 94.04
    assert upgrade_value(PIN, BOOT, "0.5.9", "0.5.17", {"safety_gib": 2.0})["value"] == "0.930"
    before, on_disk = [fingerprint("sglang.service", "0.5.9")], [fingerprint("sglang.service", "0.5.17")]
    boots = [dict(BOOT, item="sglang.service")]
    assert upgrade_trials(before, on_disk, boots, run={"cap": 0.92})[0]["value"] == "0.920"
    member = plan(("sglang.service", "member", 0.95))
    assert upgrade_trials(before, on_disk, [], True, member, run={"cap": 0.93})[0]["value"] == "0.930"


@pytest.mark.parametrize("pin,old,why", [(None, "0.5.9", "no pin"), ({"mem_fraction_static": 1.5}, "0.5.9", "no pin"),
                                         (PIN, "nightly", "cannot be compared")])
def test_bad_inputs_start_the_pin(pin, old, why):
    decided = upgrade_value(pin, BOOT, old, "0.5.17")
    assert decided["value"] is None and why in decided["why"]


def fingerprint(unit, version, running=True, nnodes=None):
    return {"item": unit, "running": running, "sglang_version": version, "pin": PIN,
            "server_args": {} if nnodes is None else {"nnodes": nnodes}}


def test_the_units_of_a_host_each_get_their_own_value():
    before = [fingerprint("sglang@a.service", "0.5.9"), fingerprint("sglang@b.service", "0.5.9"),
              fingerprint("sglang@c.service", "0.5.9", running=False)]
    on_disk = [fingerprint(unit, "0.5.17") for unit in ("sglang@a.service", "sglang@b.service", "sglang@c.service")]
    boots = [dict(BOOT, item="sglang@a.service"),
             dict(BOOT, item="sglang@b.service", server_args={"mem_fraction_static": 0.91})]
    trials = upgrade_trials(before, on_disk, boots)
    # b has no draft; c is not running (the tuner settles it first)
    assert [(t["unit"], t["value"]) for t in trials] == [("sglang@a.service", "0.935")]


def test_no_prediction_for_a_server_that_spans_hosts():
    before = [fingerprint("sglang.service", "0.5.9", nnodes=2)]
    boots = [dict(BOOT, item="sglang.service")]
    assert upgrade_trials(before, [fingerprint("sglang.service", "0.5.17")], boots) == []
    member = {"units": {"sglang.service": {"role": "member", "value": 0.86, "why": "h1 holds the class's pin 0.86"}}}
    assert upgrade_trials(before, [fingerprint("sglang.service", "0.5.17")], boots, True, member) == []


def plan(*entries):
    """rollout_class_plan's answer for the host's units: (unit, role, value)."""
    return {"units": {unit: {"role": role, "value": value, "class": "C1",
                             "why": "h1 holds the class's pin %s" % value if value else "searches"}
                      for unit, role, value in entries}}


def test_per_class_a_member_whose_class_an_earlier_batch_verified_starts_that_value():
    units = ("sglang@a.service", "sglang@b.service", "sglang@c.service")
    before = [fingerprint(unit, "0.5.9") for unit in units]
    on_disk = [fingerprint(unit, "0.5.10") for unit in units]
    classes = plan(("sglang@a.service", "member", 0.86), ("sglang@b.service", "canary", None),
                   ("sglang@c.service", "member", None))   # c: its canary is b, on this host, not run yet
    trials = upgrade_trials(before, on_disk, [], per_class=True, class_plan=classes)
    assert trials == [{"unit": "sglang@a.service", "value": "0.860",
                       "why": "its class's value on the new release (h1 holds the class's pin 0.86)"}]
    # kv_tune_class_margin_steps below it, as the member's re-tune verifies it; no prediction from the draft
    assert upgrade_trials(before, on_disk, [], True, classes, margin_steps=1)[0]["value"] == "0.855"
    assert upgrade_trials(before, on_disk, [dict(BOOT, item=unit) for unit in units], True, plan()) == []

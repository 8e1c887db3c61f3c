# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""tuner/class_values.py: the classes of identical fingerprints, their canaries and the value a member verifies."""
from __future__ import annotations

import pytest

from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner import class_values
from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner import run_settings
from ansible_collections.llmserve.sglang.tests.unit.plugins.plugin_utils.tuner.tuner_standins import DEFAULT_SETTINGS


def probe(key, pinned=None, status="would_tune"):
    pin = None if pinned is None else {"fingerprint_hash": key, "mem_fraction_static": pinned}
    return {"fingerprint_hash": key, "pin": pin, "status": status}


def test_one_canary_per_class_in_inventory_order():
    plan = class_values.class_plan({"a1": probe("A" * 64), "b1": probe("B" * 64), "a2": probe("A" * 64),
                                    "a3": probe("A" * 64), "x": None, "b2": {"failed": True, "msg": "no unit"}},
                                   ["a1", "b1", "a2", "a3", "x", "b2"])
    assert {host: entry["role"] for host, entry in plan.items()} == {
        "a1": "canary", "a2": "member", "a3": "member", "b1": "canary", "x": "alone", "b2": "alone"}
    assert plan["a3"]["canary"] == "a1" and plan["a3"]["class"] == "A" * 12 and plan["a1"]["canary"] is None
    assert plan["b2"]["why"] == "no fingerprint: no unit"
    assert "verifies the value of a1" in plan["a2"]["why"]


def test_a_pin_of_the_same_fingerprint_needs_no_canary_unless_forced():
    probes = {"a1": probe("A" * 64), "a2": probe("A" * 64, pinned=0.91, status="unchanged"),
              "a3": probe("A" * 64, pinned=0.93)}
    plan = class_values.class_plan(probes, ["a1", "a2", "a3"])
    assert [plan[host]["role"] for host in ("a1", "a2", "a3")] == ["member"] * 3
    assert {plan[host]["value"] for host in plan} == {0.91} and "a2 holds the class's pin 0.91" in plan["a1"]["why"]
    forced = class_values.class_plan(probes, ["a1", "a2", "a3"], force=True)
    assert [forced[host]["role"] for host in ("a1", "a2", "a3")] == ["canary", "member", "member"]


@pytest.mark.parametrize("entry, outcome, expected", [
    ({"role": "member", "canary": "a1", "value": None}, {"status": "tuned", "result": {"after": {"mem_fraction_static": 0.91}}}, 0.91),
    ({"role": "member", "canary": "a1", "value": None}, {"status": "unchanged", "pin": {"mem_fraction_static": 0.9}}, 0.9),
    ({"role": "member", "canary": "a1", "value": None}, {"status": "no_stable_value", "result": {}}, None),
    ({"role": "member", "canary": "a1", "value": None}, None, None),
    ({"role": "member", "canary": None, "value": 0.93}, None, 0.93),
    ({"role": "canary", "canary": None, "value": None}, None, None),
    (None, None, None),
])
def test_the_value_a_member_verifies(entry, outcome, expected):
    assert class_values.class_value(entry, outcome) == expected


@pytest.mark.parametrize("entry, outcome, expected", [
    ({"role": "member", "value": None}, {"status": "tuned", "result": {"after": {"mem_fraction_static": 0.91,
                                                                                 "tokens": 202389}}}, 202389),
    ({"role": "member", "value": None}, {"status": "unchanged", "pin": {"mem_fraction_static": 0.9, "tokens": 190000}},
     190000),
    ({"role": "member", "value": 0.93}, {"status": "unchanged", "pin": {"tokens": 190000}}, None),   # a held pin's value
    ({"role": "member", "value": None}, None, None),
    ({"role": "canary", "value": None}, {"status": "tuned", "result": {"after": {"tokens": 1}}}, None),
])
def test_the_pool_a_member_is_capped_at_is_its_canarys(entry, outcome, expected):
    assert class_values.class_tokens(entry, outcome) == expected


@pytest.mark.parametrize("value, changes, expected", [
    (0.91, {}, 0.91),                          # no margin by default: the canary's own value
    (0.91, {"class_margin_steps": 1}, 0.905),
    (0.91, {"class_margin_steps": 3}, 0.895),
    (0.9125, {"class_margin_steps": 1}, 0.905),   # an operator's off-grid pin: down to the grid, then the margin
    (0.9125, {"resolution": 0.0005, "class_margin_steps": 1}, 0.912),
    (0.99, {"cap": 0.95}, 0.95),
])
def test_the_margin_below_the_class_value(value, changes, expected):
    settings = run_settings.check_settings(dict(DEFAULT_SETTINGS, **changes))
    assert class_values.verify_value(value, settings) == pytest.approx(expected)


def test_the_class_plan_has_an_entry_per_unit_and_units_of_one_host_may_share_a_class():
    several = {"status": "would_tune", "units": {"sglang@a.service": probe("A" * 64), "sglang@b.service": probe("A" * 64)}}
    plan = class_values.class_plan_units({"h": several, "g": dict(probe("A" * 64), unit="sglang.service"),
                                          "x": None}, ["h", "g", "x"])
    assert plan["h"]["canary"] and not plan["g"]["canary"] and not plan["x"]["canary"]
    a, b = plan["h"]["units"]["sglang@a.service"], plan["h"]["units"]["sglang@b.service"]
    assert a["role"] == "canary" and b["role"] == "member"
    assert (b["canary"], b["canary_host"], b["canary_unit"]) == ("h/sglang@a", "h", "sglang@a.service")
    member = plan["g"]["units"]["sglang.service"]
    assert member["canary_host"] == "h" and member["canary_unit"] == "sglang@a.service"
    assert plan["h"]["lines"][0].startswith("h/sglang@a: canary of class AAAAAAAAAAAA")
    assert plan["x"]["units"] == {} and plan["x"]["lines"][0].startswith("x: alone")


def test_the_canary_of_a_class_is_a_host_whose_gpus_hold_nothing_else():
    held = dict(probe("A" * 64), other_gib=8.0)
    plan = class_values.class_plan({"a1": held, "a2": probe("A" * 64), "a3": probe("A" * 64)}, ["a1", "a2", "a3"])
    assert [plan[host]["role"] for host in ("a1", "a2", "a3")] == ["member", "canary", "member"]
    assert plan["a1"]["canary"] == "a2"
    everywhere = class_values.class_plan({"a1": held, "a2": held}, ["a1", "a2"])
    assert [everywhere[host]["role"] for host in ("a1", "a2")] == ["canary", "member"]

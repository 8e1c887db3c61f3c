# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""kv_tune_fleet_plan as probe.yml calls it: over hostvars, once."""
from __future__ import annotations


import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.llmserve.sglang.plugins.filter import kv_tune_class_plan as class_plan_filter
from ansible_collections.llmserve.sglang.plugins.filter import kv_tune_fleet_plan as kv_tune_fleet

KEY = "A" * 64


def hostvars():
    probe = {"unit": "sglang.service", "status": "would_tune", "fingerprint_hash": KEY, "pin": None}
    return {"a1": {"kv_tune_probe": probe}, "a2": {"kv_tune_probe": dict(probe)},
            "a3": {"kv_tune_probe": dict(probe, status="unchanged",
                                         pin={"fingerprint_hash": KEY, "mem_fraction_static": 0.9})},
            "gone": {}}


def test_the_plan_over_hostvars():
    plan = kv_tune_fleet.kv_tune_fleet_plan(hostvars(), ["a1", "a2", "a3", "gone"], strategy="per_class")
    assert plan["groups"]["kv_tune_todo"] == ["a1", "a2", "gone"]
    assert plan["groups"]["kv_tune_canaries"] == []
    assert plan["hosts"]["a3"]["unchanged"] and plan["hosts"]["a1"]["class"]["units"]["sglang.service"]["value"] == 0.9
    assert plan["hosts"]["gone"]["class"]["lines"] == ["gone: alone of class None: no fingerprint: the host did not answer"]


def test_per_host_by_default():
    plan = kv_tune_fleet.kv_tune_fleet_plan(hostvars(), ["a1", "a2"])
    assert plan["classes"] == {} and plan["hosts"]["a1"]["class"] is None


def test_hosts_must_be_a_list():
    with pytest.raises(AnsibleFilterError, match="expects a list of hosts, got str"):
        kv_tune_fleet.kv_tune_fleet_plan(hostvars(), "a1")


def test_docs_name_every_option():
    assert sorted(kv_tune_fleet.FilterModule().filters()) == ["kv_tune_fleet_plan"]
    doc = yaml.safe_load(kv_tune_fleet.DOCUMENTATION)
    assert doc["name"] == "kv_tune_fleet_plan"
    assert set(doc["options"]) == {"_input", "hosts", "strategy", "force", "probe_var"}
    assert "llmserve.sglang.kv_tune_fleet_plan" in kv_tune_fleet.EXAMPLES


@pytest.mark.parametrize("force, canaries", [("false", []), ("no", []), (False, []), ("true", ["a1"]), (True, ["a1"])])
def test_force_as_a_string_means_what_it_says(force, canaries):
    # -e kv_tune_force=false and an AWX survey's answer give the string; bool("false") would force the plan.
    plan = kv_tune_fleet.kv_tune_fleet_plan(hostvars(), ["a1", "a2", "a3"], strategy="per_class", force=force)
    assert plan["groups"]["kv_tune_canaries"] == canaries


def test_force_must_be_a_boolean():
    with pytest.raises(AnsibleFilterError, match="force must be a boolean, got 'maybe'"):
        kv_tune_fleet.kv_tune_fleet_plan(hostvars(), ["a1"], strategy="per_class", force="maybe")


def test_the_class_plan_reads_force_as_ansible_does():
    assert not class_plan_filter.kv_tune_class_plan(hostvars(), ["a1", "a3"], force="false")["a1"]["canary"]
    assert class_plan_filter.kv_tune_class_plan(hostvars(), ["a1", "a3"], force="true")["a1"]["canary"]

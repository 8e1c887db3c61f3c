# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The fleet's plan of a tuning run, from the hosts' probes (cases in test_fleet_plan.yaml)."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ansible_collections.llmserve.sglang.plugins.plugin_utils.fleet import fleet_plan
from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner import class_values

DATA = yaml.safe_load((Path(__file__).with_suffix(".yaml")).read_text())
CASES = DATA["cases"]


def probes_of(case):
    return {host: DATA["probes"][probe] if isinstance(probe, str) else probe
            for host, probe in case["probes"].items()}


@pytest.mark.parametrize("case", CASES, ids=[case["name"] for case in CASES])
def test_the_fleet_plan(case):
    plan = fleet_plan.fleet_plan(probes_of(case), case["hosts"], strategy=case["strategy"],
                                 force=case.get("force", False))
    assert plan["groups"] == case["groups"]
    assert plan["memberships"] == [{"host": host, "groups": plan["hosts"][host]["groups"]}
                                   for host in case["hosts"] if plan["hosts"][host]["groups"]]
    assert sorted(plan["hosts"]) == sorted(case["hosts"])
    if "classes" in case:
        assert plan["classes"] == case["classes"]
    if "servers" in case:
        assert plan["servers"] == case["servers"]
    if "errors" in case:
        assert sorted(plan["errors"]) == sorted(case["errors"])
        for host, part in case["errors"].items():
            assert part in plan["errors"][host] and plan["hosts"][host]["error"] == plan["errors"][host]
    for host, fields in (case.get("hosts_have") or {}).items():
        for field, value in fields.items():
            assert plan["hosts"][host][field] == value, (host, field)


def test_the_class_entry_is_what_the_action_reads():
    """kv_tune_class (what main.yml gives the action as class_plan: kv_tune_class.units) is class_plan_units' entry."""
    case = CASES[0]
    probes = probes_of(case)
    plan = fleet_plan.fleet_plan(probes, case["hosts"], strategy="per_class")
    assert {host: plan["hosts"][host]["class"] for host in case["hosts"]} == \
        class_values.class_plan_units(probes, case["hosts"])


def test_a_plan_for_512_hosts_from_synthetic_probes():
    """A fleet of 512 hosts: 4 hardware classes, a quarter of the hosts pinned, 16 two-node servers. One pass over
    the hosts (the planner is linear: each host is visited a fixed number of times); timings are in bench/, if
    anywhere, never asserted."""
    hosts, probes = [], {}
    for index in range(480):
        host = "gpu%03d" % index
        key = "%s" % "ABCD"[index % 4] * 64
        pinned = index % 4 == 0 and index < 240
        probes[host] = {"unit": "sglang.service", "status": "unchanged" if pinned else "would_tune", "fingerprint_hash": key,
                        "pin": {"fingerprint_hash": key, "mem_fraction_static": 0.9} if pinned else None}
        hosts.append(host)
    for server in range(16):
        for rank in range(2):
            host = "mn%02d-%d" % (server, rank)
            probes[host] = {"unit": "sglang.service", "status": "would_tune" if server % 2 else "unchanged", "fingerprint_hash": "N" * 64,
                            "node": {"key": "srv%02d" % server, "nnodes": 2, "node_rank": rank,
                                     "dist_init_addr": "10.1.%d.1:5000" % server}}
            hosts.append(host)
    assert len(hosts) == 512
    plan = fleet_plan.fleet_plan(probes, hosts, strategy="per_class")
    assert len(plan["hosts"]) == 512 and not plan["errors"]
    assert sorted(plan["classes"]) == ["A" * 12, "B" * 12, "C" * 12, "D" * 12, "N" * 12]
    assert plan["classes"]["A" * 12]["value"] == 0.9 and plan["classes"]["A" * 12]["canary"] is None
    assert plan["groups"]["kv_tune_canaries"] == ["gpu001", "gpu002", "gpu003"]
    assert len(plan["groups"]["kv_tune_todo"]) == 480 - 60
    assert len(plan["groups"]["kv_tune_multinode"]) == 16 and len(plan["servers"]) == 16

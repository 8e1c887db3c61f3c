# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Time the fleet's plan of a tuning run from synthetic probes: once for the fleet (fleet_plan.fleet_plan, what
roles/kv_tune/tasks/probe.yml runs now) against once per host (what every host did before: the whole fleet's class
and server plans, keeping its own entry). Pure Python, no Ansible templating; nothing here is asserted.

    .venv/bin/python bench/bench_fleet_plan.py        # prints Markdown
"""
from __future__ import annotations

import functools
import sys
import timeit
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / ".venv" / "collections"))

# pylint: disable=wrong-import-position
from ansible_collections.llmserve.sglang.plugins.plugin_utils.fleet import multinode  # noqa: E402
from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner import class_values  # noqa: E402
from ansible_collections.llmserve.sglang.plugins.plugin_utils.fleet.fleet_plan import fleet_plan  # noqa: E402


def probes_of(count):
    """``count`` hosts in 4 classes, a quarter of each class pinned, every 32nd pair of hosts one 2-node server."""
    hosts, probes = [], {}
    for index in range(count):
        host = "gpu%04d" % index
        key = "ABCD"[index % 4] * 64
        pinned = index % 8 == 0
        probes[host] = {"unit": "sglang.service", "status": "unchanged" if pinned else "would_tune",
                        "fingerprint_hash": key,
                        "pin": {"fingerprint_hash": key, "mem_fraction_static": 0.9} if pinned else None}
        if index % 32 in (30, 31):
            probes[host]["node"] = {"key": "srv%04d" % (index // 32), "nnodes": 2, "node_rank": index % 32 - 30,
                                    "dist_init_addr": "10.%d.0.1:5000" % (index // 32)}
        hosts.append(host)
    return hosts, probes


def plan_once(hosts, probes):
    """The fleet's plan, as roles/kv_tune/tasks/probe.yml computes it once for the run."""
    return fleet_plan(probes, hosts, strategy="per_class")


def seconds(call, repeat=3):
    return min(timeit.repeat(call, number=1, repeat=repeat))


def per_host(hosts, probes):
    for host in hosts:
        multinode.server_plan(probes, hosts).get(host)
        class_values.class_plan_units(probes, hosts)[host]


def main():
    print("| hosts | once for the fleet (s) | once per host, before (s) |")
    print("|---:|---:|---:|")
    for count in (64, 256, 512, 1024):
        hosts, probes = probes_of(count)
        once = seconds(functools.partial(plan_once, hosts, probes))
        before = seconds(functools.partial(per_host, hosts, probes), repeat=1)
        print("| %d | %.4f | %.2f |" % (count, once, before))


if __name__ == "__main__":
    main()

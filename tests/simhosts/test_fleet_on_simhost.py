# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""playbooks/tune_kv.yml on a fleet of five simulated hosts in two classes (prefix simfleet): two 8x RTX PRO 6000
with Kimi-K2.5 (the field case) and three 8x H100 with Llama-3.1-70B, deployed by site.yml. The members of each class
differ from its canary in what the fingerprint does not see:

- on simfleet1 another process holds 8 GiB of GPU 3 (an exporter, a stray notebook). SGLang sizes the pool from
  the least free GPU before the weights (P), so the process costs pool, and only 8 GiB x (1 - f) of headroom
  under the load: within SGLang's balance limit (10%) the class's value less one step still holds there. It is
  the first host of its class, but a canary is a host whose GPUs hold nothing else: simfleet2 searches for the
  class (a canary found on the held GPU would give every member a value two steps below its own);
- the H100 class's canary, simfleet3, has workspaces (what SGLang allocates after the pool) 0.75 GiB larger per GPU
  than simfleet5's, as a different CUBLAS_WORKSPACE_CONFIG would give: the class's value is two steps below what
  simfleet5 holds, whose verification leaves more to spare than the margin explains, so simfleet5 searches on from
  it (without that, a member pins two steps, 7% of its pool, below its own value);
- on simfleet4 the workspaces take 2 GiB more per GPU than simfleet5's, 1.25 GiB more than the canary's: the
  headroom itself is gone, the class's value fails the margin, and the host searches on its own.

per_class runs from a forced start with a margin of one grid step (kv_tune_class_margin_steps=1; the default, none,
pins an identical member at its canary's value: the unit cases of test_kv_tune.yaml and bench/bench_fleet.py); it
must pin values the simulator's oracle calls stable, and spend fewer restarts than a search on every host (as the
canary searched; per_host itself is test_tune_kv_on_simhost.py's, and both are measured side by side by
bench/bench_fleet.py). The restarts and the wall time are printed at the end of the run.
"""
from __future__ import annotations

import json
import time

import pytest

from simhost_lib import (HOST_JSON, deployed, fact, invocation, oracle_max_at, play, report, running_fraction,
                         set_faults, ssh, tune)

PREFIX = "simfleet"
PROFILES = ["field", "field", "h100-llama70b", "h100-llama70b", "h100-llama70b"]
HOSTS = ["%s%d" % (PREFIX, number) for number in range(1, len(PROFILES) + 1)]
CLASSES = {"field": HOSTS[:2], "h100-llama70b": HOSTS[2:]}
HELD = HOSTS[0]      # another process holds 8 GiB of one GPU: not its class's canary, though it comes first
TIGHT = HOSTS[2]     # the H100 class's canary: 0.75 GiB more of workspaces after the pool than ROOMY
ODD = HOSTS[3]       # 2 GiB more of workspaces after the pool than ROOMY
ROOMY = HOSTS[4]     # the shipped profile: two steps more to spare than its canary
WORKSPACE_MIB = {TIGHT: 768, ODD: 2048}
RES = 0.005
# A start above what the GPUs hold (its CUDA-graph capture or the load runs out of memory): from there a search
# needs three restarts, where a member of a class needs one to verify the canary's value.
START = 0.96


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    with deployed(tmp_path_factory.mktemp("simfleet"), PREFIX, PROFILES, extravars={"site_hosts": "all"}) as inventory:
        set_faults(HELD, gpu_occupied_mib={"3": 8192})
        for host, more in WORKSPACE_MIB.items():
            memory = json.loads(ssh(host, f"cat {HOST_JSON}")).get("memory") or {}
            set_faults(host, _memory=dict(memory, workspace_mib=memory.get("workspace_mib", 64) + more))
        for host in (HELD, *WORKSPACE_MIB):    # the difference was there when the server started
            ssh(host, "systemctl restart sglang.service")
        ready = play(inventory, tasks=[{"name": "ready", "llmserve.sglang.sglang_ready": {"timeout": 120}}])
        assert ready.status == "successful", ready.stdout[-3000:]
        yield inventory


def tune_fleet(fleet, reports, **extravars):
    started = time.monotonic()
    run = tune(fleet, reports, serial="100%", **extravars)
    return run, time.monotonic() - started


def held_under_load(fleet):
    """Every host's pinned server under the stress load, with the tuner's margin kept (each host checked)."""
    run = play(fleet, tasks=[{"name": "stress", "llmserve.sglang.kv_stress": {"duration": 3}, "register": "load",
                              "failed_when": "not load.held or load.min_free_gib < 0.95"}])
    return run.status == "successful", run.stats


def check_pins(reports, lowest_below_oracle):
    """Each host runs its pin, which the oracle calls stable and at most ``lowest_below_oracle`` below its best."""
    for host in HOSTS:
        truth, pinned = oracle_max_at(host, RES), fact(host)["mem_fraction_static"]
        assert truth - lowest_below_oracle - 1e-9 <= pinned <= truth + 1e-9, (host, pinned, truth, report(reports, host))
        assert running_fraction(host) == pytest.approx(pinned)


def test_per_class_searches_one_canary_per_class_and_verifies_the_others(fleet, tmp_path, measured):
    # From the deployed values, forced from one start: a margin of one step (the default is none): these members
    # differ from their canaries on purpose, and the margin is what lets HELD keep the class's value with one restart.
    run, wall = tune_fleet(fleet, tmp_path, kv_tune_force=True, kv_tune_start=START, kv_tune_strategy="per_class",
                           kv_tune_class_margin_steps=1)
    assert run.status == "successful", run.stdout[-8000:]
    results = {host: report(tmp_path, host) for host in HOSTS}
    spent = {host: results[host]["restarts"] for host in HOSTS}
    searched = 0    # what per_host spends from that start: each host of a class searches as its canary did
    for hosts in CLASSES.values():
        canary = [host for host in hosts if host != HELD][0]
        members = [host for host in hosts if host != canary]
        searched += len(hosts) * spent[canary]
        assert "%s: canary of class" % canary in run.stdout
        assert results[canary]["verify"] is None and spent[canary] >= 2, results[canary]["trials"]
        canary_value = results[canary]["after"]["mem_fraction_static"]
        for host in members:
            verify = results[host]["verify"]
            assert verify["value"] == pytest.approx(canary_value - RES), (host, verify)
            if host == ODD:     # 1.25 GiB less headroom: the class's value does not keep the margin there
                assert not verify["held"] and spent[host] >= 2, results[host]["trials"]
                assert "searched on its own" in run.stdout
            elif host == ROOMY:   # 0.75 GiB more: the class's value held with more to spare than its margin
                assert verify["held"] and spent[host] >= 2, results[host]["trials"]
                assert "searching on from it" in results[host]["trials"][0]["why"], results[host]["trials"]
                assert results[host]["after"]["mem_fraction_static"] > canary_value, results[host]
            else:
                assert verify["held"] and spent[host] == 1, results[host]["trials"]
    # Members sit one margin below the canary (the held memory costs HELD about one step of its own best, so it
    # may sit at it), the hosts that searched on within a step of their own best.
    check_pins(tmp_path, 2 * RES)
    for host in (ODD, ROOMY):
        assert fact(host)["mem_fraction_static"] >= oracle_max_at(host, RES) - RES - 1e-9, host
    measured("fleet of %d hosts, 2 classes, forced start %s: per_class %d restarts (%s) in %.0f s, where each host "
             "searching as its class's canary did would take %d" % (
                 len(HOSTS), START, sum(spent.values()), " ".join(str(spent[h]) for h in HOSTS), wall, searched))
    assert sum(spent.values()) < searched, spent
    assert "restarts: %d in all" % sum(spent.values()) in run.stdout


def test_every_pin_holds_the_load(fleet):
    held, stats = held_under_load(fleet)
    assert held, stats


def test_a_second_per_class_run_changes_nothing(fleet, tmp_path):
    started = {host: invocation(host) for host in HOSTS}
    run, _wall = tune_fleet(fleet, tmp_path, kv_tune_strategy="per_class")
    assert run.status == "successful", run.stdout[-8000:]
    assert sum(run.stats.get("changed", {}).get(host, 0) for host in HOSTS) == 0, run.stats
    assert {host: invocation(host) for host in HOSTS} == started
    assert run.stdout.count("fingerprint unchanged") >= len(HOSTS) or run.stdout.count("unchanged, keeps") >= len(HOSTS)

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The cost of an upgrade: playbooks/rollout.yml across a release that changes memory, on a fleet of five simulated
hosts deployed by site.yml at SGLang 0.5.9 and tuned:

- benchroll1: the field case (8x RTX PRO 6000, one server, an EAGLE3 draft), the canary: it goes to 0.5.17 (FIELD_NEW),
  which counts the draft's weights and KV in --mem-fraction-static where 0.5.9 loaded them after the target's pool,
  so the upgrade's restart starts the value predicted for it (upgrade_value.py);
- benchroll2: 8x H100, two servers (sglang@a on GPUs 0-3, sglang@b on 4-7, Llama-3.1-70B at TP4 each);
- benchroll3 + benchroll4: 8x H100 each, one server that spans both (TP16, --nnodes 2);
- benchroll5: 8x H100, one server (TP8).

The other hosts go to 0.5.10 (NEW). On every H100 host 0.5.10 reserves about 6 GiB more for its CUDA graphs (the
simulator's memory_for_sglang_versions), so the pins tuned on 0.5.9 run out of memory in 0.5.10's graph capture.

Before (the collection at BEFORE, from git, on the same hosts): rollout.yml refuses the fleet (a host with two servers,
a server that spans hosts); given benchroll5 alone, it rolls it back. After (this checkout): the whole fleet. Per
server: what became of it, its starts during the run (systemd's "Started" records of its unit), the tuner's
restarts, the pin and pool before and after; per batch, its wall time (bench/callback_plugins/task_times.py).

    .venv/bin/python bench/bench_rollout.py            # root (systemd-nspawn); `make bench-rollout`
"""
from __future__ import annotations

import json
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import yaml

import benchlib
from benchlib import log

PREFIX = "benchroll"
PROFILES = ["field", "h100-llama70b", "h100-llama70b", "h100-llama70b", "h100-llama70b"]
BEFORE = "dc99659"     # the last commit before issue 35
NEW = "0.5.10"
FIELD_NEW = "0.5.17"
LARGER_GRAPHS = {NEW: {"graph_mib_base": 6144}}
TWO = {"sglang_service_server_args": {"served_model_name": "llama-3.1-70b-instruct", "tp_size": 4},
       "sglang_service_instances": [{"name": "a", "server_args": {"port": 30001, "base_gpu_id": 0}},
                                    {"name": "b", "server_args": {"port": 30002, "base_gpu_id": 4}}]}
STARTED = "39f53479d3a045ac8e11786248231fbf"   # systemd's catalog id of "Started <unit>"


def units(host: str) -> list:
    return ["sglang@a.service", "sglang@b.service"] if host.endswith("2") else ["sglang.service"]


def starts(host: str, unit: str, since: int) -> int:
    out = benchlib.ssh(host, "journalctl -u %s --since @%d -o json --no-pager | grep -c %s || true" % (unit, since,
                                                                                                       STARTED))
    return int(out.strip() or 0)


def host_clock(host: str) -> int:
    return int(benchlib.ssh(host, "date +%s").strip())


def batch_seconds(times_path: Path) -> list:
    """Wall time of each serial batch of the rollout play: from its first task to the end of its summary."""
    found, current, started = [], 0.0, False
    for seconds, task in json.loads(times_path.read_text()):
        name = task.split(" : ", 1)[-1]     # without the role's prefix
        if name.startswith("Rollout | Phase lock"):
            started = True
        if started:
            current += seconds
        if started and name == "Rollout | Fleet summary so far":
            found.append(round(current, 1))
            current, started = 0.0, False
    return found


def rollout(inventory: Path, hosts: list, reports: Path, collections: str | None = None,
            playbook_root: Path = benchlib.REPO, *extra: str) -> tuple:
    """rollout.yml to each host's sglang_version (its host_vars; the collection in ``collections``, else this
    checkout's): (the run, the summary's rows by server, each unit's starts during it, each batch's seconds)."""
    reports.mkdir(parents=True)
    times = reports / "task_times.json"
    env = {"ANSIBLE_CALLBACK_PLUGINS": str(benchlib.REPO / "bench" / "callback_plugins"),
           "ANSIBLE_CALLBACKS_ENABLED": "task_times", "BENCH_TASK_TIMES": str(times)}
    if collections:
        env["ANSIBLE_COLLECTIONS_PATH"] = collections
    clocks = {host: host_clock(host) for host in hosts}
    done = benchlib.timed([str(benchlib.BIN / "ansible-playbook"), "-i", str(inventory),
                           str(playbook_root / "playbooks" / "rollout.yml"), "-f", "10",
                           "-e", f"rollout_report_dir={reports}", "-e", f"kv_tune_report_dir={reports / 'kv_tune'}",
                           *extra], check=False, env=env)
    (reports / "ansible-playbook.log").write_text(done.stdout)
    rows = {}
    summary = reports / "rollout_summary.json"
    for row in json.loads(summary.read_text()) if summary.exists() else []:
        rows[row.get("server") or row["host"]] = row
    counted = {(host, unit): starts(host, unit, clocks[host]) for host in hosts for unit in units(host)}
    batches = batch_seconds(times) if times.exists() else []
    return done, rows, counted, batches


def tuner_restarts(reports: Path, host: str, unit: str) -> int | None:
    name = host if len(units(host)) == 1 else "%s_%s" % (host, unit.removesuffix(".service"))
    path = reports / "kv_tune" / f"{name}.json"
    return json.loads(path.read_text()).get("restarts") if path.exists() else None


def server_rows(hosts: list, reports: Path, rows: dict, counted: dict) -> list:
    out = []
    for host in hosts:
        for unit in units(host):
            label = host if len(units(host)) == 1 else "%s/%s" % (host, unit.removesuffix(".service"))
            row = rows.get(label) or {}
            out.append({"server": label, "status": row.get("status", "refused"), "starts": counted[(host, unit)],
                        "tuner_restarts": tuner_restarts(reports, host, unit),
                        "pin_before": row.get("pin_before"), "pin_after": row.get("pin_after"),
                        "cause": row.get("cause")})
    return out


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="bench-rollout-"))
    old = work / "before" / "ansible_collections" / "llmserve" / "sglang"
    old.parent.mkdir(parents=True)
    subprocess.run(["git", "-C", str(benchlib.REPO), "worktree", "add", "--detach", str(old), BEFORE], check=True,
                   capture_output=True)
    try:
        with benchlib.sim_hosts(PREFIX, PROFILES) as (_tmp, inventory, hosts):
            leader = next(iter(yaml.safe_load((inventory / "hosts.yml").read_text()).values()))["hosts"][hosts[2]][
                "ansible_host"]
            host_vars = {host: {} for host in hosts}
            host_vars[hosts[1]] = TWO
            for rank, host in enumerate(hosts[2:4]):
                host_vars[host] = {"sglang_service_server_args": {
                    "served_model_name": "llama-3.1-70b-instruct", "tp_size": 16, "nnodes": 2, "node_rank": rank,
                    "dist_init_addr": f"{leader}:5000"}}
            for host, variables in host_vars.items():
                benchlib.write_host_vars(inventory, host, variables)
            log("site.yml and tune_kv.yml at 0.5.9")
            benchlib.playbook(inventory, "playbooks/site.yml", "-f", "10")
            benchlib.playbook(inventory, "playbooks/tune_kv.yml", "-f", "10", "-e", '{"kv_tune_serial": "100%"}',
                              "-e", f"kv_tune_report_dir={work / 'tune'}", "-e", "kv_tune_plot=false")
            # Each host's release from here on (an -e would give every host one).
            for host, variables in host_vars.items():
                benchlib.write_host_vars(inventory, host, dict(
                    variables, sglang_version=FIELD_NEW if host == hosts[0] else NEW))
            for host in hosts[1:]:
                data = benchlib.read_host_json(host)
                data["memory_for_sglang_versions"] = LARGER_GRAPHS
                benchlib.write_host_json(host, data)

            log("before (%s): the whole fleet, then %s alone" % (BEFORE, hosts[4]))
            refused = rollout(inventory, hosts, work / "before-all", str(work / "before"), old)[0]
            done_before, rows_before, counted_before, batches_before = rollout(
                inventory, hosts, work / "before-one", str(work / "before"), old, "-e", f"rollout_hosts={hosts[4]}")
            log("after: the whole fleet")
            done_after, rows_after, counted_after, batches_after = rollout(inventory, hosts, work / "after")
            before = server_rows(hosts, work / "before-one", rows_before, counted_before)
            after = server_rows(hosts, work / "after", rows_after, counted_after)
    finally:
        subprocess.run(["git", "-C", str(benchlib.REPO), "worktree", "remove", "--force", str(old)],
                       capture_output=True, check=False)
    report(refused, done_before, done_after, before, after, batches_before, batches_after)


def report(refused, done_before, done_after, before, after, batches_before, batches_after) -> None:
    upgraded = [row for row in after if row["status"] in ("upgraded", "retuned", "unchanged")]
    starts = [row["starts"] for row in upgraded]
    data = {"machine": benchlib.machine(), "release": NEW, "field_release": FIELD_NEW, "before_commit": BEFORE,
            "before_whole_fleet": {"rc": refused.rc, "seconds": round(refused.seconds, 1),
                                   "refused": "nothing was done" in refused.stdout},
            "before": {"rc": done_before.rc, "seconds": round(done_before.seconds, 1), "servers": before,
                       "batch_seconds": batches_before},
            "after": {"rc": done_after.rc, "seconds": round(done_after.seconds, 1), "servers": after,
                      "batch_seconds": batches_after,
                      "starts_median": statistics.median(starts) if starts else None,
                      "starts_worst": max(starts) if starts else None,
                      "retuned": sum(row["status"] == "retuned" for row in after),
                      "rolled_back": sum(row["status"] == "rolled_back" for row in after)}}

    def pin(value):
        return "%s (%s)" % (value["value"], "{:,}".format(value["tokens"]) if value.get("tokens") else "?") \
            if value else "-"

    lines = ["# The cost of an upgrade: rollout.yml across a release that changes memory", "",
             "Machine: %s. Five simulated hosts (bench/bench_rollout.py), deployed and tuned at SGLang 0.5.9: the "
             "field case (the canary, with an EAGLE3 draft), going to %s, which counts the draft's weights and KV in "
             "--mem-fraction-static; a host with two servers, a server on two hosts and one more server, going to %s, "
             "which on these H100 hosts reserves about 6 GiB more for its CUDA graphs, so the pins tuned on 0.5.9 run "
             "out of memory in its graph capture." % (data["machine"], FIELD_NEW, NEW), "",
             "## Before (%s)" % BEFORE, "",
             "The whole fleet: rc %d in %.0f s, %s." % (refused.rc, refused.seconds, "refused before anything was "
                                                        "touched (a host with two servers, a server on two hosts)"
                                                        if data["before_whole_fleet"]["refused"] else "not refused"),
             "", "The one host it takes (its batch: %s s):" % ", ".join(map(str, batches_before)), "",
             benchlib.table(["server", "status", "starts", "pin before", "pin after"],
                            [[row["server"], row["status"], row["starts"], pin(row["pin_before"]),
                              pin(row["pin_after"])] for row in before if row["status"] != "refused"], "llrll"),
             "## After", "",
             "rc %d in %.0f s; batches: %s s. Starts per upgraded server: median %s, worst %s (the upgrade's own "
             "restart included); %d re-tuned for the new release, %d rolled back." % (
                 done_after.rc, done_after.seconds, ", ".join(map(str, batches_after)),
                 data["after"]["starts_median"], data["after"]["starts_worst"], data["after"]["retuned"],
                 data["after"]["rolled_back"]), "",
             benchlib.table(["server", "status", "starts", "tuner restarts", "pin before", "pin after"],
                            [[row["server"], row["status"], row["starts"], row["tuner_restarts"],
                              pin(row["pin_before"]), pin(row["pin_after"])] for row in after], "llrrll"),
             "Starts: systemd's `Started` records of the server's unit during the run (its starts, failed ones "
             "included). The upgrade's restart is the re-tune's first trial: on the field host a value predicted "
             "for %s (the pin plus the draft's weights and KV and the pin's spare headroom, over P), elsewhere the "
             "old pin, since nothing the formula knows tells 0.5.10's graph reserve. Where that pin runs out of "
             "memory, the rollout stops the server and the tuner's re-tune reads that failed start (on a server "
             "that spans hosts, from every node's log), then starts a safe value and searches." % FIELD_NEW, ""]
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    figure, axis = plt.subplots(figsize=(8, 3.5))
    names = [row["server"] for row in after]
    colours = {"retuned": "tab:green", "upgraded": "tab:blue", "unchanged": "tab:gray", "rolled_back": "tab:red"}
    axis.bar(names, [row["starts"] for row in after], color=[colours.get(row["status"], "black") for row in after])
    for index, row in enumerate(after):
        axis.text(index, row["starts"] + 0.05, row["status"], ha="center", fontsize=8)
    axis.set_ylabel("starts during the rollout")
    axis.set_title("rollout.yml to SGLang %s (field: %s): starts per server (after)" % (NEW, FIELD_NEW))
    plt.setp(axis.get_xticklabels(), rotation=20, ha="right")
    benchlib.save("rollout", "\n".join(lines), data, figure)


if __name__ == "__main__":
    started = time.monotonic()
    main()
    log("bench-rollout took %.0f s" % (time.monotonic() - started))

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Fleet cost: what the tuner costs as the fleet grows, measured on 8 simulated hosts (8x H100, Llama-3.1-70B,
TP8), and modelled from those measurements for 64 and 512 hosts.

1. A first tune on 1, 2, 4 and 8 hosts at once (every host unpinned on SGLang's default first): the wall time as a
   ratio to one host.
2. per_host against per_class on the 8 hosts: restarts and wall time, with identical hosts and with one host of the
   class with less free memory under the load (1.5 GiB more of workspaces after the pool on every GPU).
3. A re-run that finds nothing to do: tune_kv.yml and site.yml against `ansible -m ping` on 1, 4 and 8 hosts (the
   median of alternated runs), as a ratio.
4. The plan of 64 and 512 inventory hosts from recorded probes (no hosts): time and peak memory on the controller.
5. On paper: the wall time and restarts of a first tune of 64 and 512 hosts, per_host and per_class, from the
   measured per-host costs and a model load of minutes.

    .venv/bin/python bench/bench_fleet.py [--quick]      # root (systemd-nspawn); `make bench-fleet`
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import time
import tracemalloc

import benchlib
from benchlib import log
import bench_fleet_plan

PREFIX = "benchfleet"
PROFILE = "h100-llama70b"
HOSTS = 8
RUNS = 3
ODD_GIB = 1.5
CLASSES = 4      # on paper: hardware and model classes in a large fleet


class Fleet:
    def __init__(self, inventory, hosts):
        self.inventory, self.hosts = inventory, hosts
        self.out = benchlib.RunDirs("bench-fleet-runs-").new

    def reset(self, hosts):
        """Unpinned, on SGLang's default, serving."""
        benchlib.reset(self.inventory, hosts, self.out("reset"), HOSTS)

    def tune(self, hosts, *extra):
        reports = self.out("tune")
        done = benchlib.playbook(self.inventory, "playbooks/tune_kv.yml", "-f", str(HOSTS), "-l", ",".join(hosts),
                                 "-e", f"kv_tune_report_dir={reports}", "-e", '{"kv_tune_serial": "100%"}', *extra)
        results = {host: json.loads((reports / f"{host}.json").read_text()) for host in hosts}
        return done.seconds, results


def first_tunes(fleet, sizes):
    rows = []
    for size in sizes:
        hosts = fleet.hosts[:size]
        fleet.reset(hosts)
        log("first tune on %d host(s)" % size)
        seconds, results = fleet.tune(hosts)
        rows.append({"hosts": size, "seconds": seconds,
                     "restarts": sum(result["restarts"] for result in results.values()),
                     "statuses": sorted({result["status"] for result in results.values()})})
        log("  %.1f s, %d restart(s)" % (seconds, rows[-1]["restarts"]))
    for row in rows:
        row["ratio"] = row["seconds"] / rows[0]["seconds"]
    return rows


def strategies(fleet):
    """per_host and per_class, with identical hosts and with one odd host."""
    rows = []
    odd = fleet.hosts[-1]
    for case in ("identical", "one host with %.1f GiB less free under load" % ODD_GIB):
        if case != "identical":
            # What the fingerprint does not see: SGLang's workspaces after the pool (another
            # CUBLAS_WORKSPACE_CONFIG, say) take ODD_GIB more per GPU, all of it out of the headroom.
            data = benchlib.read_host_json(odd)
            data["memory"]["workspace_mib"] = data["memory"].get("workspace_mib", 64) + int(ODD_GIB * 1024)
            benchlib.write_host_json(odd, data)
        for strategy in ("per_host", "per_class"):
            fleet.reset(fleet.hosts)
            log("%s, %s" % (strategy, case))
            seconds, results = fleet.tune(fleet.hosts, "-e", f"kv_tune_strategy={strategy}")
            tokens = {host: (result["after"] or {}).get("tokens") for host, result in results.items()}
            rows.append({"case": case, "strategy": strategy, "seconds": seconds,
                         "restarts": sum(result["restarts"] for result in results.values()),
                         "restarts_each": [results[host]["restarts"] for host in fleet.hosts],
                         "values": [(results[host]["after"] or {}).get("mem_fraction_static") for host in fleet.hosts],
                         "tokens": sum(value or 0 for value in tokens.values())})
            log("  %.1f s, %d restart(s), values %s" % (seconds, rows[-1]["restarts"], rows[-1]["values"]))
    return rows


def noop_reruns(fleet, sizes):
    """The fleet is pinned (the last tune): alternate ping, tune_kv.yml and site.yml, RUNS times each."""
    rows = []
    for size in sizes:
        limit = ",".join(fleet.hosts[:size])
        times = {"ping": [], "tune_kv.yml": [], "site.yml": []}
        log("no-op re-runs on %d host(s)" % size)
        for _run in range(RUNS):
            times["ping"].append(benchlib.timed([str(benchlib.BIN / "ansible"), "all", "-i", str(fleet.inventory),
                                                 "-f", str(HOSTS), "-l", limit, "-m", "ansible.builtin.ping"]).seconds)
            tune = benchlib.playbook(fleet.inventory, "playbooks/tune_kv.yml", "-f", str(HOSTS), "-l", limit,
                                     "-e", f"kv_tune_report_dir={fleet.out('noop')}")
            times["tune_kv.yml"].append(tune.seconds)
            site = benchlib.playbook(fleet.inventory, "playbooks/site.yml", "-f", str(HOSTS), "-l", limit)
            times["site.yml"].append(site.seconds)
            changed = [line for line in tune.stdout.splitlines() + site.stdout.splitlines()
                       if " : ok=" in line and "changed=0" not in line]
            if changed:
                log("  CHANGED on a no-op re-run: %s" % changed)
        medians = {name: statistics.median(values) for name, values in times.items()}
        profiles = {name: profile(fleet, name, limit) for name in ("tune_kv.yml", "site.yml")}
        rows.append({"hosts": size, "runs": times, "medians": medians, "profiles": profiles,
                     "tune_ratio": medians["tune_kv.yml"] / medians["ping"],
                     "site_ratio": medians["site.yml"] / medians["ping"]})
        log("  ping %.2f s, tune_kv.yml %.2f s (%.2fx), site.yml %.2f s (%.2fx)" % (
            medians["ping"], medians["tune_kv.yml"], rows[-1]["tune_ratio"], medians["site.yml"],
            rows[-1]["site_ratio"]))
    return rows


def profile(fleet, name, limit):
    """One more no-op run of playbooks/<name> with bench/callback_plugins/task_times: every task's wall time."""
    path = fleet.out("profile") / "times.json"
    benchlib.timed([str(benchlib.BIN / "ansible-playbook"), "-i", str(fleet.inventory), "-f", str(HOSTS), "-l", limit,
                    str(benchlib.REPO / "playbooks" / name), "-e", f"kv_tune_report_dir={path.parent}"],
                   env={"ANSIBLE_CALLBACK_PLUGINS": str(benchlib.REPO / "bench" / "callback_plugins"),
                        "ANSIBLE_CALLBACKS_ENABLED": "task_times", "BENCH_TASK_TIMES": str(path)})
    times = json.loads(path.read_text())
    return {"tasks": len(times), "seconds": sum(seconds for seconds, _name in times),
            "slowest": sorted(times, reverse=True)[:12]}


def planning(counts=(64, 512)):
    rows = []
    for count in counts:
        hosts, probes = bench_fleet_plan.probes_of(count)
        started = time.perf_counter()
        tracemalloc.start()
        bench_fleet_plan.plan_once(hosts, probes)
        _current, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        rows.append({"hosts": count, "seconds": time.perf_counter() - started, "peak_mib": peak / 2 ** 20})
    return rows


def on_paper(first, strategy_rows, load_minutes=(10, 30)):
    """Wall time and restarts of a first tune of 64 and 512 hosts, from the measured costs.

    A host's tune is its restarts, each a model load plus the load test, and Ansible's per-host work (measured:
    the 1-host first tune less its one simulated restart). Ansible runs a task on `forks` hosts at a time, so a
    batch of B hosts takes ceil(B / forks) host-times; tune_kv.yml's default batches are 1 host, then 25% at a time.
    per_class: the canaries (one per class) search first, the members verify once (one restart), so the run is
    two host-times plus the members' batches."""
    identical = {row["strategy"]: row for row in strategy_rows if row["case"] == "identical"}
    per_host_restarts = identical["per_host"]["restarts"] / HOSTS
    canary_restarts = max(identical["per_class"]["restarts_each"])
    member_restarts = min(identical["per_class"]["restarts_each"])
    overhead_s = first[0]["seconds"]
    rows = []
    for count in (64, 512):
        quarter = max(1, count // 4)
        batches = [1] + [quarter] * math.ceil((count - 1) / quarter)
        for minutes in load_minutes:
            def host_s(restarts, minutes=minutes):
                return overhead_s + restarts * minutes * 60
            for forks in (5, 25, 64):
                wall = sum(math.ceil(batch / forks) for batch in batches) * host_s(per_host_restarts)
                rows.append({"hosts": count, "load_minutes": minutes, "forks": forks, "strategy": "per_host",
                             "restarts": round(per_host_restarts * count), "hours": wall / 3600})
                # per_class, CLASSES classes: the canaries at once, then the members in the same batches.
                members = count - CLASSES
                wall = host_s(canary_restarts) + sum(
                    math.ceil(min(quarter, members - done) / forks) for done in range(0, members, quarter)
                ) * host_s(member_restarts)
                rows.append({"hosts": count, "load_minutes": minutes, "forks": forks, "strategy": "per_class",
                             "restarts": CLASSES * canary_restarts + members * member_restarts,
                             "hours": wall / 3600})
    return rows


def markdown(first, strategy_rows, noops, plans, paper, seconds):
    text = ["# Fleet cost\n\n",
            "Machine: %s. Command: `make bench-fleet` (%d simulated hosts, 8x H100, Llama-3.1-70B TP8; forks %d; "
            "tune_kv.yml with kv_tune_serial 100%%). Wall time %.0f min.\n\n"
            % (benchlib.machine(), HOSTS, HOSTS, seconds / 60),
            "## A first tune on N hosts at once\n\n",
            benchlib.table(["hosts", "wall s", "ratio to 1 host", "restarts"],
                           [[row["hosts"], "%.1f" % row["seconds"], "%.2f" % row["ratio"], row["restarts"]]
                            for row in first], "rrrr"),
            "\n## per_host and per_class\n\n",
            benchlib.table(["fleet", "strategy", "wall s", "restarts (each)", "values", "KV tokens in all"],
                           [[row["case"], row["strategy"], "%.1f" % row["seconds"],
                             "%d (%s)" % (row["restarts"], " ".join(str(r) for r in row["restarts_each"])),
                             " ".join(str(v) for v in row["values"]), "{:,}".format(row["tokens"])]
                            for row in strategy_rows], "llrrll"),
            "\n## A re-run that finds nothing to do, against ping\n\n",
            benchlib.table(["hosts", "ping s", "tune_kv.yml s", "x ping", "site.yml s", "x ping"],
                           [[row["hosts"], "%.2f" % row["medians"]["ping"], "%.2f" % row["medians"]["tune_kv.yml"],
                             "%.2f" % row["tune_ratio"], "%.2f" % row["medians"]["site.yml"],
                             "%.2f" % row["site_ratio"]] for row in noops], "rrrrrr"),
            "\nMedians of %d alternated runs each. Where the no-op time goes (one more run of each, on %d host(s), "
            "`bench/callback_plugins/task_times.py`: a task's wall time from its start to the next task's):\n\n"
            % (RUNS, noops[-1]["hosts"]),
            "".join("- %s: %d tasks, %.1f s; slowest: %s\n" % (
                name, each["tasks"], each["seconds"], "; ".join("%s %.2f s" % (task, seconds)
                                                                for seconds, task in each["slowest"]))
                    for name, each in noops[-1]["profiles"].items()),
            "\n## The plan of a fleet from recorded probes (controller only)\n\n",
            benchlib.table(["inventory hosts", "seconds", "peak MiB"],
                           [[row["hosts"], "%.3f" % row["seconds"], "%.1f" % row["peak_mib"]] for row in plans], "rrr"),
            "\n## On paper: a first tune of a large fleet\n\n",
            "From the measured per-host restarts (per_host, identical hosts) and Ansible's per-host cost (the 1-host "
            "first tune), a model load of the given minutes per restart, tune_kv.yml's default batches (1 host, then "
            "25% at a time) and `forks` hosts at a time.\n\n",
            "per_class: %d classes, the canaries at once first (their measured restarts), then the members (their "
            "measured restarts) in the same batches.\n\n" % CLASSES,
            benchlib.table(["hosts", "model load min", "forks", "strategy", "restarts", "hours"],
                           [[row["hosts"], row["load_minutes"], row["forks"], row["strategy"], row["restarts"],
                             "%.1f" % row["hours"]] for row in paper], "rrrlrr"),
            "\nAWX / Automation Platform job slicing (N slices: N jobs at once, each with its own forks over 1/N of "
            "the inventory) multiplies the hosts tuned at once by N, as N times the forks would, within one "
            "controller's capacity; each slice plans its own classes, so per_class spends one canary per class per "
            "slice, and a server that spans hosts split across slices is refused (a node outside the run).\n"]
    return "".join(text)


def figure(first, noops, paper):
    import matplotlib   # pylint: disable=import-outside-toplevel
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt   # pylint: disable=import-outside-toplevel
    fig, (left, middle, right) = plt.subplots(1, 3, figsize=(15, 3.5))
    left.plot([row["hosts"] for row in first], [row["ratio"] for row in first], marker="o")
    left.set_xlabel("hosts tuned at once")
    left.set_ylabel("wall time / one host")
    left.set_title("first tune")
    sizes = [row["hosts"] for row in noops]
    middle.plot(sizes, [row["tune_ratio"] for row in noops], marker="o", label="tune_kv.yml")
    middle.plot(sizes, [row["site_ratio"] for row in noops], marker="s", label="site.yml")
    middle.axhline(2, color="black", linewidth=0.5, linestyle=":")
    middle.axhline(5, color="black", linewidth=0.5, linestyle="--")
    middle.set_xlabel("hosts")
    middle.set_ylabel("x ansible -m ping")
    middle.set_title("re-run with nothing to do (targets 2x, 5x)")
    middle.legend()
    for hosts, marker in ((64, "o"), (512, "s")):
        for load in sorted({row["load_minutes"] for row in paper}):
            rows = [row for row in paper if row["hosts"] == hosts and row["load_minutes"] == load
                    and row["strategy"] == "per_host"]
            right.plot([row["forks"] for row in rows], [row["hours"] for row in rows], marker=marker,
                       label="%d hosts, %d min load" % (hosts, load))
    right.set_xticks(sorted({row["forks"] for row in paper}))
    right.set_yscale("log")
    right.set_xlabel("forks")
    per_host = {(row["hosts"], row["load_minutes"], row["forks"]): row["hours"] for row in paper
                if row["strategy"] == "per_host"}
    apart = max(abs(row["hours"] - per_host[(row["hosts"], row["load_minutes"], row["forks"])])
                / per_host[(row["hosts"], row["load_minutes"], row["forks"])]
                for row in paper if row["strategy"] == "per_class")
    right.set_ylabel("hours (per_host; per_class within %.0f%%)" % (100 * apart))
    right.set_title("on paper: first tune of a large fleet")
    right.legend(fontsize=7)
    return fig


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 hosts, one run each")
    options = parser.parse_args()
    global HOSTS, RUNS   # pylint: disable=global-statement
    if options.quick:
        HOSTS, RUNS = 2, 1
    started = time.monotonic()
    with benchlib.sim_hosts(PREFIX, [PROFILE] * HOSTS) as (_tmp, inventory, hosts):
        fleet = Fleet(inventory, hosts)
        log("site.yml on %d hosts" % HOSTS)
        benchlib.playbook(inventory, "playbooks/site.yml", "-f", str(HOSTS))
        sizes = [size for size in (1, 2, 4, 8) if size <= HOSTS]
        first = first_tunes(fleet, sizes)
        noops = noop_reruns(fleet, [size for size in (1, 4, 8) if size <= HOSTS])
        strategy_rows = strategies(fleet)
    plans = planning()
    paper = on_paper(first, strategy_rows)
    seconds = time.monotonic() - started
    name = "fleet-quick" if options.quick else "fleet"
    benchlib.save(name, markdown(first, strategy_rows, noops, plans, paper, seconds),
                  {"machine": benchlib.machine(), "seconds": seconds, "first_tunes": first,
                   "strategies": strategy_rows, "noop_reruns": noops, "planning": plans, "on_paper": paper},
                  figure(first, noops, paper))


if __name__ == "__main__":
    main()

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Convergence: the tuner against SGLang's documented procedure and SGLang's default, on a matrix of simulated
deployments (one host each), measured in one run.

Per deployment, the simulator's oracle (the memory model the simulated server itself runs) gives the largest value
that keeps the tuner's margin under the stress load, on the tuner's grid, and the start values: SGLang's default,
the field's hand-set 0.88, the largest value that starts but dies under the load, and one grid step past the
largest value that starts (an OOM at startup). Then, on every host at once:

1. SGLang's default, untouched: the load on the server as deployed (its pool and whether it holds).
2. The documented procedure: from the default, raise --mem-fraction-static by 0.01 per restart while the server
   starts and survives the same load; keep the last success (one more restart back to it). Every host at its own
   pace, in one playbook (bench/playbooks/documented.yml).
3. For each start value: every host unpinned and restarted on it (a value that cannot start leaves the unit failed),
   then playbooks/tune_kv.yml; restarts, trials, the pinned pool as a share of the oracle's, and a soak of the pin
   (the load for ten trials' worth).

    .venv/bin/python bench/bench_convergence.py [--quick]   # root (systemd-nspawn); `make bench-convergence`
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import yaml

import benchlib
from benchlib import log

PREFIX = "benchconv"
SAFETY_GIB, RESOLUTION, STEP, FIELD_VALUE = 1.0, 0.005, 0.01, 0.88
TRIAL_SECONDS = 3            # kv_tune_stress_duration of inventories/sim
SOAK_SECONDS = 10 * TRIAL_SECONDS
FORKS = "20"

A100 = {"name": "NVIDIA A100-SXM4-80GB", "count": 8, "memory_total_mib": 81920, "memory_reserved_mib": 512,
        "power_limit_w": 400}
B200 = {"name": "NVIDIA B200", "count": 8, "memory_total_mib": 183359, "memory_reserved_mib": 512,
        "power_limit_w": 1000}


def scaled(keys, factor):
    """A host.json change: these memory-model keys times ``factor``."""
    def change(data):
        for key in keys:
            data["memory"][key] = type(data["memory"][key])(data["memory"][key] * factor)
    return change


def setting(key, value):
    def change(data):
        data["memory"][key] = value
    return change


def gpus(spec):
    def change(data):
        data["gpu"] = dict(spec)
        data["pci"] = {"nvswitch_count": 0}
    return change


def occupied(mib_by_gpu):
    def change(data):
        data["faults"] = dict(data.get("faults") or {}, gpu_occupied_mib=mib_by_gpu)
    return change


ACTIVATIONS = ["activation_bytes_per_prefill_token", "activation_bytes_per_decode_token"]
GRAPHS = ["graph_mib_base", "graph_kib_per_token"]
NO_DRAFT = {"speculative_algorithm": None, "speculative_draft_model_path": None}

# (key, profile, what, host.json change or None, server_args changes)
DEPLOYMENTS = [
    ("kimi-k2.5 EAGLE3 TP8 RTX PRO 6000", "field", "MLA int4, bf16 KV, draft", None, {}),
    ("kimi-k2.5 TP8 RTX PRO 6000", "field", "MLA int4, bf16 KV", None, NO_DRAFT),
    ("llama-70b TP8 H100", "h100-llama70b", "GQA, bf16 KV", None, {}),
    ("llama-70b TP4 H100", "h100-llama70b", "GQA, bf16 KV", None, {"tp_size": 4}),
    ("llama-70b TP8 H100 fp8 KV", "h100-llama70b", "GQA, fp8 KV", None, {"kv_cache_dtype": "fp8_e4m3"}),
    ("llama-70b TP8 A100", "h100-llama70b", "GQA, bf16 KV", gpus(A100), {}),
    ("deepseek-v3 TP8 H200 fp8 KV", "h200-deepseek-v3", "MLA fp8, fp8 KV", None, {}),
    ("deepseek-v3 TP8 B200", "h200-deepseek-v3", "MLA fp8, bf16 KV", gpus(B200), {"kv_cache_dtype": None}),
    ("llama-8b TP1 L4", "single-gpu", "GQA, bf16 KV", None, {}),
    ("llama-8b TP1 L4 fp8 KV", "single-gpu", "GQA, fp8 KV", None, {"kv_cache_dtype": "fp8_e5m2"}),
    ("qwen3.5-9b TP1 H100", "single-gpu-hybrid", "hybrid linear attention", None, {}),
    ("llama-70b TP8 H100, activations x0.5", "h100-llama70b", "perturbed", scaled(ACTIVATIONS, 0.5), {}),
    ("llama-70b TP8 H100, activations x2", "h100-llama70b", "perturbed", scaled(ACTIVATIONS, 2), {}),
    ("llama-70b TP8 H100, fragmentation 0.15", "h100-llama70b", "perturbed",
     setting("allocator_fragmentation", 0.15), {}),
    ("llama-70b TP8 H100, CUDA graphs x3", "h100-llama70b", "perturbed", scaled(GRAPHS, 3), {}),
    ("llama-70b TP8 H100, 4 GiB held on GPU 3", "h100-llama70b", "perturbed", occupied({"3": 4096}), {}),
]
QUICK = ["kimi-k2.5 EAGLE3 TP8 RTX PRO 6000", "deepseek-v3 TP8 H200 fp8 KV", "llama-70b TP8 H100, activations x2"]
STARTS = ["default", "field 0.88", "dies under load", "cannot start"]


def server_args_of(group_vars, profile, changes):
    args = dict(group_vars["sim_profiles"][profile]["server_args"])
    for key, value in changes.items():
        if value is None:
            args.pop(key, None)
        else:
            args[key] = value
    return args


def read_results(directory: Path, hosts) -> dict:
    return {host: json.loads((directory / f"{host}.json").read_text()) for host in hosts
            if (directory / f"{host}.json").exists()}


class Bench:
    def __init__(self, inventory, hosts, deployments):
        self.inventory = inventory
        self.rows = {host: {"deployment": d[0], "profile": d[1], "what": d[2]} for host, d in zip(hosts, deployments)}
        self.deployments = dict(zip(hosts, deployments))
        self.group_vars = self._group_vars()
        self.out = benchlib.RunDirs("bench-conv-runs-").new

    def _group_vars(self):
        return yaml.safe_load((self.inventory / "group_vars" / "sim.yml").read_text())

    def host_vars(self, host, value):
        _key, profile, _what, _change, changes = self.deployments[host]
        benchlib.write_host_vars(self.inventory, host, {
            "sglang_service_server_args": server_args_of(self.group_vars, profile, changes),
            "sglang_service_mem_fraction_static": value})

    def deploy(self):
        for host, (_key, _profile, _what, change, _changes) in self.deployments.items():
            if change is not None:
                data = benchlib.read_host_json(host)
                change(data)
                benchlib.write_host_json(host, data)
            self.host_vars(host, None)
        log("site.yml on %d hosts (SGLang's default everywhere)" % len(self.deployments))
        done = benchlib.playbook(self.inventory, "playbooks/site.yml", "-f", FORKS)
        log("deployed in %.0f s" % done.seconds)
        for host in self.deployments:
            args = benchlib.server_args(host)
            verdict = benchlib.oracle(host, args, SAFETY_GIB, RESOLUTION)
            row = self.rows[host]
            row["oracle"] = {key: verdict[key] for key in (
                "max_mem_fraction_static", "max_kv_tokens", "max_start_mem_fraction_static",
                "max_survive_mem_fraction_static", "min_mem_fraction_static")}
            row["oracle"]["default"] = verdict["given"]["mem_fraction_static"]
            row["oracle"]["default_tokens"] = verdict["given"]["kv_tokens"]
            most_start, most_survive = verdict["max_start_mem_fraction_static"], verdict[
                "max_survive_mem_fraction_static"]
            row["starts"] = {
                "default": None, "field 0.88": FIELD_VALUE,
                "dies under load": most_start if most_start and most_survive and most_start > most_survive else "-",
                "cannot start": round(most_start + RESOLUTION, 3) if most_start and most_start < 0.99 else "-",
            }
            log("%s: oracle max %s (%s tokens), default %s, starts up to %s, survives up to %s" % (
                row["deployment"], verdict["max_mem_fraction_static"], verdict["max_kv_tokens"],
                row["oracle"]["default"], most_start, most_survive))

    def default_untouched(self):
        out = self.out("default")
        log("SGLang's default, untouched: the load on every host")
        benchlib.playbook(self.inventory, "bench/playbooks/soak.yml", "-f", FORKS, "-e", f"bench_out={out}",
                          "-e", f"bench_soak_duration={TRIAL_SECONDS}")
        for host, result in read_results(out, self.rows).items():
            self.rows[host]["default"] = {"value": self.rows[host]["oracle"]["default"],
                                          "tokens": result["pool_tokens"], "held": result["held"]}

    def documented(self):
        """SGLang's documented procedure on every host at once, each at its own pace (one playbook, strategy free):
        from the default, one step up per restart while the server starts and survives the load; after the first
        failure, back to the last success (one more restart), then stop."""
        values, start = {}, {}
        for host, row in self.rows.items():
            start[host] = row["oracle"]["default"]
            steps = []
            while row["default"]["held"]:
                value = round(start[host] + STEP * (len(steps) + 1), 3)
                if value >= 0.99:
                    break
                steps.append(value)
            values[host] = steps
        out = self.out("documented")
        log("documented procedure: every host from SGLang's default, %s a step, each at its own pace" % STEP)
        (out / "values.json").write_text(json.dumps({"bench_values": values, "bench_start": start}))
        benchlib.playbook(self.inventory, "bench/playbooks/documented.yml", "-f", FORKS,
                          "-e", f"@{out / 'values.json'}", "-e", f"bench_out={out}")
        for host, row in self.rows.items():
            each = {"last": start[host], "tokens": row["default"]["tokens"], "restarts": 0, "steps": [],
                    "back_held": None}
            for index in range(len(values[host])):
                path = out / ("%s-step-%02d.json" % (host, index))
                if not path.exists():
                    break
                result = json.loads(path.read_text())
                ok = result["ready"] and result["held"]
                each["restarts"] += 1
                each["steps"].append({"value": result["value"], "ok": ok, "tokens": result["pool_tokens"],
                                      "reason": result["reason"]})
                if not ok:
                    break
                each["last"], each["tokens"] = result["value"], result["pool_tokens"]
            back = out / ("%s-back.json" % host)
            if back.exists():
                result = json.loads(back.read_text())
                each["restarts"] += 1
                each["back_held"] = result["ready"] and result["held"]
            row["documented"] = each
            log("documented procedure: %s: %d restarts, last success %s" % (
                row["deployment"], each["restarts"], each["last"]))
        out = self.out("documented-soak")
        log("documented procedure: soaking each host's last success (%d s)" % SOAK_SECONDS)
        benchlib.playbook(self.inventory, "bench/playbooks/soak.yml", "-f", FORKS, "-e", f"bench_out={out}",
                          "-e", f"bench_soak_duration={SOAK_SECONDS}")
        for host, result in read_results(out, self.rows).items():
            self.rows[host]["documented"]["soak"] = result

    def tune_from(self, start):
        hosts = sorted(host for host, row in self.rows.items() if row["starts"][start] != "-")
        for host in hosts:
            self.host_vars(host, self.rows[host]["starts"][start])
        limit = ",".join(hosts)
        out = self.out("reset")
        log("start '%s': every host unpinned and restarted on %s" % (start, ", ".join(
            "%s %s" % (host, self.rows[host]["starts"][start]) for host in hosts)))
        benchlib.reset(self.inventory, hosts, out, FORKS)
        ready = read_results(out, hosts)
        reports = self.out("tune")
        since = {host: benchlib.ssh(host, "date +%s").strip() for host in hosts}
        log("start '%s': tune_kv.yml on %d hosts" % (start, len(hosts)))
        done = benchlib.playbook(self.inventory, "playbooks/tune_kv.yml", "-f", FORKS, "-l", limit,
                                 "-e", f"kv_tune_report_dir={reports}", "-e", '{"kv_tune_serial": "100%"}',
                                 check=False)
        log("start '%s': tune_kv.yml rc %d in %.0f s" % (start, done.rc, done.seconds))
        (reports / "tune_kv.log").write_text(done.stdout)
        starts = {host: unit_starts(host, since[host]) for host in hosts}
        soak = self.out("soak")
        benchlib.playbook(self.inventory, "bench/playbooks/soak.yml", "-f", FORKS, "-l", limit,
                          "-e", f"bench_out={soak}", "-e", f"bench_soak_duration={SOAK_SECONDS}")
        soaks = read_results(soak, hosts)
        for host in hosts:
            path = reports / f"{host}.json"
            report = json.loads(path.read_text()) if path.exists() else {
                "status": "no report", "error": failure_lines(done.stdout, host)}
            oracle = self.rows[host]["oracle"]
            after = report.get("after") or {}
            self.rows[host].setdefault("tuner", {})[start] = {
                "start": self.rows[host]["starts"][start], "started": ready.get(host, {}).get("ready"),
                "status": report.get("status"), "error": report.get("error"),
                "restarts": report.get("restarts"), "unit_starts": starts[host],
                "trials": len(report.get("trials") or []),
                "trial_values": [(t["text"], t["outcome"]) for t in report.get("trials") or []],
                "after": after.get("mem_fraction_static"), "tokens": after.get("tokens"),
                "share": (after.get("tokens") or 0) / oracle["max_kv_tokens"] if oracle["max_kv_tokens"] else None,
                "soak": soaks.get(host), "seconds": done.seconds}


def unit_starts(host, since):
    """Every start of sglang.service since ``since`` (epoch seconds, the host's clock), from its journal: the tuner's
    trials, its reverts and settle steps, and systemd's own restarts after a failure."""
    lines = benchlib.ssh(host, "journalctl -u sglang.service -o cat --no-pager --since @%s" % since).splitlines()
    return sum(1 for line in lines if line.startswith("Started sglang.service"))


def failure_lines(stdout, host):
    """What the run said of a host that wrote no report: its failed tasks' messages."""
    lines = stdout.splitlines()
    found = [" ".join(line.strip() for line in lines[index:index + 4])
             for index, line in enumerate(lines) if line.startswith("fatal: [%s]" % host)]
    return " | ".join(found)[-800:] or "no report and no failed task in the run's output"


def share(tokens, row):
    return None if not tokens or not row["oracle"]["max_kv_tokens"] else tokens / row["oracle"]["max_kv_tokens"]


def pct(value):
    return "-" if value is None else "%.1f%%" % (100 * value)


def soak_text(soak, held):
    free = soak.get("min_free_gib")
    return "%s (%s GiB free)" % ("soak ok" if held else "SOAK FAILED", "-" if free is None else "%.2f" % free)


def summary(rows):
    tunes = [t for row in rows for t in row.get("tuner", {}).values()]
    restarts = [t["restarts"] for t in tunes if t["restarts"] is not None]
    starts = [t["unit_starts"] for t in tunes if t.get("unit_starts") is not None]
    shares = [t["share"] for t in tunes if t["share"] is not None]
    unstable = [t for t in tunes if not (t["soak"] and t["soak"]["held"] and t["soak"]["same_start"])]
    documented = [row["documented"] for row in rows if "documented" in row]
    return {
        "tunes": len(tunes), "pinned": sum(1 for t in tunes if t["status"] in ("tuned", "verified")),
        "restarts_median": statistics.median(restarts) if restarts else None,
        "restarts_worst": max(restarts) if restarts else None,
        "unit_starts_median": statistics.median(starts) if starts else None,
        "unit_starts_worst": max(starts) if starts else None,
        "share_median": statistics.median(shares) if shares else None, "share_worst": min(shares) if shares else None,
        "unstable_pins": len(unstable),
        "documented_restarts_median": statistics.median([d["restarts"] for d in documented]) if documented else None,
        "documented_share_median": statistics.median(
            [share(d["tokens"], row) or 0 for row, d in zip(rows, documented)]) if documented else None,
    }


def markdown(rows, totals, seconds, command):
    text = ["# Convergence: the tuner, SGLang's documented procedure and SGLang's default\n\n",
            "Machine: %s. Command: `%s` (%d simulated deployments, one host each, all at once; margin %.1f GiB, "
            "grid %.3f, %d s of load per trial, soak %d s). Wall time %.0f min.\n"
            % (benchlib.machine(), command, len(rows), SAFETY_GIB, RESOLUTION, TRIAL_SECONDS, SOAK_SECONDS,
               seconds / 60) + "\n",
            "Oracle: the simulator's largest value that keeps the margin under the stress load, on the tuner's grid "
            "(`sglang-sim-oracle`, the memory model the simulated server runs). Share: pinned KV tokens / the "
            "oracle's tokens at that value.\n\n",
            "## Summary\n\n",
            benchlib.table(["measure", "tuner", "target"], [
                ["tunes (deployments x start values)", totals["tunes"], ""],
                ["pinned", totals["pinned"], "all"],
                ["restarts, median", totals["restarts_median"], "1"],
                ["restarts, worst", totals["restarts_worst"], "<= 3"],
                ["unit starts during the tune (journal: the tuner's, its reverts, systemd's), median / worst",
                 "%s / %s" % (totals["unit_starts_median"], totals["unit_starts_worst"]), ""],
                ["token share, median", pct(totals["share_median"]), ">= 99%"],
                ["token share, worst", pct(totals["share_worst"]), ">= 98%"],
                ["unstable pins (soak lost a request or restarted)", totals["unstable_pins"], "0"],
                ["documented procedure: restarts, median", totals["documented_restarts_median"], ""],
                ["documented procedure: token share, median", pct(totals["documented_share_median"]), ""],
            ], "lrr"),
            "\n## Per deployment\n\n",
            "Tuner: restarts (unit starts in the journal) / trials / share of the oracle's tokens / soak (the least "
            "free GPU memory under it), "
            "for each start value (`-`: the deployment has no such value). Documented: restarts to its last "
            "success, its value and share, and its soak: it keeps no margin, so its share can pass 100% of the "
            "oracle's at the tuner's margin while the least free memory under load falls below that margin. "
            "Default: SGLang's default untouched.\n\n"]
    header = ["deployment", "what", "oracle f (tokens)", "default f: share, load"]
    header += ["tuner from %s" % start for start in STARTS] + ["documented: restarts, f, share, soak"]
    body = []
    for row in rows:
        cells = [row["deployment"], row["what"], "%s (%s)" % (row["oracle"]["max_mem_fraction_static"],
                                                              "{:,}".format(row["oracle"]["max_kv_tokens"] or 0))]
        default = row.get("default") or {}
        cells.append("%s: %s, %s" % (row["oracle"]["default"], pct(share(default.get("tokens"), row)),
                                     "holds" if default.get("held") else "FAILS"))
        for start in STARTS:
            tune = row.get("tuner", {}).get(start)
            if tune is None:
                cells.append("-")
                continue
            soak = tune["soak"] or {}
            held = soak.get("held") and soak.get("same_start")
            cells.append("%s: %s -> %s, %s r (%s s) / %s t, %s, %s" % (
                tune["start"] if tune["start"] is not None else "default", tune["status"], tune["after"],
                tune["restarts"], tune.get("unit_starts", "?"), tune["trials"], pct(tune["share"]),
                soak_text(soak, held)))
        doc = row.get("documented") or {}
        soak = doc.get("soak") or {}
        cells.append("%s r, %s, %s, %s" % (doc.get("restarts"), doc.get("last"), pct(share(doc.get("tokens"), row)),
                                           soak_text(soak, soak.get("held") and soak.get("same_start"))))
        body.append(cells)
    text.append(benchlib.table(header, body))
    text.append("\n## Trials of each tune\n\n")
    for row in rows:
        for start in STARTS:
            tune = row.get("tuner", {}).get(start)
            if tune:
                text.append("- %s, from %s: %s%s\n" % (row["deployment"], start, "; ".join(
                    "%s %s" % tuple(trial) for trial in tune["trial_values"]) or "no trial",
                    (" (error: %s)" % tune["error"]) if tune["error"] else ""))
    return "".join(text)


def figure(rows):
    import matplotlib   # pylint: disable=import-outside-toplevel
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt   # pylint: disable=import-outside-toplevel
    names = [row["deployment"] for row in rows]
    positions = range(len(rows))
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(12, 8), sharex=True)
    width = 0.8 / (len(STARTS) + 1)
    for index, start in enumerate(STARTS):
        values = [(row.get("tuner", {}).get(start) or {}).get("restarts") for row in rows]
        top.bar([p + index * width for p in positions], [v if v is not None else 0 for v in values], width,
                label="tuner from %s" % start)
        bottom.bar([p + index * width for p in positions],
                   [100 * ((row.get("tuner", {}).get(start) or {}).get("share") or 0) for row in rows], width,
                   label="tuner from %s" % start)
    doc_index = len(STARTS)
    top.bar([p + doc_index * width for p in positions], [(row.get("documented") or {}).get("restarts") or 0
                                                         for row in rows], width, label="documented procedure",
            color="grey")
    bottom.bar([p + doc_index * width for p in positions],
               [100 * (share((row.get("documented") or {}).get("tokens"), row) or 0) for row in rows], width,
               label="documented procedure", color="grey")
    top.set_ylabel("restarts to a pinned host")
    top.legend(fontsize=7, ncol=3)
    bottom.set_ylabel("KV tokens, % of the oracle's")
    bottom.set_ylim(80, 101)
    bottom.axhline(99, color="black", linewidth=0.5, linestyle=":")
    bottom.set_xticks([p + 0.4 for p in positions])
    bottom.set_xticklabels(names, rotation=60, ha="right", fontsize=7)
    fig.suptitle("Convergence on simulated deployments: tuner vs SGLang's documented procedure")
    return fig


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="three deployments (%s)" % "; ".join(QUICK))
    # To look into one case (not for the published numbers: the results go to a file of their own).
    parser.add_argument("--only", action="append", default=[], metavar="TEXT",
                        help="only the deployments whose name holds TEXT (repeatable)")
    parser.add_argument("--start", action="append", default=[], choices=STARTS,
                        help="only these start values, and neither SGLang's default untouched nor the documented "
                             "procedure (repeatable)")
    options = parser.parse_args()
    deployments = [d for d in DEPLOYMENTS if (not options.quick or d[0] in QUICK)
                   and (not options.only or any(text in d[0] for text in options.only))]
    partial = bool(options.only or options.start)
    started = time.monotonic()
    with benchlib.sim_hosts(PREFIX, [d[1] for d in deployments]) as (_tmp, inventory, hosts):
        bench = Bench(inventory, hosts, deployments)
        bench.deploy()
        if not options.start:
            bench.default_untouched()
            bench.documented()
        for start in options.start or STARTS:
            bench.tune_from(start)
    rows = [bench.rows[host] for host in hosts]
    totals = summary(rows)
    seconds = time.monotonic() - started
    name = "convergence-partial" if partial else "convergence-quick" if options.quick else "convergence"
    command = ("bench/bench_convergence.py " + " ".join(sys.argv[1:]) if partial
               else "make bench-quick" if options.quick else "make bench-convergence")
    benchlib.save(name, markdown(rows, totals, seconds, command),
                  {"machine": benchlib.machine(), "seconds": seconds, "summary": totals, "deployments": rows,
                   "settings": {"safety_gib": SAFETY_GIB, "resolution": RESOLUTION, "trial_seconds": TRIAL_SECONDS,
                                "soak_seconds": SOAK_SECONDS, "documented_step": STEP}},
                  figure(rows))


if __name__ == "__main__":
    main()

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Measure the tuner end to end on simulated hosts: four hosts (field, H100 + Llama-3.1-70B, H200 + DeepSeek-V3, one
GPU + Llama-3.1-8B) deployed by site.yml, then playbooks/tune_kv.yml twice. Per host: before -> after, KV tokens,
restarts, trials, the simulator oracle's largest value at the same margin and grid; the wall time of both runs; and
what a re-run that finds nothing to do costs next to `ansible all -m ping` on the same inventory (median of RUNS).

    .venv/bin/python bench/bench_tune.py      # needs root (systemd-nspawn); `make bench-tune` writes bench/results-tune.md
"""
from __future__ import annotations

import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SIMHOSTS = [sys.executable, str(REPO / "tools" / "simhosts" / "simhosts.py")]
PREFIX = "benchtune"
PROFILES = ["field", "h100-llama70b", "h200-deepseek-v3", "single-gpu"]
RUNS = 7
SAFETY_GIB, RESOLUTION = 1.0, 0.005


def run(argv, **kwargs):
    return subprocess.run(argv, capture_output=True, text=True, check=True, **kwargs)


def ssh(host, command):
    return run(SIMHOSTS + ["ssh", host, "--", command]).stdout


def oracle_max(host):
    pid = ssh(host, "systemctl show --property=MainPID --value sglang.service").strip()
    argv = [word for word in ssh(host, f"cat /proc/{pid}/cmdline").split("\0") if word]
    args = argv[argv.index("-m") + 2:]
    index = args.index("--mem-fraction-static")
    del args[index:index + 2]
    out = ssh(host, " ".join(["/opt/sglang-sim/bin/sglang-sim-oracle", "--host", "/etc/sglang-sim/host.json", *args,
                              "--safety-gib", str(SAFETY_GIB), "--resolution", str(RESOLUTION)]))
    return json.loads(out)["max_mem_fraction_static"]


ENV = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), PATH=f"{BIN}:{os.environ['PATH']}")


def timed(argv):
    started = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, env=ENV, check=False)
    if proc.returncode != 0:
        sys.exit(f"{argv} failed:\n{proc.stdout[-4000:]}{proc.stderr[-2000:]}")
    return time.monotonic() - started, proc.stdout


def playbook(inventory, name, reports):
    # All four hosts at once, as before the canary batches became the default: the bench measures the tuner, and
    # a re-run with nothing to do never reaches the batches.
    return timed([str(BIN / "ansible-playbook"), "-i", str(inventory), str(REPO / "playbooks" / name),
                  "-e", f"kv_tune_report_dir={reports}", "-e", '{"kv_tune_serial": "100%"}'])


def trial_free(trial):
    return "" if trial["min_free_gib"] is None else ", %.2f" % trial["min_free_gib"]


def main():
    tmp = Path(tempfile.mkdtemp(prefix="bench-tune-"))
    inventory = tmp / "inventory"   # a directory of its own: Ansible reads every file in it as inventory
    shutil.copytree(REPO / "inventories" / "sim" / "group_vars", inventory / "group_vars")
    wheelhouse = os.environ.get("SIM_WHEELHOUSE", str(REPO / ".tmp" / "wheelhouse"))
    run(SIMHOSTS + ["up", "--count", str(len(PROFILES)), "--prefix", PREFIX, "--profile", ",".join(PROFILES),
                    "--inventory", str(inventory / "hosts.yml"), "--wheelhouse", wheelhouse])
    try:
        playbook(inventory, "site.yml", tmp / "reports")
        first = playbook(inventory, "tune_kv.yml", tmp / "reports")[0]
        second, out = playbook(inventory, "tune_kv.yml", tmp / "reports-again")
        # Alternate the two so that a busy moment of the machine hits both alike.
        pings, noops = [], []
        for _run in range(RUNS):
            pings.append(timed([str(BIN / "ansible"), "all", "-i", str(inventory), "-m", "ansible.builtin.ping"])[0])
            noops.append(playbook(inventory, "tune_kv.yml", tmp / "reports-again")[0])
        rows = []
        for index, profile in enumerate(PROFILES, start=1):
            host = f"{PREFIX}{index}"
            report = json.loads((tmp / "reports" / f"{host}.json").read_text())
            rows.append((profile, report, oracle_max(host)))
        recap = [line for line in out.splitlines() if line.startswith(PREFIX) and " : ok=" in line]
        changed = [line for line in recap if "changed=0" not in line]
    finally:
        run(SIMHOSTS + ["down", "--prefix", PREFIX])
        shutil.rmtree(tmp, ignore_errors=True)

    print("# Tuner on simulated hosts: measured\n")
    print("Machine: %s, %d cores, Python %s. Command: `make bench-tune` (four simulated hosts, tune_kv.yml twice; "
          "safety margin %.1f GiB, grid %.3f, %s s of load per trial).\n"
          % (platform.machine(), os.cpu_count(), platform.python_version(), SAFETY_GIB, RESOLUTION, "3"))
    print("| profile | before | after | oracle max | KV tokens before -> after | restarts | trials (f: outcome, min free GiB) |")
    print("|---|---:|---:|---:|---|---:|---|")
    for profile, report, truth in rows:
        trials = "; ".join("%s: %s%s" % (t["text"], t["outcome"], trial_free(t)) for t in report["trials"])
        before, after = report["before"], report["after"]
        gain = 100.0 * (after["tokens"] - before["tokens"]) / before["tokens"]
        print("| %s | %.3f | %.3f | %.3f | %s -> %s (%+.0f%%) | %d | %s |" % (
            profile, before["mem_fraction_static"], after["mem_fraction_static"], truth,
            "{:,}".format(before["tokens"]), "{:,}".format(after["tokens"]), gain, report["restarts"], trials))
    note = " (CHANGED on the second run: %s)" % changed if changed else ""
    print("\nWall time of `tune_kv.yml` on the four hosts at once: first run %.1f s; second run (fingerprints "
          "unchanged, nothing restarted) %.1f s%s." % (first, second, note))
    ping, noop = statistics.median(pings), statistics.median(noops)
    print("\nA re-run with nothing to do, against `ansible all -m ansible.builtin.ping` on the same four hosts "
          "(median of %d runs each, alternated): `tune_kv.yml` %.2f s, ping %.2f s: %.2fx ping "
          "(runs: tune %s; ping %s)." % (RUNS, noop, ping, noop / ping, ", ".join("%.2f" % t for t in noops),
                                         ", ".join("%.2f" % t for t in pings)))


if __name__ == "__main__":
    main()

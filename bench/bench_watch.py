# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The headroom watch's own cost on a simulated 8-GPU host (8x H100, Llama-3.1-70B, TP8) under production-like
traffic: its CPU (the watch process's user and system time with its reaped children's, nvidia-smi, systemctl and
journalctl, from /proc/<pid>/stat, over the run, as a share of one core; the simulated hosts' cgroups keep no CPU
accounting), its memory (the process's VmRSS and VmHWM at the end) and what it writes (the bytes of its windows, per
day at its default window of 5 minutes, and the process's write_bytes).

The watch samples at its default interval (5 s) and, in a second run, every second; each run lasts --minutes with
sglang-sim-traffic bursts filling the pool. On a real host its nvidia-smi fallback runs NVIDIA's nvidia-smi; here it
runs the simulator's, a Python program, so the CPU measured is an upper bound of what the sampling costs.

    .venv/bin/python bench/bench_watch.py [--minutes 3]      # root (systemd-nspawn); `make bench-watch`
"""
from __future__ import annotations

import argparse
import json
import time

import benchlib
from benchlib import log

PREFIX = "benchwatch"
PROFILE = "h100-llama70b"
HOST = f"{PREFIX}1"
WATCH = "llmserve-kv-watch-sglang.service"
STATE = "/var/lib/llmserve-kv-watch-sglang/windows.jsonl"
DEFAULT_WINDOW_S = 300


def show(prop: str) -> str:
    return benchlib.ssh(HOST, f"systemctl show -p {prop} --value {WATCH}").strip()


def proc(pid: str, path: str) -> dict:
    found = {}
    for line in benchlib.ssh(HOST, f"cat /proc/{pid}/{path}").splitlines():
        key, _colon, value = line.partition(":")
        found[key.strip()] = value.strip()
    return found


def cpu_seconds(pid: str) -> float:
    """utime + stime + cutime + cstime of the process, in seconds."""
    fields = benchlib.ssh(HOST, f"cat /proc/{pid}/stat").rsplit(")", 1)[1].split()
    ticks = int(benchlib.ssh(HOST, "getconf CLK_TCK"))
    return sum(int(value) for value in fields[11:15]) / ticks


def measure(inventory, interval: float, minutes: float) -> dict:
    window = 60.0
    benchlib.playbook(inventory, "playbooks/site.yml", "--tags", "sglang_service", "-e", "sglang_service_kv_watch=true",
                      "-e", f"sglang_service_kv_watch_interval={interval}", "-e", f"sglang_service_kv_watch_window={window}")
    benchlib.ssh(HOST, f"systemctl stop {WATCH} && truncate -s 0 {STATE}; systemctl start {WATCH}")
    time.sleep(3)
    pid = show("MainPID")
    cpu0, wall0 = cpu_seconds(pid), time.monotonic()
    io0 = int(proc(pid, "io")["write_bytes"])
    log("interval %s s: %.1f min of traffic" % (interval, minutes))
    traffic = json.loads(benchlib.ssh(HOST, "/opt/sglang-sim/bin/sglang-sim-traffic --url http://127.0.0.1:30000 "
                                            f"--seconds {int(minutes * 60)} --fill 1.1 --burst-every 5 --seed 3"))
    cpu1, wall1 = cpu_seconds(pid), time.monotonic()
    status = proc(pid, "status")
    io1 = int(proc(pid, "io")["write_bytes"])
    lines = [line for line in benchlib.ssh(HOST, f"cat {STATE}").splitlines() if line.strip()]
    line_bytes = sum(len(line) + 1 for line in lines) / max(1, len(lines))
    row = {"interval_s": interval, "seconds": wall1 - wall0, "requests": traffic["sent"],
           "cpu_percent": 100.0 * (cpu1 - cpu0) / (wall1 - wall0),
           "rss_mib": int(status["VmRSS"].split()[0]) / 1024.0, "peak_rss_mib": int(status["VmHWM"].split()[0]) / 1024.0,
           "windows": len(lines), "bytes_per_window": line_bytes,
           "bytes_per_day": line_bytes * 86400 / DEFAULT_WINDOW_S,
           "write_bytes_per_hour": (io1 - io0) * 3600.0 / (wall1 - wall0),
           "errors": sorted({key for line in lines for key in json.loads(line).get("errors", {})})}
    log("  CPU %.2f%% of a core, RSS %.1f MiB (peak %.1f), %.0f bytes a window: %.0f KiB a day at 5-minute windows"
        % (row["cpu_percent"], row["rss_mib"], row["peak_rss_mib"], line_bytes, row["bytes_per_day"] / 1024))
    return row


def markdown(rows, seconds) -> str:
    table = benchlib.table(
        ["sample every", "CPU, % of one core", "RSS MiB (peak)", "bytes a window",
         "state file a day (5-min windows)", "written an hour (process; 1-min windows here)", "errors"],
        [["%g s" % row["interval_s"], "%.2f" % row["cpu_percent"], "%.1f (%.1f)" % (row["rss_mib"], row["peak_rss_mib"]),
          "%.0f" % row["bytes_per_window"],
          "%.0f KiB" % (row["bytes_per_day"] / 1024), "%.0f KiB" % (row["write_bytes_per_hour"] / 1024),
          ", ".join(row["errors"]) or "none"] for row in rows], "lrrrrrl")
    return ("# The headroom watch's cost\n\n%s, %s simulated host (8 GPUs), production-like traffic, %.0f s in all.\n\n"
            "%s\nThe state file keeps 4032 windows by default (14 days): about %.1f MiB. The CPU includes the simulator's "
            "nvidia-smi (a Python program here, NVIDIA's C program on a real host).\n"
            % (benchlib.machine(), PROFILE, seconds, table, rows[0]["bytes_per_window"] * 4032 / 2 ** 20))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=3.0)
    options = parser.parse_args()
    started = time.monotonic()
    with benchlib.sim_hosts(PREFIX, [PROFILE]) as (_tmp, inventory, _hosts):
        log("site.yml with the watch")
        benchlib.playbook(inventory, "playbooks/site.yml", "-e", "sglang_service_kv_watch=true")
        rows = [measure(inventory, interval, options.minutes) for interval in (5, 1)]
    seconds = time.monotonic() - started
    benchlib.save("watch", markdown(rows, seconds), {"machine": benchlib.machine(), "seconds": seconds, "rows": rows})


if __name__ == "__main__":
    main()

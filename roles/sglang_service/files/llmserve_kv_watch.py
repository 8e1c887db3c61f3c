# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The headroom watch of one SGLang unit, installed by the role llmserve.sglang.sglang_service (sglang_service_kv_watch)
and run by llmserve-kv-watch-<unit>.service:

    python3 llmserve_kv_watch.py --unit sglang.service --url http://127.0.0.1:30000/metrics \
        --state /var/lib/llmserve-kv-watch-sglang/windows.jsonl

Every --interval seconds: the unit's GPUs (NVML, else nvidia-smi), its /metrics and systemd's view of it; at the end
of each --window, one line of JSON in the state file (at most --keep lines) and, with --textfile-dir, the verdict on the
pin and its numbers as Prometheus metrics for node_exporter's textfile collector. The logic is the collection's
module_utils/watch/ (sampler.py, exposition.py), installed beside this script; this file only reads the host.
"""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time

# The collection's module_utils, installed beside this script (root's, like the script).
LIBRARY = os.path.dirname(os.path.realpath(__file__))
sys.path.insert(0, LIBRARY)

# pylint: disable=wrong-import-position
from ansible_collections.llmserve.sglang.plugins.module_utils.host import gpu_probe, host_commands, host_files
from ansible_collections.llmserve.sglang.plugins.module_utils.service import kv_pin
from ansible_collections.llmserve.sglang.plugins.module_utils.watch import exposition, sampler, settings, store
from ansible_collections.llmserve.sglang.plugins.module_utils.watch.metrics import fetch_metrics  # noqa: E402

C_LOCALE = dict(os.environ, **host_commands.C_LOCALE)


def run(argv, timeout=10):
    result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=C_LOCALE, check=False)
    return result.returncode, result.stdout, result.stderr


class Sources:
    """What the watch reads of the host, each a call sampler.Watcher makes (and counts when it fails)."""

    def __init__(self, unit, url, prefer):
        self.unit_name, self.url = unit, url
        self.sample_gpus = gpu_probe.free_memory_sampler(run_command=run, prefer=prefer, processes=True)

    def unit(self):
        code, out, err = run(["systemctl", "show", self.unit_name,
                              "--property=ActiveState,MainPID,InvocationID,ControlGroup,DropInPaths"])
        if code != 0:
            raise RuntimeError("systemctl show %s failed (rc %d): %s" % (self.unit_name, code, err.strip()))
        state = host_commands.parse_show(out)
        if state.get("ActiveState") not in ("active", "activating", "reloading") or state.get("MainPID") in (None, "", "0"):
            return None
        # The tuner's trial drop-in loaded: the server runs a trial (its load, or a value not verified yet).
        trial = kv_pin.paths(self.unit_name)["trial"] in (state.get("DropInPaths") or "").split()
        return {"invocation": state.get("InvocationID") or None, "main_pid": int(state["MainPID"]),
                "control_group": state.get("ControlGroup") or None, "trial": trial}

    @staticmethod
    def pids(control_group):
        return (host_files.unit_pids(control_group) or set()) if control_group else set()

    @staticmethod
    def argv(pid):
        return host_files.process_argv(pid)

    def gpus(self):
        return self.sample_gpus()

    def metrics(self):
        # No redirect followed, at most 4 MiB in 5 s, errors in the watch's own words (metrics.fetch_metrics).
        return fetch_metrics(self.url)


def exporter(args, textfile):
    """What the watch does after each window with --textfile-dir: its windows and the tuner's pin, judged, as metrics
    in ``textfile``."""
    def export():
        records, _unreadable = store.read_records(args.state)
        try:
            with open(args.fact_path, encoding="utf-8") as handle:
                fact_text = handle.read()
        except FileNotFoundError:
            fact_text = None      # not tuned yet: no pin to judge
        metrics = exposition.unit_samples(
            args.unit, fact_text, args.fact_path, records, args.window, full_usage=args.full_usage,
            headroom_hours=args.headroom_hours, headroom_steps=args.headroom_steps,
            storm_retractions=args.storm_retractions)
        exposition.write_textfile(textfile, metrics)
    return export


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--unit", required=True)
    parser.add_argument("--url", required=True, help="the server's /metrics")
    parser.add_argument("--state", required=True)
    parser.add_argument("--interval", type=float, default=5.0)
    parser.add_argument("--window", type=float, default=300.0)
    parser.add_argument("--keep", type=int, default=4032)
    parser.add_argument("--prefer", default="auto", choices=gpu_probe.PREFER_CHOICES)
    parser.add_argument("--textfile-dir", help="node_exporter's textfile directory, where the watch writes "
                                               "llmserve_kv_<unit>.prom after each window (none: no metrics)")
    parser.add_argument("--fact-path", default=kv_pin.FACT_PATH, help="the tuner's pins, which the verdict judges")
    parser.add_argument("--full-usage", type=float, default=settings.FULL_USAGE)
    parser.add_argument("--headroom-hours", type=float, default=24.0)
    parser.add_argument("--headroom-steps", type=int, default=2)
    parser.add_argument("--storm-retractions", type=int, default=20)
    args = parser.parse_args(argv)
    try:
        # The ranges of settings.BOUNDS (keep 0 would let the state file grow without bound), before anything runs.
        settings.check_settings({"interval": args.interval, "window": args.window, "keep": args.keep,
                                 "full_usage": args.full_usage, "headroom_hours": args.headroom_hours,
                                 "headroom_steps": args.headroom_steps, "storm_retractions": args.storm_retractions},
                                prefix="--")
        textfile = os.path.join(args.textfile_dir, exposition.textfile_name(args.unit)) if args.textfile_dir else None
    except settings.WatchError as exc:
        parser.error(str(exc))
    url = args.url
    watcher = sampler.Watcher(args.unit, Sources(args.unit, url, args.prefer), args.state, args.interval,
                              args.window, args.keep, log=lambda line: print(line, flush=True),
                              on_window=exporter(args, textfile) if textfile else None)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print("watching %s (%s) every %ss, a window every %ss, into %s%s"
          % (args.unit, url, args.interval, args.window, args.state,
             " and %s" % textfile if textfile else ""), flush=True)
    while not stop.is_set():
        started = time.monotonic()
        watcher.step(time.time())
        stop.wait(max(0.0, args.interval - (time.monotonic() - started)))
    if watcher.window is not None and watcher.window.samples:
        watcher.close(time.time())     # the last, shorter window: a restart of the watch loses nothing
    return 0


if __name__ == "__main__":
    sys.exit(main())

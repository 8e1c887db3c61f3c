# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Stand-ins the headroom watch's tests share: a scripted host (the watch's sources) and its watcher, and windows
since a pin (a day of them at a full pool)."""
from __future__ import annotations

from ansible_collections.llmserve.sglang.plugins.module_utils.watch import sampler


GIB = 2 ** 30


RETRACT = "KV cache pool is full. Retract requests. #retracted_reqs: %s"


METRICS = ('# TYPE sglang:token_usage gauge\nsglang:token_usage{tp_rank="0"} %s\n'
           '# TYPE sglang:max_total_num_tokens gauge\nsglang:max_total_num_tokens{tp_rank="0"} 1000\n'
           '# TYPE sglang:num_retracted_requests counter\nsglang:num_retracted_requests_total{tp_rank="0"} %d\n')


class Host:
    """Scripted sources: what each call answers is the current state, which the test changes between steps."""

    def __init__(self):
        self.invocation, self.unit_pids, self.usage, self.retracted, self.free = "a", {101, 102}, 0.95, 0, 1.5
        self.metrics_text = None
        self.trial = False

    def unit(self):
        return None if self.invocation is None else {"invocation": self.invocation, "main_pid": 101,
                                                     "control_group": "/system.slice/sglang.service",
                                                     "trial": self.trial}

    def pids(self, _group):
        return set(self.unit_pids)

    def argv(self, _pid):
        return ["python3", "-m", "sglang.launch_server", "--mem-fraction-static", "0.9"]

    def metrics(self):
        if self.metrics_text is not None:
            return self.metrics_text
        return METRICS % (self.usage, self.retracted)

    def gpus(self):
        def gpu(index, processes):
            return {"index": index, "memory_free_bytes": int(self.free * GIB), "memory_total_bytes": 80 * GIB,
                    "compute_processes": processes}
        return [gpu(0, [{"pid": 101, "used_memory_bytes": 70 * GIB}]),
                gpu(1, [{"pid": 102, "used_memory_bytes": 70 * GIB}, {"pid": 999, "used_memory_bytes": 2 * GIB}]),
                gpu(2, [{"pid": 500, "used_memory_bytes": 9 * GIB}])]   # another server's GPU


def _watcher(tmp_path, host, said=None):
    return sampler.Watcher("sglang.service", host, str(tmp_path / "windows.jsonl"), interval=1, window=3, keep=100,
                           log=(said.append if said is not None else None))


PIN = {"mem_fraction_static": 0.9, "time": 1000.0, "settings": {"safety_gib": 1.0, "resolution": 0.005}}


def _window(end, least_full=None, least=None, full_seconds=3600.0, value=0.9, **extra):
    full = {"seconds": full_seconds, "least_free_gib": least_full, "gpu": 3}
    record = {"v": 1, "start": end - 3600, "end": end, "value": value,
              "least_free_gib": least if least is not None else least_full, "least_free_gpu": 3,
              "usage_at_least_free": 0.97, "bands": {"0.9": full, "0.95": full},
              "gpus": {"3": {"total_gib": 80.0, "others_peak_gib": 0.0}}, "peaks": {"token_usage": 0.97},
              "invocations": ["a"]}
    record.update(extra)
    return record


def _day(least_full, **extra):
    return [_window(PIN["time"] + (hour + 1) * 3600, least_full=least_full, **extra) for hour in range(24)]

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What processes outside a server hold on its GPUs while it starts (sglang_ready) or while it is loaded
(kv_stress): a thread that samples the GPUs' compute processes and the units' cgroups, folded by
boot_trust.add_sample. Memory another process takes or gives back there moves under what the tuner measures."""
from __future__ import annotations

import threading
from typing import Any, Callable, Iterable

from ansible_collections.llmserve.sglang.plugins.module_utils.startup import boot_trust
from ansible_collections.llmserve.sglang.plugins.module_utils.host import host_files
from ansible_collections.llmserve.sglang.plugins.module_utils.host.gpu_fields import GpuProbeError
from ansible_collections.llmserve.sglang.plugins.module_utils.host.gpu_probe import free_memory_sampler
from ansible_collections.llmserve.sglang.plugins.module_utils.host.host_commands import (
    C_LOCALE, SystemctlError, unit_properties)

# Once a second: a start or a load lasts minutes, and each nvidia-smi sample costs the host a process start.
WATCH_INTERVAL_S = 1.0


class Watch(threading.Thread):
    """While a server starts or is loaded: what processes outside its unit (``control_groups[0]``) and its neighbours'
    (the others) hold on its GPUs (boot_trust.add_sample). The units' processes are their cgroups', read at every
    sample, as a server forks its ranks while it starts."""

    def __init__(self, sample: Callable[[], list[dict[str, Any]]], gpus: Iterable[int],
                 control_groups: Iterable[str | None], interval: float | None = None) -> None:
        super().__init__(daemon=True)
        self.interval = WATCH_INTERVAL_S if interval is None else interval
        self.sample, self.gpus, self.control_groups = sample, set(gpus), [group for group in control_groups if group]
        self.seen: dict[int, dict[str, Any]] = {}
        self.samples = 0
        self.error: str | None = None
        self.known: set[int] = set()
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            try:
                pids = host_files.unit_pids(self.control_groups[0]) if self.control_groups else None
                if pids is not None:   # None: between two starts, nothing of the unit runs to tell apart
                    for group in self.control_groups[1:]:
                        pids |= host_files.unit_pids(group) or set()
                    # Once a unit's, a process stays its own: one that is exiting leaves the cgroup while NVML may
                    # still list its memory for a moment.
                    self.known |= pids
                    boot_trust.add_sample(self.seen, self.sample(), self.gpus, self.known)
                    self.samples += 1
            except (OSError, GpuProbeError) as exc:
                self.error = str(exc)
                return
            self.done.wait(self.interval)

    def result(self) -> dict[str, Any]:
        self.done.set()
        self.join(5)
        seen = [dict({key: value for key, value in entry.items() if key != "unlisted_last_bytes"},
                     processes=sorted(entry["processes"].values(), key=lambda proc: proc["pid"]))
                for _index, entry in sorted(self.seen.items())]
        return {"other_memory_seen": seen if self.samples else None,
                "watch": {"samples": self.samples, "error": self.error}}


def control_group(module: Any, unit: str) -> str | None:
    """A unit's ControlGroup property, None when it cannot be read."""
    try:
        return unit_properties(module, unit, ["ControlGroup"]).get("ControlGroup") or None
    except SystemctlError:
        return None


def start_watch(module: Any, gpus: Iterable[int], units: Iterable[str], interval: float | None = None) -> Watch:
    """A started Watch of ``gpus`` whose servers are ``units`` (the first one's and its neighbours'), sampled through
    the module's nvidia_smi and prefer options every ``interval`` seconds (WATCH_INTERVAL_S)."""
    params = module.params

    def run_command(argv: list[str]) -> tuple[int, str, str]:
        return module.run_command(argv, environ_update=C_LOCALE)

    sample = free_memory_sampler(run_command=run_command, nvidia_smi=params.get("nvidia_smi"),
                                 prefer=params.get("prefer") or "auto", which=module.get_bin_path, processes=True)
    watch = Watch(sample, gpus, [control_group(module, unit) for unit in units], interval)
    watch.start()
    return watch

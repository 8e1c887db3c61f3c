# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpu_watch: what processes outside a server and its neighbours hold on its GPUs, sample by sample."""
from __future__ import annotations

from ansible_collections.llmserve.sglang.plugins.module_utils.host import gpu_watch


def gpu(index, *procs, used=None):
    """A GPU dict as gpu_probe gives it: its listed processes ((pid, bytes) each) and its memory.used (None: not
    known)."""
    return {"index": index, "memory_used_bytes": used,
            "compute_processes": [{"pid": pid, "name": "python3", "used_memory_bytes": held} for pid, held in procs]}


UNKNOWN = {"unlisted_min_bytes": None, "unlisted_max_bytes": None}   # no totals in the samples


def scripted(samples, error):
    """A sampler that answers ``samples`` in turn, then fails as nvidia-smi would (which ends the watch)."""
    def sample():
        try:
            return next(samples)
        except StopIteration:
            raise gpu_watch.GpuProbeError(error) from None
    return sample


def test_the_start_watch_reads_the_units_cgroup_at_every_sample(monkeypatch):
    # The server forks its ranks as it starts: pid 101 is the server's from the second sample on, 91000 never. From
    # the second sample on, 1 GiB of the GPU's memory is no listed process's.
    samples = iter([[gpu(0, (101, 2 ** 30), used=2 ** 30)],
                    [gpu(0, (101, 2 ** 30), (91000, 2 ** 32), used=6 * 2 ** 30)],
                    [gpu(0, (101, 2 ** 31), used=3 * 2 ** 30)]])
    cgroups = iter([None, {100}, {100, 101}, {100, 101}])
    monkeypatch.setattr(gpu_watch.host_files, "unit_pids", lambda group: next(cgroups, {100, 101}))

    sample = scripted(samples, "nvidia-smi is gone")

    watch = gpu_watch.Watch(sample, [0], ["/system.slice/sglang.service"], interval=0)
    watch.start()
    watch.join(5)   # it stops at the first error
    assert watch.result() == {
        "other_memory_seen": [{"gpu": 0, "min_bytes": 0, "max_bytes": 2 ** 32,
                               "unlisted_min_bytes": 2 ** 30, "unlisted_max_bytes": 2 ** 30,
                               "processes": [{"pid": 101, "name": "python3", "max_bytes": 2 ** 30},
                                             {"pid": 91000, "name": "python3", "max_bytes": 2 ** 32}]}],
        "watch": {"samples": 3, "error": "nvidia-smi is gone"}}


def test_a_watch_without_a_sample_says_nothing_was_seen(monkeypatch):
    monkeypatch.setattr(gpu_watch.host_files, "unit_pids", lambda group: None)
    watch = gpu_watch.Watch(lambda: [], [0], ["/system.slice/sglang.service"])
    watch.start()
    assert watch.result() == {"other_memory_seen": None, "watch": {"samples": 0, "error": None}}


def test_the_neighbours_that_share_the_gpus_count_as_the_servers(monkeypatch):
    groups = {"/system.slice/system-sglang.slice/sglang@a.service": {100},
              "/system.slice/system-sglang.slice/sglang@b.service": {200}}
    monkeypatch.setattr(gpu_watch.host_files, "unit_pids", groups.get)
    samples = iter([[gpu(0, (100, 2 ** 34), (200, 50 * 2 ** 30), (91000, 2 ** 30))]])

    sample = scripted(samples, "done")

    watch = gpu_watch.Watch(sample, [0], list(groups), interval=0)
    watch.start()
    watch.join(5)
    seen = watch.result()["other_memory_seen"]
    assert seen == [dict(UNKNOWN, gpu=0, min_bytes=2 ** 30, max_bytes=2 ** 30,
                         processes=[{"pid": 91000, "name": "python3", "max_bytes": 2 ** 30}])]


def test_a_process_that_left_the_units_cgroup_is_still_the_units(monkeypatch):
    # The old server exits during a restart: out of the cgroup first, its memory listed by NVML a moment longer.
    cgroups = iter([{100}, {200}])
    monkeypatch.setattr(gpu_watch.host_files, "unit_pids", lambda group: next(cgroups, {200}))
    samples = iter([[gpu(0, (100, 2 ** 35))], [gpu(0, (100, 2 ** 35), (200, 2 ** 30))]])

    sample = scripted(samples, "done")

    watch = gpu_watch.Watch(sample, [0], ["/system.slice/sglang.service"], interval=0)
    watch.start()
    watch.join(5)
    assert watch.result()["other_memory_seen"] == [dict(UNKNOWN, gpu=0, min_bytes=0, max_bytes=0, processes=[])]

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sampler: the windows the watch folds its samples into, and the watcher's loop against scripted sources (a server
that restarts, garbage on /metrics, a full disk)."""
from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest

from ansible_collections.llmserve.sglang.plugins.module_utils.watch import sampler, store
from ansible_collections.llmserve.sglang.plugins.module_utils.watch import settings as watch_settings
from ansible_collections.llmserve.sglang.plugins.module_utils.watch.verdict import verdict
from ansible_collections.llmserve.sglang.tests.unit.plugins.module_utils.watch.watch_standins import (
    GIB,
    Host,
    PIN,
    _watcher,
)


@pytest.mark.parametrize("argv, value", [
    (["python3", "-m", "sglang.launch_server", "--mem-fraction-static", "0.915"], 0.915),
    (["python3", "--mem-fraction-static=0.9"], 0.9),
    (["python3", "--port", "30000"], None),
    (["python3", "--mem-fraction-static"], None),
])
def test_the_running_value_is_read_from_the_command_line(argv, value):
    assert sampler.fraction_of_argv(argv) == value


def _gpu(index, free_gib, others_gib=0.0, total_gib=80.0):
    return {"index": index, "free_bytes": int(free_gib * GIB), "total_bytes": int(total_gib * GIB),
            "others_bytes": int(others_gib * GIB)}


def test_a_window_keeps_the_least_free_memory_while_serving_and_per_band_of_usage():
    window = sampler.Window("sglang.service", 1000.0, 5)
    window.add(gpus=[_gpu(0, 0.4), _gpu(1, 0.3)], metrics=None, invocation="a")        # starting: not counted
    window.add(gpus=[_gpu(0, 2.0), _gpu(1, 1.5, others_gib=0.5)],
               metrics={"token_usage": 0.95, "used_tokens": 950, "running": 8, "queue": 1, "pool_tokens": 1000},
               invocation="a", value=0.91, retracted_since=2)
    window.add(gpus=[_gpu(0, 1.2), _gpu(1, 1.8)], metrics={"token_usage": 0.6, "pool_tokens": 1000}, invocation="a")
    record = window.record(1300.0)
    assert (record["least_free_gib"], record["least_free_gpu"], record["usage_at_least_free"]) == (1.2, 0, 0.6)
    assert record["bands"]["0.95"] == {"seconds": 5, "least_free_gib": 1.5, "gpu": 1}
    assert record["bands"]["0.6"] == {"seconds": 10, "least_free_gib": 1.2, "gpu": 0}
    assert record["gpus"]["1"] == {"least_free_gib": 1.5, "usage_then": 0.95, "total_gib": 80.0,
                                   "others_peak_gib": 0.5}
    assert (record["samples"], record["serving_samples"]) == (3, 2)
    assert record["peaks"] == {"token_usage": 0.95, "used_tokens": 950, "running": 8, "queue": 1}
    assert (record["value"], record["pool_tokens"], record["retractions"]) == (0.91, 1000, 2)
    assert record["retract_lines"] == record["oom_lines"] == 0   # the journal is root's to read, not the watch's


def test_records_are_json():
    window = sampler.Window("sglang.service", 0.0, 5)
    window.add(gpus=[_gpu(0, 1.0)], metrics={"token_usage": 0.95})
    assert json.loads(json.dumps(window.record(5.0)))["bands"]["0.9"]["least_free_gib"] == 1.0


def test_a_window_of_a_crash_looping_server_stays_under_the_line_limit_and_its_restarts_count(tmp_path):
    # A server that restarts every sample: every start's InvocationID, an OOM line each, a long error.
    window = sampler.Window("sglang.service", PIN["time"] + 10, 0.5)
    for start in range(600):
        window.add(gpus=[_gpu(index, 30.0) for index in range(8)], metrics={"token_usage": 0.95},
                   invocation="%032x" % start, value=0.9)
    window.error("unit", "x" * 100000)
    path = str(tmp_path / "windows.jsonl")
    store.append_records(path, [window.record(PIN["time"] + 310)], keep=10)
    records, bad = store.read_records(path)
    assert bad == [] and len(records) == 1
    assert len(Path(path).read_bytes()) <= store.MAX_LINE_BYTES
    record = records[0]
    assert record["invocation_count"] == 600 and record["invocations"][-1] == "%032x" % 599
    assert len(record["last_error"]) <= 300 and record["errors"] == {"unit": 1}
    assert verdict(PIN, records)["evidence"]["restarts"] == 599


def test_a_window_of_more_gpus_than_a_line_holds_keeps_its_figures_without_the_per_gpu_entries(tmp_path):
    window = sampler.Window("sglang.service", PIN["time"] + 10, 5)
    window.add(gpus=[_gpu(index, 30.0 + index) for index in range(300)], metrics={"token_usage": 0.95},
               invocation="a", value=0.9)
    record = window.record(PIN["time"] + 310)
    assert len(json.dumps(record, sort_keys=True, separators=(",", ":"))) <= store.MAX_LINE_BYTES
    assert record["gpus"] == {} and record["least_free_gib"] == 30.0 and record["errors"] == {"size": 1}
    assert record["last_error"] == "size: 300 GPUs are more than a line of 16384 bytes holds: their entries left out"


def test_the_watcher_follows_the_unit_through_a_restart_and_counts_only_increases(tmp_path):
    host = Host()
    watcher = _watcher(tmp_path, host)
    for now, retracted in ((0, 10), (1, 13)):
        host.retracted = retracted
        watcher.step(now)
    host.invocation, host.retracted = "b", 1      # restarted: the counter starts again
    watcher.step(2)
    host.retracted = 4
    watcher.step(3)
    records, _bad = store.read_records(str(tmp_path / "windows.jsonl"))
    assert len(records) == 1
    record = records[0]
    assert (record["retractions"], record["invocations"]) == (6, ["a", "b"])
    assert sorted(record["gpus"]) == ["0", "1"] and record["gpus"]["1"]["others_peak_gib"] == 2.0
    assert record["value"] == 0.9 and record["bands"]["0.9"]["least_free_gib"] == 1.5


def test_garbage_on_metrics_is_counted_and_said_once_and_the_watch_goes_on(tmp_path):
    host, said = Host(), []
    watcher = _watcher(tmp_path, host, said)
    host.metrics_text = "<html>oops</html>"
    for now in range(4):
        watcher.step(now)
    host.metrics_text = None
    for now in range(4, 8):
        watcher.step(now)
    first, second = store.read_records(str(tmp_path / "windows.jsonl"))[0]
    assert first["errors"] == {"metrics": 4} and first["serving_samples"] == 0 and first["least_free_gib"] is None
    assert "not in Prometheus' text format" in first["last_error"]
    assert second["errors"] == {} and second["serving_samples"] == 4
    assert len([line for line in said if "/metrics cannot be read" in line]) == 1


def test_a_server_that_is_down_gives_samples_without_memory_verdicts(tmp_path):
    host = Host()
    host.invocation = None
    watcher = _watcher(tmp_path, host)
    for now in range(4):
        watcher.step(now)
    record = store.read_records(str(tmp_path / "windows.jsonl"))[0][0]
    assert (record["samples"], record["serving_samples"], record["least_free_gib"]) == (4, 0, None)


def test_a_full_disk_keeps_the_windows_in_memory_until_they_can_be_written(tmp_path, monkeypatch):
    host, said = Host(), []
    watcher = _watcher(tmp_path, host, said)
    real = store.append_records

    def full(*_args, **_kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(sampler, "append_records", full)
    for now in range(8):
        watcher.step(now)
    assert len(watcher.pending) == 2 and not (tmp_path / "windows.jsonl").exists()
    assert len(said) == 1 and "No space left on device" in said[0] and "kept in memory until it can" in said[0]
    monkeypatch.setattr(sampler, "append_records", real)
    for now in range(8, 12):
        watcher.step(now)
    assert len(store.read_records(str(tmp_path / "windows.jsonl"))[0]) == 3 and watcher.pending == []
    assert said[-1].endswith("written again, with the 3 window(s) kept meanwhile")


def test_every_window_the_watch_writes_is_one_the_reader_takes(tmp_path):
    host = Host()
    watcher = _watcher(tmp_path, host)
    for now in range(8):
        watcher.step(now)
    host.invocation = None
    for now in range(8, 12):
        watcher.step(now)
    records, bad = store.read_records(str(tmp_path / "windows.jsonl"))
    assert len(records) == 3 and bad == []


def test_keep_0_is_refused_where_the_state_file_would_grow_without_bound(tmp_path):
    with pytest.raises(watch_settings.WatchError, match=r"keep must lie in \[1, 20160\] windows \(got 0\)"):
        sampler.Watcher("sglang.service", Host(), str(tmp_path / "windows.jsonl"), interval=1, window=3, keep=0)
    with pytest.raises(watch_settings.WatchError, match=r"keep must lie in \[1, 20160\] windows \(got 0\)"):
        store.append_records(str(tmp_path / "windows.jsonl"), [{"v": 1}], keep=0)
    assert not (tmp_path / "windows.jsonl").exists()


def test_the_watcher_exports_after_each_window_and_a_failed_export_is_said_not_fatal(tmp_path):
    said, calls = [], []
    watcher = _watcher(tmp_path, Host(), said)
    watcher.on_window = lambda: calls.append(len((tmp_path / "windows.jsonl").read_text().splitlines()))
    for second in range(8):     # windows of 3 s: 1000-1003, 1004-1007
        watcher.step(1000.0 + second)
    assert calls == [1, 2]        # after each window, with that window on disk

    def broken():
        raise OSError("Read-only file system")
    watcher.on_window = broken
    for second in range(8, 12):
        watcher.step(1000.0 + second)
    assert said == ["cannot write the watch's metrics: Read-only file system"]
    assert len((tmp_path / "windows.jsonl").read_text().splitlines()) == 3

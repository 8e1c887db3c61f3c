# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The headroom watch's sampler, run by the watch service on the host (roles/sglang_service, ``llmserve-kv-watch``):
samples (the unit's GPUs, /metrics, systemd's view of the unit) folded into fixed windows (:class:`Window`: least free
memory per GPU and the token usage then, peaks, retractions, restarts, trials, other processes' memory), each written
at its end to the state file (:class:`Watcher`, store.append_records).

Stdlib only; what it reads of the host comes through the sources it is given, and it writes only the state file.
"""
from __future__ import annotations

import json
from typing import Any, Callable, cast

from ansible_collections.llmserve.sglang.plugins.module_utils.service import server_args
from ansible_collections.llmserve.sglang.plugins.module_utils.watch.metrics import MetricsError, parse_metrics
from ansible_collections.llmserve.sglang.plugins.module_utils.watch.settings import BANDS, check_settings
from ansible_collections.llmserve.sglang.plugins.module_utils.watch.store import (
    MAX_LINE_BYTES,
    RECORD_VERSION,
    append_records,
)

GIB = 2 ** 30
# A window keeps under store.MAX_LINE_BYTES: the last MAX_INVOCATIONS starts of a window (and their count), an error
# of MAX_ERROR_CHARS at most, and the per-GPU entries left out of a window of more GPUs than a line holds.
MAX_INVOCATIONS = 16
MAX_ERROR_CHARS = 300


def fraction_of_argv(argv: list[str]) -> float | None:
    """The --mem-fraction-static of a server's command line (a list of words), None where it has none or it is not a
    fraction (server_args reads it, as kv_fingerprint does)."""
    try:
        return server_args.mem_fraction_static(server_args.from_argv(argv))
    except server_args.ServerArgsError:
        return None


# --- windows -----------------------------------------------------------------------------------------------------------

def _gib(value_bytes: float | None) -> float | None:
    return None if value_bytes is None else round(value_bytes / GIB, 3)


def _higher(current: Any, value: Any) -> Any:
    return value if current is None or (value is not None and value > current) else current


class Window:
    """One window of samples, folded as they come (nothing per sample is kept)."""

    def __init__(self, unit: str, start: float, interval: float) -> None:
        self.unit, self.start, self.interval = unit, start, interval
        self.samples = self.serving = 0
        self.gpus: dict[str, dict[str, Any]] = {}
        # (free GiB, GPU, usage) of the least free sample while serving
        self.least: tuple[float, Any, Any] | None = None
        # band -> [samples at or above it, (free GiB, GPU) least free among them]
        self.bands: dict[float, list[Any]] = {}
        self.peaks: dict[str, Any] = {}
        self.pool_tokens: int | None = None
        self.value: float | None = None
        self.invocations: list[str] = []   # the last MAX_INVOCATIONS starts seen (the current one last)
        self.trial_samples = 0       # samples taken while the tuner's trial drop-in was loaded: its load, not traffic
        self.invocation_count = 0    # all the starts seen
        self.retractions = 0
        self.retract_lines = self.retracted_logged = self.ooms = 0
        self.errors: dict[str, int] = {}
        self.last_error: str | None = None

    def error(self, kind: str, message: str, count: int = 1) -> None:
        self.errors[kind] = self.errors.get(kind, 0) + count
        self.last_error = ("%s: %s" % (kind, message))[:MAX_ERROR_CHARS]

    def add(self, gpus: list[dict[str, Any]] | None = None, metrics: dict[str, Any] | None = None,
            invocation: str | None = None, value: float | None = None, retracted_since: int | None = None,
            trial: bool = False) -> None:
        """One sample: ``gpus`` the unit's GPUs ({index, free_bytes, total_bytes, others_bytes}, None when they could
        not be read), ``metrics`` parse_metrics' dict (None when /metrics did not answer), the unit's InvocationID
        and --mem-fraction-static, the retraction counter's increase since the last sample of the same start, and
        whether the tuner's trial drop-in was loaded (systemd's DropInPaths: a trial runs)."""
        self.samples += 1
        self.trial_samples += 1 if trial else 0
        if invocation and invocation not in self.invocations:
            self.invocations = (self.invocations + [invocation])[-MAX_INVOCATIONS:]
            self.invocation_count += 1
        if value is not None:
            self.value = value
        usage = None
        if metrics is not None:
            self.serving += 1
            usage = metrics.get("token_usage")
            for key in ("token_usage", "used_tokens", "running", "queue"):
                self.peaks[key] = _higher(self.peaks.get(key), metrics.get(key))
            if metrics.get("pool_tokens"):
                self.pool_tokens = metrics["pool_tokens"]
            if retracted_since:
                self.retractions += retracted_since
            for band in BANDS:
                if usage is not None and usage >= band:
                    self.bands.setdefault(band, [0, None])[0] += 1
        for gpu in gpus or []:
            entry = self.gpus.setdefault(str(gpu["index"]), {
                "least_free_gib": None, "usage_then": None, "total_gib": _gib(gpu.get("total_bytes")),
                "others_peak_gib": 0.0})
            entry["others_peak_gib"] = _higher(entry["others_peak_gib"], _gib(gpu.get("others_bytes") or 0))
            free = _gib(gpu.get("free_bytes"))
            if free is None or metrics is None:
                continue           # while the server starts or is down its memory is not the pin's steady state
            if entry["least_free_gib"] is None or free < entry["least_free_gib"]:
                entry["least_free_gib"], entry["usage_then"] = free, usage
            if self.least is None or free < self.least[0]:
                self.least = (free, gpu["index"], usage)
            for band in BANDS:
                if usage is not None and usage >= band:
                    low = self.bands[band]
                    if low[1] is None or free < low[1][0]:
                        low[1] = (free, gpu["index"])

    def record(self, end: float) -> dict[str, Any]:
        """The window as the JSON object the state file keeps, a line of MAX_LINE_BYTES at most."""
        record = self._record(end)
        if len(json.dumps(record, sort_keys=True, separators=(",", ":"))) > MAX_LINE_BYTES:
            self.error("size", "%d GPUs are more than a line of %d bytes holds: their entries left out"
                       % (len(self.gpus), MAX_LINE_BYTES))
            record = dict(record, gpus={}, errors=dict(self.errors), last_error=self.last_error)
        return record

    def _record(self, end: float) -> dict[str, Any]:
        least = self.least or (None, None, None)
        return {
            "v": RECORD_VERSION, "unit": self.unit, "start": round(self.start, 1), "end": round(end, 1),
            "interval": self.interval, "samples": self.samples, "serving_samples": self.serving,
            "value": self.value, "pool_tokens": self.pool_tokens, "invocations": list(self.invocations),
            "invocation_count": self.invocation_count,
            "least_free_gib": least[0], "least_free_gpu": least[1], "usage_at_least_free": least[2],
            "bands": {"%g" % band: {"seconds": round(count * self.interval, 1),
                                    "least_free_gib": None if low is None else low[0],
                                    "gpu": None if low is None else low[1]}
                      for band, (count, low) in sorted(self.bands.items())},
            "peaks": self.peaks, "gpus": self.gpus,
            "retractions": self.retractions, "retract_lines": self.retract_lines,
            "retracted_logged": self.retracted_logged, "oom_lines": self.ooms, "trial_samples": self.trial_samples,
            "errors": dict(self.errors), "last_error": self.last_error,
        }


# --- the sampler's loop ------------------------------------------------------------------------------------------------

class Watcher:
    """The watch of one unit: ``step(now)`` takes a sample from ``sources`` and, at each window's end, writes the
    window. ``sources`` has unit() -> {invocation, main_pid, control_group, trial} (None while nothing runs),
    pids(cgroup) -> set, gpus() -> GPU dicts (host/gpu_fields.py), metrics() -> /metrics text, argv(pid) -> list. Every
    failure of a source is counted in the window and the last one said; none stops the watch. The server's journal
    is root's to read (journal.attach_journal), not the watch's."""

    def __init__(self, unit: str, sources: Any, path: str, interval: Any, window: Any, keep: Any,
                 log: Callable[[str], None] | None = None,
                 on_window: Callable[[], None] | None = None) -> None:
        """Raises WatchError on an ``interval``, ``window`` or ``keep`` out of its range (BOUNDS). ``on_window`` is
        called after each write of the state file (the watch's metrics file); its failure is said, never the end."""
        settings = check_settings({"interval": interval, "window": window, "keep": keep})
        self.unit, self.sources, self.path = unit, sources, path
        self.interval, self.window_seconds, self.keep = settings["interval"], settings["window"], settings["keep"]
        self.log = log or (lambda message: None)
        self.on_window = on_window
        self.window: Window | None = None
        self.pending: list[dict[str, Any]] = []   # windows not written yet (the disk was full): kept, bounded by keep
        self.counter: tuple[Any, int] | None = None   # (invocation, last retraction counter)
        self.unit_gpus: set[Any] = set()   # the GPUs the server was last seen on
        self.known_pids: set[int] = set()
        self.last_problem: str | None = None

    def _say(self, problem: str) -> None:
        if problem != self.last_problem:
            self.log(problem)
        self.last_problem = problem

    def step(self, now: float) -> None:
        if self.window is None:
            self.window = Window(self.unit, now, self.interval)
        window = self.window
        unit = self._read(window, "unit", self.sources.unit)
        invocation = value = None
        if unit:
            invocation = unit.get("invocation")
            pids = self._read(window, "cgroup", self.sources.pids, unit.get("control_group")) or set()
            self.known_pids |= pids
            if unit.get("main_pid"):
                argv = self._read(window, "cmdline", self.sources.argv, unit["main_pid"])
                value = fraction_of_argv(argv or [])
        metrics = None
        if unit:
            text = self._read(window, "metrics", self.sources.metrics)
            if text is not None:
                try:
                    metrics = parse_metrics(text)
                except MetricsError as exc:
                    window.error("metrics", str(exc))
                    self._say("the server's /metrics cannot be read: %s" % exc)
        gpus = self._gpus(window)
        window.add(gpus=gpus, metrics=metrics, invocation=invocation, value=value,
                   retracted_since=self._retracted_since(invocation, metrics), trial=bool(unit and unit.get("trial")))
        if now - window.start >= self.window_seconds:
            self.close(now)

    def _read(self, window: Window, kind: str, source: Callable[..., Any], *args: Any) -> Any:
        try:
            return source(*args)
        except Exception as exc:  # pylint: disable=broad-except  # a source's failure is data, never the end
            window.error(kind, str(exc) or type(exc).__name__)
            self._say("%s: %s" % (kind, exc))
            return None

    def _gpus(self, window: Window) -> list[dict[str, Any]] | None:
        gpus = self._read(window, "gpus", self.sources.gpus)
        if gpus is None:
            return None
        own = {gpu["index"] for gpu in gpus
               if any(proc["pid"] in self.known_pids for proc in gpu.get("compute_processes") or [])}
        if own:
            self.unit_gpus = own
        result = []
        for gpu in gpus:
            if gpu["index"] not in self.unit_gpus:
                continue
            others = sum(proc.get("used_memory_bytes") or 0 for proc in gpu.get("compute_processes") or []
                         if proc["pid"] not in self.known_pids)
            result.append({"index": gpu["index"], "free_bytes": gpu.get("memory_free_bytes"),
                           "total_bytes": gpu.get("memory_total_bytes"), "others_bytes": others})
        return result

    def _retracted_since(self, invocation: str | None, metrics: dict[str, Any] | None) -> int:
        """The counter's increase since the last sample of the same start: a restart starts it at zero again, and
        a multiprocess directory kept from older starts may add their totals, so only increases count."""
        total = None if metrics is None else metrics.get("retracted")
        if total is None:
            return 0
        before = self.counter
        self.counter = (invocation, total)
        if before is None or before[0] != invocation:
            return 0
        return max(0, total - before[1])

    def close(self, now: float) -> None:
        window, self.window = cast(Window, self.window), None
        self.pending.append(window.record(now))
        self.pending = self.pending[-self.keep:]
        try:
            append_records(self.path, self.pending, self.keep)
        except OSError as exc:
            self._say("cannot write %s (the windows are kept in memory until it can, %d at most): %s"
                      % (self.path, self.keep, exc.strerror or exc))
            return
        if self.last_problem and self.last_problem.startswith("cannot write"):
            self._say("%s written again, with the %d window(s) kept meanwhile" % (self.path, len(self.pending)))
        self.pending = []
        if self.on_window is not None:
            try:
                self.on_window()
            except Exception as exc:  # pylint: disable=broad-except  # the metrics file is extra, the windows are not
                self._say("cannot write the watch's metrics: %s" % (exc,))

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The headroom watch: what a pinned --mem-fraction-static leaves free under real traffic, and what that says.

Three parts, the first two run by the watch service on the host (roles/kv_watch, ``llmserve-kv-watch``), the third
by the module kv_watch_facts:

- :func:`parse_metrics`: the numbers of SGLang's Prometheus ``/metrics`` the watch keeps (TP rank 0's gauges, the
  retraction counter), through prometheus_client's own text parser; a text without them is an error, never a guess.
- :class:`Window` and :class:`Watcher`: samples (the unit's GPUs, /metrics, systemd's view of the unit) folded into
  fixed windows (least free memory per GPU and the token usage then, peaks, retractions, restarts, trials, other
  processes' memory), appended as JSON lines to a file that keeps a bounded number of windows (:func:`append_records`).
  The server's journal is not the watch's to read (it holds the API key): root counts its OOM and retraction lines
  into the windows (:func:`journal_events`, :func:`attach_journal`) before a verdict.
- :func:`verdict`: the windows since the pin against the pin's margin: ``near_miss``, ``headroom``, ``ok`` or
  ``not_enough_traffic``, with the evidence in words and numbers.

Stdlib only (prometheus_client is imported by :func:`parse_metrics` when it is called); the only I/O is the GET of
/metrics (:func:`fetch_metrics`) and the state file's, in :func:`append_records` and :func:`read_records`.

The server is not trusted: it can answer /metrics with anything. No redirect is followed (it would choose where the
watch sends a request), and nothing it wrote reaches the state file or the watch's journal: only the numbers a window
needs, and the watch's own words for what went wrong.
"""
from __future__ import annotations

import bisect
import calendar
import errno
import http.client
import json
import math
import os
import re
import stat
import time
import urllib.error
import urllib.request

from ansible_collections.llmserve.sglang.plugins.module_utils import checks
from ansible_collections.llmserve.sglang.plugins.module_utils.service import kv_pin, server_args
from ansible_collections.llmserve.sglang.plugins.module_utils.host.lazy_opener import LazyOpener

GIB = 2 ** 30
RECORD_VERSION = 1
# A window is a line of JSON of at most this many bytes (8 GPUs, every field, are about 1.3 KiB): a longer line is
# not ours. The watch keeps its windows under it: the last MAX_INVOCATIONS starts of a window (and their count), an
# error of MAX_ERROR_CHARS at most, and the per-GPU entries left out of a window of more GPUs than a line holds.
MAX_LINE_BYTES = 16384
MAX_INVOCATIONS = 16
MAX_ERROR_CHARS = 300
# The token usage from which the pool counts as full: SGLang admits requests while it can reserve their tokens and
# retracts near the top, so a usage of 0.9 is the pool under real pressure.
FULL_USAGE = 0.9
# Each window keeps, per band of token usage, the seconds spent at or above it and the least free memory then, so
# that a verdict may count any of these as full (kv_watch_facts full_usage) after the fact.
BANDS = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95)

GAUGES = {
    "sglang:token_usage": "token_usage",
    "sglang:num_used_tokens": "used_tokens",
    "sglang:num_running_reqs": "running",
    "sglang:num_queue_reqs": "queue",
    "sglang:max_total_num_tokens": "pool_tokens",
}
RETRACTED = "sglang:num_retracted_requests_total"
# The largest count the watch reads (tokens, requests, retractions): far beyond any pool or batch. A number of the
# server's over it, or not finite, is not a measurement: the sample (or the journal line) is unreadable, and no sum
# of the watch can overflow.
MAX_COUNT = 10 ** 12
# The range of each watched number of /metrics: token usage is a share of the pool (a little over 1 is rounding).
RANGES = dict({name: (0, MAX_COUNT) for name in GAUGES if name != "sglang:token_usage"},
              **{"sglang:token_usage": (0, 2), RETRACTED: (0, MAX_COUNT)})
# SGLang's retraction line (scheduler, 0.4 to 0.5.23) and torch's or CUDA's device OOM (as startup_failure reads it).
RETRACT_LINE = re.compile(r"KV cache pool is full\. Retract requests\. #retracted_reqs: ([0-9]+)")
OOM_LINE = re.compile(
    r"OutOfMemoryError|(?:CUDA|HIP|NPU|XPU|MUSA) out of memory|CUDA error: out of memory"
    r"|memory allocation failed with OOM"
)

VERDICTS = ("near_miss", "headroom", "ok", "not_enough_traffic")
# A pool smaller than the verified one by more than this share, at the same value, is a reason to tune again.
POOL_TOLERANCE = 0.02
WATCH_ACTIONS = ("propose", "act")

# The closed range of each setting of the watch (its service's --interval, --window and --keep: the role's
# sglang_service_kv_watch_*) and of its readers (kv_watch_facts, kv_fingerprint's watch, the kv_tune role's
# kv_tune_watch_*, the capacity report's capacity_report_watch_*), with its unit and why, as the tuner's own
# (run_settings.BOUNDS): a typo is refused where the setting enters, before it crashes a probe, re-tunes a pin
# that holds or lets the state file grow. The roles' argument specs and the module docs state the same ranges
# (tests/unit/plugins/test_kv_watch_contract.py).
BOUNDS = {
    "interval": (1, 300, "seconds", "faster than a sample a second only loads the server and the host; slower than "
                                    "one in five minutes misses what a window is for"),
    "window": (1, 86400, "seconds", "a window is a line of the state file: a day at most"),
    "keep": (1, 20160, "windows", "the state file keeps at least one window, and at most 70 days of 5-minute "
                                  "windows (about 26 MiB), well under the 64 MiB its reader takes"),
    "recent": (0, 20160, "windows", "the most windows a watch keeps"),
    "headroom_hours": (0.0005, 8760, "hours", "a verdict needs some time at a full pool (a test host's 1.8 s at "
                                              "least), and a year at most"),
    "headroom_steps": (0, 100, "grid steps", "more spare steps than that is headroom on any grid"),
    "storm_retractions": (1, 1000000, "requests", "a storm is one retracted request in a window at least"),
    "pool_tolerance": (0, 0.5, "of the verified pool", "below 0 every pool that holds reads as smaller, a re-tune on "
                                                       "every run; over a half, no pool would"),
}
INTEGER_SETTINGS = ("keep", "recent", "headroom_steps", "storm_retractions")


class MetricsError(ValueError):
    """/metrics answered something the watch does not read as SGLang's metrics; the message says what."""


class WatchError(checks.InvalidInput):
    """A state file or a setting the watch cannot use; the message names it."""


def bound_text(name):
    """The range of setting ``name`` as the messages and the docs write it: ``[1, 20160] windows``."""
    low, high, unit, _why = BOUNDS[name]
    return "[%s, %s] %s" % (low, high, unit)


def check_settings(raw, prefix=""):
    """The watch's settings in ``raw`` (any of BOUNDS' names, full_usage and action; state_path passes as it is)
    checked and typed. WatchError names the setting as ``prefix`` + its name (``kv_tune_watch_keep``, ``--keep``),
    its range and why."""
    if not isinstance(raw, dict):
        raise WatchError("the headroom watch's settings must be a dictionary, got %r" % (raw,))
    out = {}
    for name, value in raw.items():
        label = "%s%s" % (prefix, name)
        if name in BOUNDS:
            number = checks.parse_number(label, value, int if name in INTEGER_SETTINGS else float, WatchError)
            low, high, _unit, why = BOUNDS[name]
            if not low <= number <= high:
                raise WatchError("%s must lie in %s (got %g): %s." % (label, bound_text(name), number, why))
            out[name] = number
        elif name == "full_usage":
            matching = [band for band in BANDS if checks.is_number(value) and abs(band - value) < 1e-9]
            if not matching:
                raise WatchError("%s must be one of the watch's bands %s, got %r"
                                 % (label, ", ".join("%g" % band for band in BANDS), value))
            out[name] = matching[0]
        elif name == "action":
            if value not in WATCH_ACTIONS:
                raise WatchError("%s must be one of %s (got %r)" % (label, ", ".join(WATCH_ACTIONS), value))
            out[name] = value
        elif name == "state_path":
            out[name] = value
        else:
            raise WatchError("%s is not a setting of the headroom watch (%s)"
                             % (label, ", ".join(sorted(set(BOUNDS) | {"full_usage", "action", "state_path"}))))
    if "interval" in out and "window" in out and out["window"] < out["interval"]:
        raise WatchError("%swindow (%g) must not be shorter than %sinterval (%g): a window holds a sample at least."
                         % (prefix, out["window"], prefix, out["interval"]))
    return out


def watch_unit(unit):
    """The watch's unit of the server ``unit``: llmserve-kv-watch-sglang.service, llmserve-kv-watch-sglang-a.service
    for sglang@a.service (a plain name: a second '@' would make it an instance of a template)."""
    try:
        return "llmserve-kv-watch-%s.service" % kv_pin.unit_stem(kv_pin.check_unit(unit))
    except kv_pin.PinError as exc:
        raise WatchError(str(exc)) from None


def state_path(unit):
    """The watch's state file of the server ``unit``: in its StateDirectory=%N, /var/lib/<the watch's unit>."""
    return "/var/lib/%s/windows.jsonl" % watch_unit(unit)[:-len(".service")]


# --- /metrics ----------------------------------------------------------------------------------------------------------

# The most the watch reads of one /metrics answer (SGLang's is a few KiB; a multiprocess one with histograms, tens).
MAX_METRICS_BYTES = 4 * 2 ** 20
# Seconds one GET of /metrics may take in all (the socket's timeout is per read: a server could drip bytes forever).
METRICS_TIMEOUT = 5.0


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is an unreadable answer, never followed: the server would choose where the watch sends a request
    (a cloud's metadata service, another host), and what came back would be the watch's."""

    def _refuse(self, req, fp, code, msg, headers):  # pylint: disable=unused-argument,too-many-arguments
        fp.close()
        raise MetricsError("/metrics answered HTTP %d, a redirect: not followed" % code)

    http_error_301 = http_error_302 = http_error_303 = http_error_307 = http_error_308 = _refuse


# No proxy from the environment either: /metrics is the server's own port on this host.
_OPENER = LazyOpener(urllib.request.ProxyHandler({}), _NoRedirect)


def _os_words(exc):
    """What went wrong in the watch's own words: an OS error's text, else the exception's kind (the message of an
    http.client error quotes what the server sent)."""
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return type(exc).__name__


def fetch_metrics(url, timeout=METRICS_TIMEOUT):
    """The text of one GET of the server's /metrics at ``url`` (http or https), at most MAX_METRICS_BYTES within
    ``timeout`` seconds. Raises MetricsError, in the watch's own words (the status, never the server's text), on a
    redirect, any other HTTP error, an answer too long or too slow, or a connection that fails."""
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise MetricsError("the watch's /metrics must be an http:// or https:// URL")
    deadline = time.monotonic() + timeout
    chunks, size = [], 0
    try:
        with _OPENER.open(url, timeout=timeout) as answer:
            while True:
                chunk = answer.read1(65536)     # what has come, not a wait for 64 KiB
                if not chunk:
                    break
                size += len(chunk)
                if size > MAX_METRICS_BYTES:
                    raise MetricsError("/metrics answered more than %d bytes" % MAX_METRICS_BYTES)
                if time.monotonic() > deadline:
                    raise MetricsError("/metrics took more than %g s to answer" % timeout)
                chunks.append(chunk)
    except MetricsError:
        raise
    except urllib.error.HTTPError as exc:
        raise MetricsError("/metrics answered HTTP %d" % exc.code) from None
    except urllib.error.URLError as exc:
        raise MetricsError("/metrics cannot be reached: %s" % _os_words(exc.reason)) from None
    except (OSError, ValueError, http.client.HTTPException) as exc:
        raise MetricsError("/metrics cannot be read: %s" % _os_words(exc)) from None
    return b"".join(chunks).decode("utf-8", "replace")


def _rank0(labels):
    """A sample of TP rank 0 (SGLang's scheduler gauges are rank 0's; a counter may come from every rank alike)."""
    return labels.get("tp_rank", "0") == "0" and labels.get("pp_rank", "0") == "0"


def parse_metrics(text, parser=None):
    """The watched numbers of one /metrics answer: token_usage, used_tokens, running, queue and pool_tokens (the
    fullest DP replica's usage, the others summed over replicas, the pool of the smallest) and retracted (the
    counter's total, None where this SGLang has none). ``parser`` is prometheus_client.parser (imported here when
    None). Raises MetricsError on a text prometheus_client cannot parse or one without sglang:token_usage."""
    if parser is None:
        try:
            from prometheus_client import parser  # pylint: disable=import-outside-toplevel
        except ImportError as exc:
            raise MetricsError("cannot read /metrics: prometheus_client is not installed (%s)" % exc)
    found = {}
    families = 0
    try:
        for family in parser.text_string_to_metric_families(text):
            families += 1
            for sample in family.samples:
                name = sample.name
                if (name in GAUGES or name == RETRACTED) and _rank0(sample.labels):
                    value = float(sample.value)
                    low, high = RANGES[name]
                    if not (math.isfinite(value) and low <= value <= high):
                        # The value itself is the server's: not repeated.
                        raise MetricsError("/metrics has %s out of range [%g, %g]" % (name, low, high))
                    found.setdefault(name, []).append(value)
    except MetricsError:
        raise
    except (ValueError, TypeError, IndexError, KeyError) as exc:
        # The parser's message quotes the line: the server's text, which the watch does not repeat.
        raise MetricsError("/metrics is not in Prometheus' text format (%s after %d metric families)"
                           % (type(exc).__name__, families)) from None
    if "sglang:token_usage" not in found:
        raise MetricsError("/metrics has no sglang:token_usage of TP rank 0 (%d bytes, %d metric families)"
                           % (len(text), families))
    values = {}
    for name, key in GAUGES.items():
        numbers = found.get(name)
        if not numbers:
            values[key] = None
        elif key == "token_usage":
            values[key] = max(numbers)
        elif key == "pool_tokens":
            values[key] = int(min(numbers))
        else:
            values[key] = int(sum(numbers))
    retracted = found.get(RETRACTED)
    values["retracted"] = int(sum(retracted)) if retracted else None
    return values


def fraction_of_argv(argv):
    """The --mem-fraction-static of a server's command line (a list of words), None where it has none or it is not a
    fraction (server_args reads it, as kv_fingerprint does)."""
    try:
        return server_args.mem_fraction_static(server_args.from_argv(argv))
    except server_args.ServerArgsError:
        return None


# What root reads of the server's journal for a verdict, the lines of these patterns with their times: the watch
# itself does not read it, as SGLang logs its server_args there, the API key among them (journalctl's --grep, PCRE2).
JOURNAL_GREP = "%s|%s" % (RETRACT_LINE.pattern, OOM_LINE.pattern)
# The most lines of it a verdict reads (the newest): a server that floods its journal with them bounds nothing else.
MAX_JOURNAL_LINES = 20000


def journal_events(text):
    """[(Unix time, message)] of ``journalctl --output short-unix`` text; lines without a time (``-- No entries
    --``) are not events."""
    events = []
    for line in text.splitlines():
        stamp, _sep, rest = line.partition(" ")
        try:
            when = float(stamp)
        except ValueError:
            continue
        if math.isfinite(when):
            events.append((when, rest.split(": ", 1)[1] if ": " in rest else rest))
    return events


def attach_journal(records, events):
    """``records`` (windows, in time order) with the OOM and retraction lines of ``events`` (journal_events')
    counted in the window each fell in (from a window's start, less one interval for the gap before it, to its
    end): oom_lines, retract_lines, retracted_logged. Lines outside every window are not counted."""
    out = [dict(record, oom_lines=0, retract_lines=0, retracted_logged=0) for record in records]
    ends = [record["end"] for record in out]
    for when, line in events:
        index = bisect.bisect_left(ends, when)
        if index == len(out) or when < out[index]["start"] - (out[index].get("interval") or 0):
            continue
        retract_lines, retracted, ooms, unreadable = journal_counts([line])
        record = out[index]
        record["retract_lines"] += retract_lines
        record["retracted_logged"] += retracted
        record["oom_lines"] += ooms
        if unreadable:
            errors = record["errors"] = dict(record.get("errors") or {})
            errors["journal"] = errors.get("journal", 0) + unreadable
    return out


def journal_counts(lines):
    """(retraction lines, requests they retracted, OOM lines, retraction lines left out) of a stretch of the unit's
    journal: a retraction line whose count is over MAX_COUNT is no measurement, and is left out (and counted)."""
    retract_lines = retracted = ooms = unreadable = 0
    for line in lines:
        match = RETRACT_LINE.search(line)
        if match:
            digits = match.group(1).lstrip("0") or "0"
            # The length first: int() of thousands of digits is slow, and refused past 4300.
            if len(digits) > len(str(MAX_COUNT)) or int(digits) > MAX_COUNT:
                unreadable += 1
                continue
            retract_lines += 1
            retracted += int(digits)
        elif OOM_LINE.search(line):
            ooms += 1
    return retract_lines, retracted, ooms, unreadable


# --- windows -----------------------------------------------------------------------------------------------------------

def _gib(value_bytes):
    return None if value_bytes is None else round(value_bytes / GIB, 3)


def _lower(current, value):
    return value if current is None or (value is not None and value < current) else current


def _higher(current, value):
    return value if current is None or (value is not None and value > current) else current


class Window:
    """One window of samples, folded as they come (nothing per sample is kept)."""

    def __init__(self, unit, start, interval):
        self.unit, self.start, self.interval = unit, start, interval
        self.samples = self.serving = 0
        self.gpus = {}
        self.least = None            # (free GiB, GPU, usage) of the least free sample while serving
        self.bands = {}              # band -> [samples at or above it, (free GiB, GPU) least free among them]
        self.peaks = {}
        self.pool_tokens = self.value = None
        self.invocations = []        # the last MAX_INVOCATIONS starts seen (the current one last)
        self.trial_samples = 0       # samples taken while the tuner's trial drop-in was loaded: its load, not traffic
        self.invocation_count = 0    # all the starts seen
        self.retractions = 0
        self.retract_lines = self.retracted_logged = self.ooms = 0
        self.errors = {}
        self.last_error = None

    def error(self, kind, message, count=1):
        self.errors[kind] = self.errors.get(kind, 0) + count
        self.last_error = ("%s: %s" % (kind, message))[:MAX_ERROR_CHARS]

    def add(self, gpus=None, metrics=None, invocation=None, value=None, retracted_since=None, trial=False):
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
                    entry = self.bands[band]
                    if entry[1] is None or free < entry[1][0]:
                        entry[1] = (free, gpu["index"])

    def record(self, end):
        """The window as the JSON object the state file keeps, a line of MAX_LINE_BYTES at most."""
        record = self._record(end)
        if len(json.dumps(record, sort_keys=True, separators=(",", ":"))) > MAX_LINE_BYTES:
            self.error("size", "%d GPUs are more than a line of %d bytes holds: their entries left out"
                       % (len(self.gpus), MAX_LINE_BYTES))
            record = dict(record, gpus={}, errors=dict(self.errors), last_error=self.last_error)
        return record

    def _record(self, end):
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


# --- the state file ----------------------------------------------------------------------------------------------------

# The state file is readable by every local user (a capacity report need not run as root): it holds numbers of
# /metrics, which the watch GETs without a key, as any local user can, and the watch's own words; nothing the server
# wrote (fetch_metrics, parse_metrics).
STATE_MODE = 0o644


def _create(path, flags):
    """A descriptor of ``path`` (never through a link), created STATE_MODE whatever the umask."""
    descriptor = os.open(path, flags | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), STATE_MODE)
    try:
        os.fchmod(descriptor, STATE_MODE)
    except OSError:
        os.close(descriptor)
        raise
    return descriptor


def append_records(path, records, keep):
    """Append ``records`` to the JSON-lines file ``path``; once it holds over ``keep`` * 1.1 lines, rewrite it with the
    last ``keep`` (a temporary file renamed over it: a reader never sees half a file). OSError (a full disk, say)
    is the caller's: nothing is lost that the caller still holds. A ``keep`` out of its range raises WatchError."""
    keep = check_settings({"keep": keep})["keep"]
    text = "".join(json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n" for record in records)
    descriptor = _create(path, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(descriptor, text.encode())
    finally:
        os.close(descriptor)
    with open(path, "rb") as handle:
        lines = handle.read().splitlines(keepends=True)
    if len(lines) > keep + max(1, keep // 10):
        temporary = path + ".tmp"
        with os.fdopen(_create(temporary, os.O_WRONLY | os.O_TRUNC), "wb") as handle:
            handle.writelines(lines[-keep:])
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)


# The most the reader takes of a state file: the default 4032 windows are about 5 MiB.
MAX_STATE_BYTES = 64 * 2 ** 20
# The largest count a window may hold (an int64: what any reader of the facts can hold), and its latest time (the
# year 5138: time.gmtime() of more fails on some platforms).
MAX_RECORD_COUNT = 2 ** 63 - 1
MAX_RECORD_TIME = 1e11


def _is_count(value):
    return checks.is_integer(value) and 0 <= value <= MAX_RECORD_COUNT


def _is_number_or_null(value):
    return value is None or checks.is_number(value)


def _is_gpu_or_null(value):
    return value is None or isinstance(value, str) or _is_count(value)


def _is_object_of(value, entry):
    return isinstance(value, dict) and all(isinstance(key, str) and entry(item) for key, item in value.items())


def _is_gpu_entry(value):
    return isinstance(value, dict) and all(_is_number_or_null(value.get(key)) for key in (
        "least_free_gib", "usage_then", "total_gib", "others_peak_gib"))


def _is_band(value):
    return (isinstance(value, dict) and checks.is_number(value.get("seconds")) and value["seconds"] >= 0
            and _is_number_or_null(value.get("least_free_gib")) and _is_gpu_or_null(value.get("gpu")))


# What each field of a window must be, where the window has it (the verdict, the tuner and the capacity report read
# them as such), and how the reader says what is wrong. start and end are required.
_FIELDS = {
    "unit": (lambda value: isinstance(value, str), "a text"),
    "interval": (lambda value: checks.is_number(value) and value > 0, "a positive number"),
    "value": (lambda value: value is None or (checks.is_number(value) and 0 < value < 1), "a fraction or null"),
    "pool_tokens": (lambda value: value is None or _is_count(value), "a count or null"),
    "invocations": (lambda value: isinstance(value, list) and all(isinstance(item, str) for item in value),
                    "a list of texts"),
    "least_free_gib": (_is_number_or_null, "a number or null"),
    "least_free_gpu": (_is_gpu_or_null, "a GPU or null"),
    "usage_at_least_free": (_is_number_or_null, "a number or null"),
    "bands": (lambda value: _is_object_of(value, _is_band), "an object of bands"),
    "peaks": (lambda value: _is_object_of(value, _is_number_or_null), "an object of numbers"),
    "gpus": (lambda value: _is_object_of(value, _is_gpu_entry), "an object of GPUs"),
    "errors": (lambda value: _is_object_of(value, _is_count), "an object of counts"),
    "last_error": (lambda value: value is None or isinstance(value, str), "a text or null"),
}
_FIELDS.update({key: (_is_count, "a count") for key in (
    "samples", "serving_samples", "retractions", "retract_lines", "retracted_logged", "oom_lines",
    "invocation_count", "trial_samples")})


def window_problem(record):
    """Why ``record`` (a line of the state file, parsed) is not a window of this watch that the verdict can read, or
    None: the format's version, start and end (times, in order), and the type of every other field it has."""
    if not isinstance(record, dict) or record.get("v") != RECORD_VERSION:
        return "not a window of this watch"
    for key in ("start", "end"):
        if key not in record:
            return "not a window of this watch: no %s" % key
        if not checks.is_number(record[key]) or not 0 <= record[key] <= MAX_RECORD_TIME:
            return "not a window of this watch: %s is not a time" % key
    if record["end"] < record["start"]:
        return "not a window of this watch: end is before start"
    for key, (valid, kind) in _FIELDS.items():
        if key in record and not valid(record[key]):
            return "not a window of this watch: %s is not %s" % (key, kind)
    return None


def read_records(path, since=None):
    """The windows of the state file ``path`` (ending after ``since``, a Unix time) and the lines it could not read
    (a list of "line N: why", every one of them: :func:`window_problem`'s reasons, not JSON, too long). A missing
    file is no windows. Root reads what another user (the watch's) writes: a
    link, a FIFO or anything but a regular file, or a file over MAX_STATE_BYTES, raises WatchError without blocking."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return [], []
        raise WatchError("cannot open the watch's state file %s: %s" % (path, exc.strerror or exc))
    with os.fdopen(descriptor, "rb") as handle:
        found = os.fstat(handle.fileno())
        if not stat.S_ISREG(found.st_mode):
            raise WatchError("the watch's state file %s is not a regular file" % path)
        if found.st_size > MAX_STATE_BYTES:
            raise WatchError("the watch's state file %s holds %d bytes, more than the %d a watch writes"
                             % (path, found.st_size, MAX_STATE_BYTES))
        data = handle.read(MAX_STATE_BYTES + 1)
    records, bad = [], []
    for number, line in enumerate(data.splitlines(), 1):
        why = None
        if len(line) > MAX_LINE_BYTES:
            why = "longer than %d bytes" % MAX_LINE_BYTES
        else:
            try:
                record = json.loads(line)
            except (ValueError, RecursionError) as exc:
                record, why = None, "not JSON (%s)" % exc
            if why is None:
                why = window_problem(record)
        if why is not None:
            bad.append("line %d: %s" % (number, why))
        elif since is None or record["end"] > since:
            records.append(record)
    return records, bad


# --- the sampler's loop ------------------------------------------------------------------------------------------------

class Watcher:
    """The watch of one unit: ``step(now)`` takes a sample from ``sources`` and, at each window's end, writes the
    window. ``sources`` has unit() -> {invocation, main_pid, control_group, trial} (None while nothing runs),
    pids(cgroup) -> set, gpus() -> GPU dicts of gpu_probe, metrics() -> /metrics text, argv(pid) -> list. Every
    failure of a source is counted in the window and the last one said; none stops the watch. The server's journal
    is root's to read (:func:`attach_journal`), not the watch's."""

    def __init__(self, unit, sources, path, interval, window, keep, log=None):
        """Raises WatchError on an ``interval``, ``window`` or ``keep`` out of its range (BOUNDS)."""
        settings = check_settings({"interval": interval, "window": window, "keep": keep})
        self.unit, self.sources, self.path = unit, sources, path
        self.interval, self.window_seconds, self.keep = settings["interval"], settings["window"], settings["keep"]
        self.log = log or (lambda message: None)
        self.window = None
        self.pending = []            # windows not written yet (the disk was full): kept, bounded by keep
        self.counter = None          # (invocation, last retraction counter)
        self.unit_gpus = set()       # the GPUs the server was last seen on
        self.known_pids = set()
        self.last_problem = None

    def _say(self, problem):
        if problem != self.last_problem:
            self.log(problem)
        self.last_problem = problem

    def step(self, now):
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

    def _read(self, window, kind, source, *args):
        try:
            return source(*args)
        except Exception as exc:  # pylint: disable=broad-except  # a source's failure is data, never the end
            window.error(kind, str(exc) or type(exc).__name__)
            self._say("%s: %s" % (kind, exc))
            return None

    def _gpus(self, window):
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

    def _retracted_since(self, invocation, metrics):
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

    def close(self, now):
        window, self.window = self.window, None
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


# --- the verdict -------------------------------------------------------------------------------------------------------

def _when(seconds):
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(seconds))


def pin_time(value):
    """The Unix time of a pin's ``time`` (the tuner writes 2026-12-05T10:00:00Z; a number is taken as it is)."""
    if checks.is_number(value):
        return float(value)
    try:
        return float(calendar.timegm(time.strptime(str(value), "%Y-%m-%dT%H:%M:%SZ")))
    except ValueError:
        raise WatchError("the pin's time must be a time such as 2026-12-05T10:00:00Z, got %r" % (value,))


def _at_pin(record, value):
    return record.get("value") is None or abs(record["value"] - value) < 1e-6


def verdict(entry, records, full_usage=FULL_USAGE, headroom_steps=2, headroom_hours=24.0, storm_retractions=20,
            unreadable=()):
    """What the windows since the pin say about it. ``entry`` is the unit's fact entry (mem_fraction_static, time,
    settings.safety_gib and .resolution); ``unreadable`` the state file's lines that are not windows (read_records'
    second list), which the verdict counts (evidence unreadable_lines) and names in its last reason. Returns
    {verdict, reasons, evidence}; reasons are sentences, evidence the numbers they come from."""
    result = _verdict(entry, records, full_usage, headroom_steps, headroom_hours, storm_retractions)
    result["evidence"]["unreadable_lines"] = len(unreadable)
    if unreadable:
        result["reasons"].append("%d line(s) of the watch's state file could not be read and are left out of this "
                                 "verdict (%s)" % (len(unreadable), unreadable[0]))
    return result


def _restarts(records):
    """The restarts the windows saw: their distinct starts less one, and the starts each window counted beyond the
    last MAX_INVOCATIONS it kept."""
    listed = {i for record in records for i in record.get("invocations") or []}
    beyond = sum(max(0, (record.get("invocation_count") or 0) - len(record.get("invocations") or []))
                 for record in records)
    return max(0, len(listed) + beyond - 1)


def _verdict(entry, records, full_usage, headroom_steps, headroom_hours, storm_retractions):
    settings = check_settings({"full_usage": full_usage, "headroom_steps": headroom_steps,
                               "headroom_hours": headroom_hours, "storm_retractions": storm_retractions})
    full_usage, headroom_steps = settings["full_usage"], settings["headroom_steps"]
    headroom_hours, storm_retractions = settings["headroom_hours"], settings["storm_retractions"]
    value = checks.number("the pin's mem_fraction_static", entry.get("mem_fraction_static"), WatchError, above=0)
    band = "%g" % full_usage
    settings = entry.get("settings") or {}
    margin = checks.number("the pin's safety_gib", settings.get("safety_gib"), WatchError, minimum=0)
    resolution = checks.number("the pin's resolution", settings.get("resolution"), WatchError, above=0)
    pinned_at = pin_time(entry.get("time"))
    # Windows begun before the pin hold the tuner's own stress load of the value it then pinned, and a window that
    # saw a trial (its drop-in loaded) holds a later run's load, whatever became of that trial: not real traffic.
    after = [record for record in records if record["start"] >= pinned_at and _at_pin(record, value)]
    since = [record for record in after if not record.get("trial_samples")]
    evidence = {
        "windows": len(since), "from": since[0]["start"] if since else None, "to": since[-1]["end"] if since else None,
        "trial_windows": len(after) - len(since),
        "value": value, "margin_gib": margin, "full_usage": full_usage,
        "full_hours": None,
        "least_free_gib": None, "least_free_full_gib": None, "step_gib": None,
        "retractions": sum(_retracted(record) for record in since),
        "oom_lines": sum(record.get("oom_lines") or 0 for record in since),
        "restarts": _restarts(since),
        "others_peak_gib": max([gpu.get("others_peak_gib") or 0 for record in since
                                for gpu in (record.get("gpus") or {}).values()] or [0.0]),
        "token_usage_peak": max([(record.get("peaks") or {}).get("token_usage") or 0 for record in since] or [0.0]),
    }
    full_hours = sum(((record.get("bands") or {}).get(band) or {}).get("seconds") or 0 for record in since) / 3600.0
    evidence["full_hours"] = round(full_hours, 3)
    reasons = []
    least = _least(since, "least_free_gib", "least_free_gpu")
    least_full = _least([dict(record, **{"full": (record.get("bands") or {}).get(band) or {}}) for record in since],
                        None, None, band=True)
    totals = [gpu.get("total_gib") for record in since for gpu in (record.get("gpus") or {}).values()
              if gpu.get("total_gib")]
    step_gib = round(resolution * min(totals), 3) if totals else None
    evidence.update(least_free_gib=least and least[0], least_free_full_gib=least_full and least_full[0],
                    step_gib=step_gib)
    if least and least[0] < margin:
        record = least[2]
        reasons.append("the least free memory under traffic was %.2f GiB on GPU %s at %s (token usage %s), under "
                       "the pin's margin of %.2f GiB" % (least[0], least[1], _when(record["end"]),
                                                         _usage(record.get("usage_at_least_free")), margin))
    # The served process writes its own journal and can print anything: an OOM line counts only where the unit
    # started again after it (its own restart after an OOM exit, which systemd reports, not the server).
    evidence["oom_lines_after_restart"] = _ooms_with_a_restart(since)
    if evidence["oom_lines_after_restart"]:
        reasons.append("%d out-of-memory line(s) in the server's journal since the pin, each followed by a restart "
                       "of the unit" % evidence["oom_lines_after_restart"])
    claimed = evidence["oom_lines"] - evidence["oom_lines_after_restart"]
    storms = [record for record in since if _retracted(record) >= storm_retractions]
    if storms:
        worst = max(storms, key=_retracted)
        reasons.append("a retraction storm: %d request(s) retracted in the window ending %s (threshold %d)"
                       % (_retracted(worst), _when(worst["end"]), storm_retractions))
    if claimed:
        said = ("%d out-of-memory line(s) in the server's journal since the pin with no restart of the unit after "
                "them: claimed by the log only (the server can print anything), not acted on" % claimed)
    if reasons:
        # How far down a re-tune takes the pin: the missing memory in whole steps; two at least after an OOM, whose
        # shortfall no sample measured; none for retractions alone (a smaller pool retracts more, it frees nothing).
        steps = int(math.ceil((margin - least[0]) / step_gib - 1e-9)) if least and least[0] < margin and step_gib else 0
        if evidence["oom_lines_after_restart"]:
            steps = max(steps, 2)
        evidence["lower_steps"] = steps
        evidence["lower_to"] = round(value - steps * resolution, 6) if steps else None
        return {"verdict": "near_miss", "reasons": reasons + ([said] if claimed else []), "evidence": evidence}
    if claimed:
        # Reported and proposed, never acted on, and no headroom is judged from a stretch that claims a miss.
        evidence.update(lower_steps=0, lower_to=None, claimed_only=True)
        return {"verdict": "near_miss", "reasons": [said], "evidence": evidence}
    if not since:
        return {"verdict": "not_enough_traffic", "evidence": evidence,
                "reasons": ["no window of the watch since the pin (%s)" % _when(pinned_at)]}
    if full_hours < headroom_hours:
        return {"verdict": "not_enough_traffic", "evidence": evidence, "reasons": [
            "the pool was at a token usage of %s or more for %s of the %s needed to judge (peak usage %s)"
            % (_usage(full_usage), _hours(full_hours), _hours(headroom_hours),
               _usage(evidence["token_usage_peak"]))]}
    if least_full is None:
        # The pool was full, but no GPU's memory was read then (NVML and nvidia-smi failed all along).
        return {"verdict": "not_enough_traffic", "evidence": evidence, "reasons": [
            "the pool was at a token usage of %s or more for %s, but no GPU's memory was read then: nothing to judge "
            "the headroom by" % (_usage(full_usage), _hours(full_hours))]}
    spare = least_full[0] - margin
    steps = int(math.floor(spare / step_gib + 1e-9)) if step_gib else 0
    evidence["spare_steps"] = steps
    if steps > headroom_steps:
        evidence["proposed_value"] = round(value + steps * resolution, 6)
        return {"verdict": "headroom", "evidence": evidence, "reasons": [
            "at a token usage of %s or more for %s, the least free memory was %.2f GiB on GPU %s: %.2f GiB over "
            "the margin, %d steps of %s (%.2f GiB each); the pin could go up to %s"
            % (_usage(full_usage), _hours(full_hours), least_full[0], least_full[1], spare, steps, resolution,
               step_gib, evidence["proposed_value"])]}
    return {"verdict": "ok", "evidence": evidence, "reasons": [
        "at a token usage of %s or more for %s, the least free memory was %.2f GiB on GPU %s: over the margin "
        "of %.2f GiB by %d step(s), at most %d"
        % (_usage(full_usage), _hours(full_hours), least_full[0], least_full[1], margin, steps,
           headroom_steps)]}


def _ooms_with_a_restart(records):
    """The OOM lines of the windows after which the unit started again: a start in the window itself (more than one)
    or first seen in the next window."""
    count, seen = 0, set()
    for index, record in enumerate(records):
        starts = record.get("invocations") or []
        after = records[index + 1].get("invocations") or [] if index + 1 < len(records) else []
        restarted = (record.get("invocation_count") or len(starts)) > 1 \
            or any(start not in seen and start not in starts for start in after)
        seen.update(starts)
        if restarted:
            count += record.get("oom_lines") or 0
    return count


def _retracted(record):
    """Requests retracted in a window: the counter's increase, or the journal's lines where this SGLang has no
    counter."""
    return max(record.get("retractions") or 0, record.get("retracted_logged") or 0)


def _least(records, key, gpu_key, band=False):
    """(free GiB, GPU, record) of the least free memory of ``records``: the window's ``key`` and ``gpu_key``, or with
    ``band`` the least free at a full pool (the record's ``full`` band)."""
    found = None
    for record in records:
        free, gpu = ((record["full"].get("least_free_gib"), record["full"].get("gpu")) if band
                     else (record.get(key), record.get(gpu_key)))
        if free is not None and (found is None or free < found[0]):
            found = (free, gpu, record)
    return found


def _hours(value):
    """``26.10 h``, or seconds under a tenth of an hour (``42 s``)."""
    return "%.2f h" % value if value >= 0.1 else "%.0f s" % (value * 3600)


def _usage(value):
    return "-" if value is None else "%.2f" % value


def current_pool(records, invocation_id, now):
    """The running start's pool (max_total_num_tokens) from the last window, when that window saw the start
    ``invocation_id`` and ended within three windows' time of ``now``; None otherwise."""
    if not records or not invocation_id:
        return None
    last = records[-1]
    length = max(1.0, last["end"] - (last.get("start") or last["end"]))
    if invocation_id not in (last.get("invocations") or []) or last["end"] < now - 3 * length:
        return None
    return last.get("pool_tokens")


def missed_value(pin, fingerprint_hash):
    """The value that missed under real traffic (the pin's ``missed``, written when a near miss lowered it), while
    the memory picture is the one it missed on (the pin's fingerprint is ``fingerprint_hash``); else None."""
    missed = (pin or {}).get("missed")
    if not checks.is_number(missed) or not fingerprint_hash or pin.get("fingerprint_hash") != fingerprint_hash:
        return None
    return float(missed)


def same_pin(pin, entry):
    """Whether a new pin ``entry`` changes nothing of ``pin`` that the watch's windows describe: the same value on
    the same fingerprint, and a verified pool within POOL_TOLERANCE of the old one (a pool that came back smaller is
    a new memory picture, whose windows start again)."""
    pin = pin or {}
    old_tokens, new_tokens = pin.get("tokens"), entry.get("tokens")
    return bool(pin.get("time")) and pin.get("fingerprint_hash") == entry.get("fingerprint_hash") \
        and checks.is_number(pin.get("mem_fraction_static")) \
        and abs(pin["mem_fraction_static"] - entry["mem_fraction_static"]) < 1e-9 \
        and checks.is_number(old_tokens) and checks.is_number(new_tokens) and old_tokens > 0 \
        and abs(new_tokens - old_tokens) <= POOL_TOLERANCE * old_tokens


def decision(result, pin, action="propose", pool_tokens=None, pool_tolerance=POOL_TOLERANCE):
    """What the watch asks of the tuner for a unit whose pin otherwise holds: ``retune`` (why, or None), ``lower_to``
    (the value a near miss is verified at, or None: a search as usual) and ``proposal`` (what it would do, not done).
    ``result`` is :func:`verdict`'s (None without a pin); ``pool_tokens`` the running server's
    max_total_num_tokens as /metrics gives it now (None: unknown). Raises WatchError on an ``action`` or a
    ``pool_tolerance`` out of its range."""
    settings = check_settings({"action": action, "pool_tolerance": pool_tolerance})
    action, pool_tolerance = settings["action"], settings["pool_tolerance"]
    out = {"retune": None, "lower_to": None, "proposal": None}
    verified = (pin or {}).get("tokens")
    if pool_tokens and verified and pool_tokens < verified * (1 - pool_tolerance):
        out["retune"] = ("the pool came back %.0f%% smaller at the same value (%d tokens, verified %d): something "
                         "else holds memory" % (100.0 * (verified - pool_tokens) / verified, pool_tokens, verified))
        return out
    if result is None:
        return out
    evidence = result["evidence"]
    if result["verdict"] == "near_miss":
        if evidence.get("claimed_only"):
            out["proposal"] = "a near miss claimed by the server's journal (%s)" % result["reasons"][0]
        elif evidence.get("lower_to"):
            out["retune"] = ("a near miss under real traffic (%s): lowering the pin %d step(s) to %s and verifying it "
                             "under the load" % (result["reasons"][0], evidence["lower_steps"], evidence["lower_to"]))
            out["lower_to"] = evidence["lower_to"]
        else:
            out["proposal"] = ("a near miss under real traffic (%s); not lowered: a smaller pool would retract more"
                               % result["reasons"][0])
    elif result["verdict"] == "headroom":
        missed = missed_value(pin, pin.get("fingerprint_hash"))
        resolution = (pin.get("settings") or {}).get("resolution") or 0.005
        if missed is not None and pin["mem_fraction_static"] + resolution > missed - resolution + 1e-9:
            # Never back up to a value that missed under real traffic: the next step up is it, or past it.
            out["proposal"] = ("headroom under real traffic (%s), but %s missed under real traffic on this "
                               "fingerprint: the pin stays below it" % (result["reasons"][0], missed))
        elif action == "act":
            out["retune"] = "headroom under real traffic (%s): a search from the pin" % result["reasons"][0]
        else:
            out["proposal"] = ("headroom under real traffic (%s): kv_tune_watch_action=act would search from the pin"
                               % result["reasons"][0])
    return out

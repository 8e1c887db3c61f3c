# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The headroom watch's state file: windows as JSON lines, appended by the watch and kept to a bounded number
(:func:`append_records`), read back by root with every line that is not a window named (:func:`read_records`,
:func:`window_problem`).

Stdlib only; the only I/O is the state file's.
"""
from __future__ import annotations

import errno
import json
import os
import stat
from typing import Any, Callable

from ansible_collections.llmserve.sglang.plugins.module_utils import checks
from ansible_collections.llmserve.sglang.plugins.module_utils.watch.settings import WatchError, check_settings

RECORD_VERSION = 1
# A window is a line of JSON of at most this many bytes (8 GPUs, every field, are about 1.3 KiB): a longer line is
# not ours. The watch keeps its windows under it (sampler.Window).
MAX_LINE_BYTES = 16384


# The state file is readable by every local user (a capacity report need not run as root): it holds numbers of
# /metrics, which the watch GETs without a key, as any local user can, and the watch's own words; nothing the server
# wrote (fetch_metrics, parse_metrics).
STATE_MODE = 0o644


def _create(path: str, flags: int) -> int:
    """A descriptor of ``path`` (never through a link), created STATE_MODE whatever the umask."""
    descriptor = os.open(path, flags | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), STATE_MODE)
    try:
        os.fchmod(descriptor, STATE_MODE)
    except OSError:
        os.close(descriptor)
        raise
    return descriptor


def append_records(path: str, records: list[dict[str, Any]], keep: Any) -> None:
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


def _is_count(value: Any) -> bool:
    return checks.is_integer(value) and 0 <= value <= MAX_RECORD_COUNT


def _is_number_or_null(value: Any) -> bool:
    return value is None or checks.is_number(value)


def _is_gpu_or_null(value: Any) -> bool:
    return value is None or isinstance(value, str) or _is_count(value)


def _is_object_of(value: Any, entry: Callable[[Any], bool]) -> bool:
    return isinstance(value, dict) and all(isinstance(key, str) and entry(item) for key, item in value.items())


def _is_gpu_entry(value: Any) -> bool:
    return isinstance(value, dict) and all(_is_number_or_null(value.get(key)) for key in (
        "least_free_gib", "usage_then", "total_gib", "others_peak_gib"))


def _is_band(value: Any) -> bool:
    return (isinstance(value, dict) and checks.is_number(value.get("seconds")) and value["seconds"] >= 0
            and _is_number_or_null(value.get("least_free_gib")) and _is_gpu_or_null(value.get("gpu")))


# What each field of a window must be, where the window has it (the verdict, the tuner and the capacity report read
# them as such), and how the reader says what is wrong. start and end are required.
_FIELDS: dict[str, tuple[Callable[[Any], bool], str]] = {
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


def window_problem(record: Any) -> str | None:
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


def read_records(path: str, since: float | None = None) -> tuple[list[dict[str, Any]], list[str]]:
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
    records: list[dict[str, Any]] = []
    bad: list[str] = []
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

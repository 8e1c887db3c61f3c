# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The server's journal as a verdict reads it: its OOM and retraction lines, counted into the windows each fell in.

The server's journal is not the watch's to read (SGLang logs its server_args there, the API key among them): root
reads the lines of JOURNAL_GREP's patterns with their times (kv_watch_facts, kv_fingerprint's watch) and counts them
into the windows (:func:`journal_events`, :func:`attach_journal`) before a verdict.

Stdlib only, no I/O.
"""
from __future__ import annotations

import bisect
import math
import re
from typing import Any

from ansible_collections.llmserve.sglang.plugins.module_utils.watch.metrics import MAX_COUNT

# SGLang's retraction line (scheduler, 0.4 to 0.5.23) and torch's or CUDA's device OOM (as startup_failure reads it).
RETRACT_LINE = re.compile(r"KV cache pool is full\. Retract requests\. #retracted_reqs: ([0-9]+)")
OOM_LINE = re.compile(
    r"OutOfMemoryError|(?:CUDA|HIP|NPU|XPU|MUSA) out of memory|CUDA error: out of memory"
    r"|memory allocation failed with OOM"
)

# What root reads of the server's journal for a verdict, the lines of these patterns with their times: the watch
# itself does not read it, as SGLang logs its server_args there, the API key among them (journalctl's --grep, PCRE2).
JOURNAL_GREP = "%s|%s" % (RETRACT_LINE.pattern, OOM_LINE.pattern)
# The most lines of it a verdict reads (the newest): a server that floods its journal with them bounds nothing else.
MAX_JOURNAL_LINES = 20000


def journal_events(text: str) -> list[tuple[float, str]]:
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


def attach_journal(records: list[dict[str, Any]], events: list[tuple[float, str]]) -> list[dict[str, Any]]:
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


def journal_counts(lines: list[str]) -> tuple[int, int, int, int]:
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

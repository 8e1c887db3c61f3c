# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Where a unit's tuning run is, for the people and tools that watch it: one line when the phase changes, and again
at least every HEARTBEAT_S while a server loads or is under load (a 500 GB model loads for minutes).

The lines are plain text with a fixed shape, ``[kv_tune] <label>: <phase> <value> (<detail>)``, so that a terminal,
AWX's job output and a program reading ansible-runner's events (PROGRESS_LINE) all read the same thing.
"""
from __future__ import annotations

import re
from typing import Any, Callable

from ansible_collections.llmserve.sglang.plugins.module_utils.capacity import kv_search

HEARTBEAT_S = 20.0
PREFIX = "[kv_tune] "
# label, phase, value (may be absent), detail (may be absent)
PROGRESS_LINE = re.compile(r"^\[kv_tune\] (?P<label>.+?): (?P<phase>[a-z][a-z ]*?)(?: (?P<value>[0-9][0-9.]*))?"
                           r"(?: \((?P<detail>[^()]*)\))?$")
# Phases with a wait long enough to need a heartbeat.
_WAITS = ("loading", "under load")


def call_phase(name: str, args: Any, restarted: bool = False) -> tuple[str, Any, Any] | None:
    """The phase that a module call of the tuner starts for its unit, or None when the call does not move it:
    (phase, value text or None, seconds the phase is planned to last or None). A fingerprint is the probe only as
    the run's first call (Progress keeps that). ``restarted``: the unit was restarted onto the value in hand (a
    trial's start or a revert), so a wait for it is a load and its commit a new pin; otherwise the wait checks the
    server that runs ("checking") and the commit keeps the value measured in place ("kept")."""
    if name == "kv_trial":
        phase = {"started": "restarting", "committed": "pinned" if restarted else "kept",
                 "reverted": "reverted"}.get(args.get("state"))
        return (phase, args.get("value"), None) if phase else None
    if name == "kv_fingerprint":
        return ("probe", None, None)
    if name == "sglang_ready":
        return ("loading" if restarted else "checking", None, None)
    if name == "kv_stress":
        return ("under load", None, args.get("duration"))
    return None


def shown_value(value: float) -> str:
    """A value as the progress lines show it, which do not know the run's grid: kv_search's written form
    (value_text) on the 0.001 grid when the value lies on it, else on the finest grid (0.0001), to which it is rounded:
    0.91 -> "0.910", 0.8855 -> "0.8855"."""
    shown = round(value, 4)
    return kv_search.value_text(shown, 0.001 if kv_search.on_grid(shown, 0.001) else kv_search.MIN_RESOLUTION)


class Progress(object):
    """The progress of one unit's run. ``clock`` gives seconds (monotonic); each method returns the line to show
    now, or None."""

    def __init__(self, label: str, clock: Callable[[], float]) -> None:
        self.label, self.clock = label, clock
        self.phase: str | None = None
        self.value: str | None = None
        self.planned: float | None = None
        self.since: float | None = None
        self.said: float | None = None
        self.restarted = False   # since the last commit: a start (a trial's, or a revert's) onto the value in hand
        self.lkg: str | None = None   # the value this run last committed

    def on_call(self, name: str, args: dict[str, Any]) -> str | None:
        found = call_phase(name, args, self.restarted)
        if found is None or (found[0] == "probe" and self.phase is not None):
            return None
        if name == "kv_trial":
            self.restarted = found[0] in ("restarting", "reverted")
        phase, value, planned = found
        now = self.clock()
        # The value of a start stays the value of the load and of what follows, until the next start.
        self.value = value if value is not None else self.value
        self.phase, self.planned, self.since, self.said = phase, planned, now, now
        line = self.line(now)
        if phase in ("kept", "pinned"):
            self.lkg = self.value
        elif phase == "reverted" and self.lkg:   # the trial's value said, the last-known-good one loads next
            self.value = self.lkg
        return line

    def on_end(self, name: str, result: dict[str, Any]) -> str | None:
        """After a call that can end a phase: a start, a wait for the server or a load that failed; a server that
        answered (ready); a load that held (verified: the run judges its headroom next)."""
        if name == "kv_fingerprint" and self.value is None and result.get("mem_fraction_static"):
            # The value the server runs: what a load measured in place, without a start, is a load of.
            self.value = shown_value(result["mem_fraction_static"])
        if self.phase is None or name not in ("kv_trial", "sglang_ready", "kv_stress"):
            return None
        if result.get("failed") or result.get("held") is False or result.get("ready") is False:
            phase = "failed"
        elif name == "kv_trial":
            return None
        else:
            # a server that answered after a start is ready; one checked where it ran already is serving
            phase = ("ready" if self.phase == "loading" else "serving") if name == "sglang_ready" else "verified"
        self.phase, self.since, self.said = phase, None, None
        return self.line(self.clock())

    def heartbeat(self) -> str | None:
        """While a server loads or is under load: the line again, with the time spent, every HEARTBEAT_S."""
        if self.phase not in _WAITS or self.said is None:
            return None
        now = self.clock()
        if now - self.said < HEARTBEAT_S:
            return None
        self.said = now
        return self.line(now)

    def line(self, now: float) -> str:
        detail = None
        if self.since is not None and self.phase in _WAITS and now > self.since:
            spent = int(now - self.since)
            detail = "%d/%d s" % (spent, int(self.planned)) if self.planned else "%d s" % spent
        return "%s%s: %s%s%s" % (PREFIX, self.label, self.phase, " %s" % self.value if self.value else "",
                                 " (%s)" % detail if detail else "")


def parse_line(text: str) -> dict[str, Any] | None:
    """A progress line as {label, phase, value, detail} (value and detail may be None), or None for any other line."""
    found = PROGRESS_LINE.match(text.strip())
    return found.groupdict() if found else None

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The headroom watch's settings: the range of each (BOUNDS) and their check (:func:`check_settings`), the bands of
token usage a window keeps, and where a server's watch lives (:func:`watch_unit`, :func:`state_path`).

Stdlib only, no I/O.
"""
from __future__ import annotations

from typing import Any

from ansible_collections.llmserve.sglang.plugins.module_utils import checks
from ansible_collections.llmserve.sglang.plugins.module_utils.service import kv_pin

# The token usage from which the pool counts as full: SGLang admits requests while it can reserve their tokens and
# retracts near the top, so a usage of 0.9 is the pool under real pressure.
FULL_USAGE = 0.9
# Each window keeps, per band of token usage, the seconds spent at or above it and the least free memory then, so
# that a verdict may count any of these as full (kv_watch_facts full_usage) after the fact.
BANDS = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95)

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


class WatchError(checks.InvalidInput):
    """A state file or a setting the watch cannot use; the message names it."""


def bound_text(name: str) -> str:
    """The range of setting ``name`` as the messages and the docs write it: ``[1, 20160] windows``."""
    low, high, unit, _why = BOUNDS[name]
    return "[%s, %s] %s" % (low, high, unit)


def check_settings(raw: Any, prefix: str = "") -> dict[str, Any]:
    """The watch's settings in ``raw`` (any of BOUNDS' names, full_usage and action; state_path passes as it is)
    checked and typed. WatchError names the setting as ``prefix`` + its name (``kv_tune_watch_keep``, ``--keep``),
    its range and why."""
    if not isinstance(raw, dict):
        raise WatchError("the headroom watch's settings must be a dictionary, got %r" % (raw,))
    out: dict[str, Any] = {}
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


def unit_stem(unit: str) -> str:
    """The server ``unit``'s name in the watch's own names (its unit, its metrics file): sglang, sglang-a for
    sglang@a.service. WatchError on a name that is not a unit the tuner takes."""
    try:
        return kv_pin.unit_stem(kv_pin.check_unit(unit))
    except kv_pin.PinError as exc:
        raise WatchError(str(exc)) from None


def watch_unit(unit: str) -> str:
    """The watch's unit of the server ``unit``: llmserve-kv-watch-sglang.service, llmserve-kv-watch-sglang-a.service
    for sglang@a.service (a plain name: a second '@' would make it an instance of a template)."""
    return "llmserve-kv-watch-%s.service" % unit_stem(unit)


def state_path(unit: str) -> str:
    """The watch's state file of the server ``unit``: in its StateDirectory=%N, /var/lib/<the watch's unit>."""
    return "/var/lib/%s/windows.jsonl" % watch_unit(unit)[:-len(".service")]

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The tuner's settings: the role's kv_tune_* variables checked and typed before anything on the host changes,
and the error every tuner module raises for a setting or an observation it cannot work with."""
from __future__ import annotations

import re
from typing import Any

from ansible_collections.llmserve.sglang.plugins.module_utils import checks
from ansible_collections.llmserve.sglang.plugins.module_utils.service import kv_pin
from ansible_collections.llmserve.sglang.plugins.module_utils.capacity import kv_search
from ansible_collections.llmserve.sglang.plugins.module_utils.watch import settings as watch_settings

_UNIT_NAME = re.compile(r"^[A-Za-z0-9_.@-]+\.service$")


class TuneError(checks.InvalidInput):
    """A setting or an observation the tuner cannot work with; the message says which and what to do."""


STRATEGIES = ("per_host", "per_class")

# The closed range of each numeric setting, with its unit and why: far beyond what a real deployment needs, so that
# a typo (1e12 seconds of load, a poll every nanosecond, a load that fills nothing) is refused before the host is
# touched. The role's argument specs and the module docs state the same ranges (test_kv_tune_contract.py).
BOUNDS = {
    "safety_gib": (0, 64, "GiB", "more than a quarter of the largest GPU's memory would leave no pool to tune"),
    "budget": (1, 30, "trials", "each trial is a restart of the server"),
    "ready_timeout": (1, 21600, "seconds", "six hours: the largest models load in well under that"),
    "ready_interval": (0.1, 60, "seconds", "a faster poll only loads the server; a slower one wastes the trial"),
    "stress_duration": (1, 3600, "seconds", "an hour of load per trial; the pool fills within minutes"),
    "confirm_timeout": kv_pin.CONFIRM_TIMEOUT_BOUNDS,
    "stress_fill_ratio": (0.5, 1, "of the pool", "a load holding less than half the pool says nothing about the "
                                                 "largest batches"),
}


def bound_text(name: str) -> str:
    """The range of setting ``name`` as the messages and the docs write it: ``[1, 3600] seconds``."""
    low, high, unit, _why = BOUNDS[name]
    return "[%s, %s] %s" % (low, high, unit)


def check_settings(raw: dict[str, Any]) -> dict[str, Any]:
    """The tuner's settings (the role's kv_tune_* variables without the prefix) checked and typed. Raises TuneError
    with the variable's name before anything on the host changes."""
    def need(ok: Any, msg: str) -> None:
        if not ok:
            raise TuneError("Invalid input for llmserve.sglang.kv_tune: " + msg)

    def num(name: str, kind: type = float) -> Any:
        try:
            value = checks.parse_number("kv_tune_" + name, raw.get(name), kind, TuneError)
        except TuneError as exc:
            raise TuneError("Invalid input for llmserve.sglang.kv_tune: %s" % exc) from None
        if name in BOUNDS:
            low, high, _unit, why = BOUNDS[name]
            need(low <= value <= high, "kv_tune_%s must lie in %s (got %g): %s."
                 % (name, bound_text(name), value, why))
        return value

    unit = str(raw.get("unit") or "")
    need(_UNIT_NAME.match(unit), "kv_tune_unit must be a systemd service name such as sglang.service (got '%s')."
         % unit)
    settings: dict[str, Any] = {"unit": unit, "force": bool(raw.get("force")), "start": None}
    if raw.get("start") is not None:
        settings["start"] = num("start")
        need(0 < settings["start"] < 1, "kv_tune_start must lie strictly between 0 and 1 (got %s)." % raw["start"])
    settings["cap"] = num("cap")
    need(0 < settings["cap"] < 1, "kv_tune_cap must lie strictly between 0 and 1 (got %s)." % raw["cap"])
    need(settings["start"] is None or settings["cap"] >= settings["start"],
         "kv_tune_cap (%s) is below kv_tune_start (%s): there is nothing to search." % (raw["cap"], raw["start"]))
    settings["resolution"] = num("resolution")
    try:
        kv_search.check_resolution(settings["resolution"])
    except kv_search.KvSearchError:
        need(False, "kv_tune_resolution must be a decimal step in [%s, 0.1] such as 0.005 or 0.0005 (got %s)."
             % (kv_search.MIN_RESOLUTION, raw["resolution"]))
    need(settings["start"] is None or kv_search.on_grid(settings["start"], settings["resolution"]),
         "kv_tune_start (%s) is not on the kv_tune_resolution grid (%s)." % (raw.get("start"), raw["resolution"]))
    settings["safety_gib"] = num("safety_gib")
    settings["budget"] = num("budget", int)
    settings["min_tokens"] = None if raw.get("min_tokens") is None else num("min_tokens", int)
    need(settings["min_tokens"] is None or settings["min_tokens"] > 0,
         "kv_tune_min_tokens must be a positive token count (got %s)." % raw.get("min_tokens"))
    for name in ("ready_timeout", "ready_interval", "stress_duration", "confirm_timeout"):
        settings[name] = num(name)
    need(settings["ready_interval"] <= settings["ready_timeout"],
         "kv_tune_ready_interval (%s) must not exceed kv_tune_ready_timeout (%s): the server would get one poll."
         % (raw["ready_interval"], raw["ready_timeout"]))
    need(settings["confirm_timeout"] > settings["ready_timeout"] + settings["stress_duration"],
         "kv_tune_confirm_timeout (%s) must be longer than a trial (ready timeout + load), or the host would revert "
         "a trial that is still running." % raw["confirm_timeout"])
    settings["stress_fill_ratio"] = num("stress_fill_ratio")
    settings["strategy"] = str(raw.get("strategy") or "per_host")
    need(settings["strategy"] in STRATEGIES, "kv_tune_strategy must be one of %s (got '%s')."
         % (", ".join(STRATEGIES), settings["strategy"]))
    settings["class_margin_steps"] = num("class_margin_steps", int) if raw.get("class_margin_steps") is not None else 0
    need(0 <= settings["class_margin_steps"] <= 20,
         "kv_tune_class_margin_steps must be a whole number of grid steps in [0, 20] (got %s)."
         % raw.get("class_margin_steps"))
    settings["pin_tokens"] = bool(raw.get("pin_tokens"))
    # The headroom watch's settings (the role's kv_tune_watch_*), within the watch's own ranges (watch.settings.BOUNDS).
    settings["watch"] = None
    if raw.get("watch") is not None:
        try:
            settings["watch"] = watch_settings.check_settings(raw["watch"], "kv_tune_watch_")
        except watch_settings.WatchError as exc:
            need(False, str(exc))
    settings["run_id"] = raw.get("run_id")
    if settings["run_id"] is not None:
        try:
            kv_pin.check_run_id(settings["run_id"])
        except kv_pin.PinError as exc:
            need(False, "kv_tune_run_id: %s (the run of rollout.yml that holds the unit's lock)." % exc)
    return settings


def with_defaults(args: dict[str, Any]) -> dict[str, Any]:
    """The action's arguments with the default that depends on others: kv_tune_confirm_timeout, unset, outlasts a
    trial (the ready timeout and two loads) by ten minutes."""
    if args.get("confirm_timeout") is not None:
        return args
    if not all(checks.is_number(args.get(name)) for name in ("ready_timeout", "stress_duration")):
        return args     # check_settings names the bad one; int() of an infinity would raise here
    return dict(args, confirm_timeout=int(args["ready_timeout"] + 2 * args["stress_duration"] + 600))

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The tuner's settings: the role's kv_tune_* variables checked and typed before anything on the host changes,
and the error every tuner module raises for a setting or an observation it cannot work with."""
from __future__ import annotations

import re

from ansible_collections.llmserve.sglang.plugins.module_utils import checks, kv_search

_UNIT_NAME = re.compile(r"^[A-Za-z0-9_.@-]+\.service$")


class TuneError(checks.InvalidInput):
    """A setting or an observation the tuner cannot work with; the message says which and what to do."""


STRATEGIES = ("per_host", "per_class")


def check_settings(raw):
    """The tuner's settings (the role's kv_tune_* variables without the prefix) checked and typed. Raises TuneError
    with the variable's name before anything on the host changes."""
    def need(ok, msg):
        if not ok:
            raise TuneError("Invalid input for llmserve.sglang.kv_tune: " + msg)

    def num(name, kind=float):
        try:
            return checks.parse_number("kv_tune_" + name, raw.get(name), kind, TuneError)
        except TuneError as exc:
            raise TuneError("Invalid input for llmserve.sglang.kv_tune: %s" % exc) from None

    unit = str(raw.get("unit") or "")
    need(_UNIT_NAME.match(unit), "kv_tune_unit must be a systemd service name such as sglang.service (got '%s')."
         % unit)
    settings = {"unit": unit, "force": bool(raw.get("force")), "start": None}
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
    need(settings["safety_gib"] >= 0, "kv_tune_safety_gib must be >= 0 (got %s)." % raw["safety_gib"])
    settings["budget"] = num("budget", int)
    need(settings["budget"] >= 1, "kv_tune_budget must be at least 1 (got %s)." % raw["budget"])
    settings["min_tokens"] = None if raw.get("min_tokens") is None else num("min_tokens", int)
    need(settings["min_tokens"] is None or settings["min_tokens"] > 0,
         "kv_tune_min_tokens must be a positive token count (got %s)." % raw.get("min_tokens"))
    for name in ("ready_timeout", "ready_interval", "stress_duration", "confirm_timeout"):
        settings[name] = num(name)
    need(settings["ready_timeout"] > 0 and settings["ready_interval"] > 0 and settings["stress_duration"] > 0
         and settings["confirm_timeout"] > settings["ready_timeout"] + settings["stress_duration"],
         "kv_tune_ready_timeout, kv_tune_ready_interval and kv_tune_stress_duration must be > 0, and "
         "kv_tune_confirm_timeout (%s) longer than a trial (ready timeout + load), or the host would revert a trial "
         "that is still running." % raw["confirm_timeout"])
    settings["stress_fill_ratio"] = num("stress_fill_ratio")
    need(0 < settings["stress_fill_ratio"] <= 1,
         "kv_tune_stress_fill_ratio must lie in (0, 1] (got %s)." % raw["stress_fill_ratio"])
    settings["strategy"] = str(raw.get("strategy") or "per_host")
    need(settings["strategy"] in STRATEGIES, "kv_tune_strategy must be one of %s (got '%s')."
         % (", ".join(STRATEGIES), settings["strategy"]))
    settings["class_margin_steps"] = num("class_margin_steps", int) if raw.get("class_margin_steps") is not None else 1
    need(0 <= settings["class_margin_steps"] <= 20,
         "kv_tune_class_margin_steps must be a whole number of grid steps in [0, 20] (got %s)."
         % raw.get("class_margin_steps"))
    return settings


def with_defaults(args):
    """The action's arguments with the default that depends on others: kv_tune_confirm_timeout, unset, outlasts a
    trial (the ready timeout and two loads) by ten minutes."""
    if args.get("confirm_timeout") is not None:
        return args
    return dict(args, confirm_timeout=int(args["ready_timeout"] + 2 * args["stress_duration"] + 600))

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The headroom watch: what a pinned --mem-fraction-static leaves free under real traffic, and what the tuner does
about it. This file holds the last step, what the watch asks of the tuner for a unit whose pin otherwise holds
(:func:`decision`, read by kv_fingerprint's watch on every probe), and what the tuner keeps of the watch across a
re-pin (:func:`missed_value`, :func:`same_pin`).

The watch's other parts, each in a file of this folder:

- settings.py: the range of every setting of the watch and of its readers, and where a server's watch lives.
- metrics.py: SGLang's Prometheus ``/metrics``, fetched and parsed (the server is not trusted).
- sampler.py: the watch service's loop on the host (roles/sglang_service, ``llmserve-kv-watch``): samples folded
  into fixed windows.
- store.py: the state file of windows, bounded, and its reader.
- journal.py: the server's OOM and retraction lines, read by root and counted into the windows.
- verdict.py: the windows since the pin against the pin's margin: ``near_miss``, ``headroom``, ``ok`` or
  ``not_enough_traffic``, with the evidence in words and numbers.

Stdlib only, no I/O.
"""
from __future__ import annotations

from typing import Any

from ansible_collections.llmserve.sglang.plugins.module_utils import checks
from ansible_collections.llmserve.sglang.plugins.module_utils.watch.settings import POOL_TOLERANCE, check_settings


def current_pool(records: list[dict[str, Any]], invocation_id: str | None, now: float) -> Any:
    """The running start's pool (max_total_num_tokens) from the last window, when that window saw the start
    ``invocation_id`` and ended within three windows' time of ``now``; None otherwise."""
    if not records or not invocation_id:
        return None
    last = records[-1]
    length = max(1.0, last["end"] - (last.get("start") or last["end"]))
    if invocation_id not in (last.get("invocations") or []) or last["end"] < now - 3 * length:
        return None
    return last.get("pool_tokens")


def missed_value(pin: dict[str, Any] | None, fingerprint_hash: str | None) -> float | None:
    """The value that missed under real traffic (the pin's ``missed``, written when a near miss lowered it), while
    the memory picture is the one it missed on (the pin's fingerprint is ``fingerprint_hash``); else None."""
    pin = pin or {}
    missed: Any = pin.get("missed")
    if not checks.is_number(missed) or not fingerprint_hash or pin.get("fingerprint_hash") != fingerprint_hash:
        return None
    return float(missed)


def same_pin(pin: dict[str, Any] | None, entry: dict[str, Any]) -> bool:
    """Whether a new pin ``entry`` changes nothing of ``pin`` that the watch's windows describe: the same value on
    the same fingerprint, and a verified pool within POOL_TOLERANCE of the old one (a pool that came back smaller is
    a new memory picture, whose windows start again)."""
    pin = pin or {}
    old_tokens: Any = pin.get("tokens")
    new_tokens: Any = entry.get("tokens")
    return bool(pin.get("time")) and pin.get("fingerprint_hash") == entry.get("fingerprint_hash") \
        and checks.is_number(pin.get("mem_fraction_static")) \
        and abs(pin["mem_fraction_static"] - entry["mem_fraction_static"]) < 1e-9 \
        and checks.is_number(old_tokens) and checks.is_number(new_tokens) and old_tokens > 0 \
        and abs(new_tokens - old_tokens) <= POOL_TOLERANCE * old_tokens


def decision(result: dict[str, Any] | None, pin: dict[str, Any], action: Any = "propose", pool_tokens: Any = None,
             pool_tolerance: Any = POOL_TOLERANCE) -> dict[str, Any]:
    """What the watch asks of the tuner for a unit whose pin otherwise holds: ``retune`` (why, or None), ``lower_to``
    (the value a near miss is verified at, or None: a search as usual) and ``proposal`` (what it would do, not done).
    ``result`` is verdict.verdict's (None without a pin); ``pool_tokens`` the running server's
    max_total_num_tokens as /metrics gives it now (None: unknown). Raises WatchError on an ``action`` or a
    ``pool_tolerance`` out of its range."""
    settings = check_settings({"action": action, "pool_tolerance": pool_tolerance})
    action, pool_tolerance = settings["action"], settings["pool_tolerance"]
    out: dict[str, Any] = {"retune": None, "lower_to": None, "proposal": None}
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

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The headroom watch's verdict (:func:`verdict`, run by kv_watch_facts and kv_fingerprint's watch): the windows
since the pin against the pin's margin: ``near_miss``, ``headroom``, ``ok`` or ``not_enough_traffic``, with the
evidence in words and numbers.

Stdlib only, no I/O.
"""
from __future__ import annotations

import calendar
import math
import time
from typing import Any, Sequence

from ansible_collections.llmserve.sglang.plugins.module_utils import checks
from ansible_collections.llmserve.sglang.plugins.module_utils.watch.settings import (
    FULL_USAGE,
    WatchError,
    check_settings,
)

VERDICTS = ("near_miss", "headroom", "ok", "not_enough_traffic")


def _when(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(seconds))


def pin_time(value: Any) -> float:
    """The Unix time of a pin's ``time`` (the tuner writes 2026-12-05T10:00:00Z; a number is taken as it is)."""
    if checks.is_number(value):
        return float(value)
    try:
        return float(calendar.timegm(time.strptime(str(value), "%Y-%m-%dT%H:%M:%SZ")))
    except ValueError:
        raise WatchError("the pin's time must be a time such as 2026-12-05T10:00:00Z, got %r" % (value,))


def _at_pin(record: dict[str, Any], value: float) -> bool:
    return record.get("value") is None or abs(record["value"] - value) < 1e-6


def verdict(entry: dict[str, Any], records: list[dict[str, Any]], full_usage: Any = FULL_USAGE,
            headroom_steps: Any = 2, headroom_hours: Any = 24.0, storm_retractions: Any = 20,
            unreadable: Sequence[str] = ()) -> dict[str, Any]:
    """What the windows since the pin say about it. ``entry`` is the unit's fact entry (mem_fraction_static, time,
    settings.safety_gib and .resolution); ``unreadable`` the state file's lines that are not windows (read_records'
    second list), which the verdict counts (evidence unreadable_lines) and names in its last reason. Returns
    {verdict, reasons, evidence}; reasons are sentences, evidence the numbers they come from."""
    settings = check_settings({"full_usage": full_usage, "headroom_steps": headroom_steps,
                               "headroom_hours": headroom_hours, "storm_retractions": storm_retractions})
    result = _verdict(_pin(entry), records, settings)
    result["evidence"]["unreadable_lines"] = len(unreadable)
    if unreadable:
        result["reasons"].append("%d line(s) of the watch's state file could not be read and are left out of this "
                                 "verdict (%s)" % (len(unreadable), unreadable[0]))
    return result


def _pin(entry: dict[str, Any]) -> dict[str, Any]:
    """What a verdict judges the pin ``entry`` by: its value, margin (safety_gib, GiB), grid step (resolution) and
    the Unix time it was made. Raises WatchError on any of them missing or out of range."""
    value = checks.number("the pin's mem_fraction_static", entry.get("mem_fraction_static"), WatchError, above=0)
    settings = entry.get("settings") or {}
    return {"value": value,
            "margin": checks.number("the pin's safety_gib", settings.get("safety_gib"), WatchError, minimum=0),
            "resolution": checks.number("the pin's resolution", settings.get("resolution"), WatchError, above=0),
            "time": pin_time(entry.get("time"))}


def _verdict(pin: dict[str, Any], records: list[dict[str, Any]], settings: dict[str, Any]) -> dict[str, Any]:
    """:func:`verdict`'s result on ``pin`` (:func:`_pin`'s) and the checked ``settings``: a near miss first, then
    too little traffic to judge, else headroom or ok."""
    # Windows begun before the pin hold the tuner's own stress load of the value it then pinned, and a window that
    # saw a trial (its drop-in loaded) holds a later run's load, whatever became of that trial: not real traffic.
    after = [record for record in records if record["start"] >= pin["time"] and _at_pin(record, pin["value"])]
    since = [record for record in after if not record.get("trial_samples")]
    evidence, full_hours, least, least_full = _evidence(pin, since, after, settings["full_usage"])
    return (_near_miss(pin, evidence, since, least, settings["storm_retractions"])
            or _not_enough_traffic(pin, evidence, since, full_hours, least_full, settings)
            or _headroom_or_ok(pin, evidence, full_hours, least_full, settings))


def _evidence(pin: dict[str, Any], since: list[dict[str, Any]], after: list[dict[str, Any]],
              full_usage: float) -> tuple[dict[str, Any], float, Any, Any]:
    """(the evidence of the pin's windows ``since`` (``after`` with the trials' too), the hours at a full pool
    unrounded, :func:`_least` of them all, :func:`_least` at a full pool)."""
    band = "%g" % full_usage
    evidence = {
        "windows": len(since), "from": since[0]["start"] if since else None, "to": since[-1]["end"] if since else None,
        "trial_windows": len(after) - len(since),
        "value": pin["value"], "margin_gib": pin["margin"], "full_usage": full_usage,
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
    least = _least(since, "least_free_gib", "least_free_gpu")
    least_full = _least([dict(record, **{"full": (record.get("bands") or {}).get(band) or {}}) for record in since],
                        None, None, band=True)
    totals = [gpu.get("total_gib") for record in since for gpu in (record.get("gpus") or {}).values()
              if gpu.get("total_gib")]
    step_gib = round(pin["resolution"] * min(totals), 3) if totals else None
    evidence.update(least_free_gib=least and least[0], least_free_full_gib=least_full and least_full[0],
                    step_gib=step_gib)
    # The served process writes its own journal and can print anything: an OOM line counts only where the unit
    # started again after it (its own restart after an OOM exit, which systemd reports, not the server).
    evidence["oom_lines_after_restart"] = _ooms_with_a_restart(since)
    return evidence, full_hours, least, least_full


def _near_miss(pin: dict[str, Any], evidence: dict[str, Any], since: list[dict[str, Any]], least: Any,
               storm_retractions: int) -> dict[str, Any] | None:
    """The ``near_miss`` result of the windows ``since`` the pin, with how far down a re-tune takes it; None when
    they hold no miss, not even one claimed by the server's journal alone."""
    reasons = _miss_reasons(pin, evidence, since, least, storm_retractions)
    claimed = evidence["oom_lines"] - evidence["oom_lines_after_restart"]
    if claimed:
        said = ("%d out-of-memory line(s) in the server's journal since the pin with no restart of the unit after "
                "them: claimed by the log only (the server can print anything), not acted on" % claimed)
    if reasons:
        steps = _lower_steps(pin, evidence, least)
        evidence["lower_steps"] = steps
        evidence["lower_to"] = round(pin["value"] - steps * pin["resolution"], 6) if steps else None
        return {"verdict": "near_miss", "reasons": reasons + ([said] if claimed else []), "evidence": evidence}
    if claimed:
        # Reported and proposed, never acted on, and no headroom is judged from a stretch that claims a miss.
        evidence.update(lower_steps=0, lower_to=None, claimed_only=True)
        return {"verdict": "near_miss", "reasons": [said], "evidence": evidence}
    return None


def _miss_reasons(pin: dict[str, Any], evidence: dict[str, Any], since: list[dict[str, Any]], least: Any,
                  storm_retractions: int) -> list[str]:
    """The misses the windows ``since`` the pin measured, in words: free memory under the margin, OOM lines each
    followed by the unit's restart, a retraction storm."""
    reasons = []
    margin = pin["margin"]
    if least and least[0] < margin:
        record = least[2]
        reasons.append("the least free memory under traffic was %.2f GiB on GPU %s at %s (token usage %s), under "
                       "the pin's margin of %.2f GiB" % (least[0], least[1], _when(record["end"]),
                                                         _usage(record.get("usage_at_least_free")), margin))
    if evidence["oom_lines_after_restart"]:
        reasons.append("%d out-of-memory line(s) in the server's journal since the pin, each followed by a restart "
                       "of the unit" % evidence["oom_lines_after_restart"])
    storms = [record for record in since if _retracted(record) >= storm_retractions]
    if storms:
        worst = max(storms, key=_retracted)
        reasons.append("a retraction storm: %d request(s) retracted in the window ending %s (threshold %d)"
                       % (_retracted(worst), _when(worst["end"]), storm_retractions))
    return reasons


def _lower_steps(pin: dict[str, Any], evidence: dict[str, Any], least: Any) -> int:
    """How far down a re-tune takes the pin: the missing memory in whole steps; two at least after an OOM, whose
    shortfall no sample measured; none for retractions alone (a smaller pool retracts more, it frees nothing)."""
    margin, step_gib = pin["margin"], evidence["step_gib"]
    steps = int(math.ceil((margin - least[0]) / step_gib - 1e-9)) if least and least[0] < margin and step_gib else 0
    if evidence["oom_lines_after_restart"]:
        steps = max(steps, 2)
    return steps


def _not_enough_traffic(pin: dict[str, Any], evidence: dict[str, Any], since: list[dict[str, Any]],
                        full_hours: float, least_full: Any, settings: dict[str, Any]) -> dict[str, Any] | None:
    """The ``not_enough_traffic`` result where the windows ``since`` the pin cannot show headroom: none at all, too
    few hours at a full pool, or no GPU's memory read then; None where they can."""
    full_usage, headroom_hours = settings["full_usage"], settings["headroom_hours"]
    if not since:
        return {"verdict": "not_enough_traffic", "evidence": evidence,
                "reasons": ["no window of the watch since the pin (%s)" % _when(pin["time"])]}
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
    return None


def _headroom_or_ok(pin: dict[str, Any], evidence: dict[str, Any], full_hours: float, least_full: Any,
                    settings: dict[str, Any]) -> dict[str, Any]:
    """``headroom`` (with the value the pin could go up to) where the least free memory at a full pool is over the
    margin by more than the headroom steps, else ``ok``."""
    value, margin, resolution, step_gib = pin["value"], pin["margin"], pin["resolution"], evidence["step_gib"]
    full_usage, headroom_steps = settings["full_usage"], settings["headroom_steps"]
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


def _restarts(records: list[dict[str, Any]]) -> int:
    """The restarts the windows saw: their distinct starts less one, and the starts each window counted beyond the
    last MAX_INVOCATIONS it kept."""
    listed = {i for record in records for i in record.get("invocations") or []}
    beyond = sum(max(0, (record.get("invocation_count") or 0) - len(record.get("invocations") or []))
                 for record in records)
    return max(0, len(listed) + beyond - 1)


def _ooms_with_a_restart(records: list[dict[str, Any]]) -> int:
    """The OOM lines of the windows after which the unit started again: a start in the window itself (more than one)
    or first seen in the next window."""
    count = 0
    seen: set[str] = set()
    for index, record in enumerate(records):
        starts = record.get("invocations") or []
        after = records[index + 1].get("invocations") or [] if index + 1 < len(records) else []
        restarted = (record.get("invocation_count") or len(starts)) > 1 \
            or any(start not in seen and start not in starts for start in after)
        seen.update(starts)
        if restarted:
            count += record.get("oom_lines") or 0
    return count


def _retracted(record: dict[str, Any]) -> int:
    """Requests retracted in a window: the counter's increase, or the journal's lines where this SGLang has no
    counter."""
    return max(record.get("retractions") or 0, record.get("retracted_logged") or 0)


def _least(records: list[dict[str, Any]], key: Any, gpu_key: Any,
           band: bool = False) -> tuple[Any, Any, dict[str, Any]] | None:
    """(free GiB, GPU, record) of the least free memory of ``records``: the window's ``key`` and ``gpu_key``, or with
    ``band`` the least free at a full pool (the record's ``full`` band)."""
    found = None
    for record in records:
        free, gpu = ((record["full"].get("least_free_gib"), record["full"].get("gpu")) if band
                     else (record.get(key), record.get(gpu_key)))
        if free is not None and (found is None or free < found[0]):
            found = (free, gpu, record)
    return found


def _hours(value: float) -> str:
    """``26.10 h``, or seconds under a tenth of an hour (``42 s``)."""
    return "%.2f h" % value if value >= 0.1 else "%.0f s" % (value * 3600)


def _usage(value: float | None) -> str:
    return "-" if value is None else "%.2f" % value

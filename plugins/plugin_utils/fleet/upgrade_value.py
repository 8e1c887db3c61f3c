# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The value the upgrade's own restart starts a server on: the one the tuner would try first on the new release.

Where nothing the formula knows changes, that is the pin, measured in place under the re-tune's load (no prediction).
Where it knows that the new release sizes memory differently, the value moves by that difference, so that the
upgrade's restart is the re-tune's first trial and, when it holds, the only restart. One such difference is known:
from SGLang 0.5.14 (kv_versions.V_CURRENT) an EAGLE-family draft's weights load before the budget is taken
(A counts them) and its KV rides in the target's cell, where before both came after the target's pool, beside
``P * f``. The same draft then needs ``W_draft + KV_draft`` GiB of ``P * f`` and leaves that much more headroom:

    f_new = f_pin + (W_draft + KV_draft + headroom_pin - safety) / P

rounded down to the grid and kept at or below the cap (``headroom_pin``: the free memory under the load that the
pin's own trial measured; the tuner's first prediction from it). The numbers are the running server's, read from its
startup log before the upgrade (sglang_startup_facts). With kv_tune_strategy per_class, a member whose class an
earlier batch already verified a value under on the new release starts that value (its re-tune's verification), and
the others start the pin. Pure; the filter rollout_upgrade_trials calls it.
"""
from __future__ import annotations

from typing import Any

from ansible_collections.llmserve.sglang.plugins.module_utils.capacity import kv_search, kv_versions
from ansible_collections.llmserve.sglang.plugins.module_utils.capacity.kv_base import KvModelError
from ansible_collections.llmserve.sglang.plugins.module_utils.capacity.kv_cell import EAGLE_FAMILY
from ansible_collections.llmserve.sglang.plugins.module_utils.service import kv_pin
from ansible_collections.llmserve.sglang.plugins.plugin_utils.fleet.rollout import per_unit
from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner.class_values import class_value, verify_value
from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner.pool_model import effective_memory


def pin_settings(entry: Any, run: Any = None) -> tuple[float, float, float]:
    """(resolution, cap, safety_gib) for a value started for the pin: this run's (``run``: the kv_tune settings the
    inventory or -e gives the rollout's re-tune, which would refuse a value above its cap), else those the pin was
    verified with (its fact entry's settings), else the tuner's defaults."""
    settings = dict((entry.get("settings") if isinstance(entry, dict) else None) or {})
    settings.update({key: value for key, value in (run if isinstance(run, dict) else {}).items() if value is not None})
    safety = settings.get("safety_gib")
    return (float(settings.get("resolution") or kv_search.DEFAULT_RESOLUTION),
            float(settings.get("cap") or kv_search.DEFAULT_CAP), 1.0 if safety is None else float(safety))


def pin_headroom(entry: dict[str, Any]) -> float | None:
    """The free memory under the load that the trial of the pin's own value measured (the fact entry's trials)."""
    for trial in reversed(entry.get("trials") or []):
        if (trial.get("outcome") == "stable" and trial.get("min_free_gib") is not None
                and abs(trial.get("f", -1) - entry["mem_fraction_static"]) <= kv_search.TOLERANCE):
            return float(trial["min_free_gib"])
    return None


def upgrade_value(entry: Any, boot: Any, old_version: Any, new_version: Any, run: Any = None) -> dict[str, Any]:
    """{"value": the text to start the new release on, or None (start the pin, measured in place), "why"}.
    ``entry``: the unit's pin (its fact entry); ``boot``: the running server's startup facts, a start of the pin on
    ``old_version``; ``new_version``: the SGLang the upgrade installed; ``run``: this run's kv_tune settings
    (:func:`pin_settings`)."""
    if not isinstance(entry, dict) or kv_pin.check_entry(entry) is not None:
        return {"value": None, "why": "no pin to start from"}
    try:
        before, after = kv_versions.kv_era(old_version), kv_versions.kv_era(new_version)
    except KvModelError as exc:
        return {"value": None, "why": "the SGLang versions cannot be compared: %s" % exc}
    if before == after or after != "current":
        return {"value": None, "why": "SGLang %s sizes memory as %s does: the pin, measured in place"
                % (new_version, old_version)}
    boot = boot if isinstance(boot, dict) else {}
    args = boot.get("server_args") or {}
    algorithm = str(args.get("speculative_algorithm") or "").upper()
    if algorithm not in EAGLE_FAMILY or not boot.get("draft_weights_gib"):
        return {"value": None, "why": "no EAGLE-family draft: SGLang %s sizes memory as %s does for this server"
                % (new_version, old_version)}
    pin = entry["mem_fraction_static"]
    p = effective_memory(boot)[0]
    if (not p or args.get("mem_fraction_static") is None
            or abs(args["mem_fraction_static"] - pin) > kv_search.TOLERANCE):
        return {"value": None, "why": "the running start's log does not give the pin's draft and P: the pin, "
                                      "measured in place"}
    resolution, cap, safety = pin_settings(entry, run)
    moved = float(boot["draft_weights_gib"]) + float(boot.get("draft_kv_size_gib") or 0.0)
    headroom = pin_headroom(entry)
    spare = max(0.0, headroom - safety) if headroom is not None else 0.0
    value = min(kv_search.grid_down(pin + (moved + spare) / p + kv_search.TOLERANCE, resolution),
                kv_search.grid_down(cap, resolution))
    if value <= pin + kv_search.TOLERANCE:
        return {"value": None, "why": "the prediction does not move the pin"}
    return {"value": kv_search.value_text(value, resolution), "why": (
        "SGLang %s counts the %s draft's weights and KV (%.2f GiB) in --mem-fraction-static, which %s did not; "
        "with the pin's %s GiB spare under the load, P %.2f GiB: %s -> %s" % (
            new_version, algorithm, moved, old_version, "?" if headroom is None else "%.2f" % spare, p,
            entry.get("text") or kv_search.value_text(pin), kv_search.value_text(value, resolution)))}


def class_member_value(entry: Any, pin: Any, margin_steps: int = 0, run: Any = None) -> dict[str, Any]:
    """per_class: {"value", "why"} for a member whose class (its fingerprint on the new release) a host of an earlier
    batch already verified a value under: that value less the margin, as the member's re-tune would verify it (so
    that the upgrade's restart is that verification); else {"value": None, "why"}."""
    entry = entry if isinstance(entry, dict) else {}
    value = class_value(entry)
    if entry.get("role") != "member" or value is None:
        return {"value": None, "why": "no value verified on this fingerprint yet: the pin, measured in place"}
    resolution, cap, _safety = pin_settings(pin, run)
    verified = verify_value(value, {"resolution": resolution, "cap": cap, "class_margin_steps": margin_steps})
    return {"value": kv_search.value_text(verified, resolution),
            "why": "its class's value on the new release (%s)" % (entry.get("why") or entry.get("class"))}


def upgrade_trials(before: Any, on_disk: Any, boots: Any, per_class: bool = False, class_plan: Any = None,
                   margin_steps: int = 0, run: Any = None) -> list[dict[str, Any]]:
    """The units whose upgrade restart starts on another value than the pin, as {unit, value, why}: ``before`` and
    ``on_disk`` are kv_fingerprint per unit before the upgrade and once the new SGLang is installed, ``boots``
    sglang_startup_facts per unit of the running servers. With per_class, ``class_plan`` (rollout_class_plan of the
    ``on_disk`` fingerprints) gives each member the value its class verified in an earlier batch (the
    ``margin_steps`` of kv_tune_class_margin_steps below it), and nothing is predicted for the others (a canary
    searches). ``run``: this run's kv_tune settings (:func:`pin_settings`). Not for a server that spans hosts (its
    nodes start together, and the tuner's multi-node path verifies node 0's value)."""
    found = []
    running = per_unit(boots)
    now = per_unit(on_disk)
    members = (class_plan.get("units") if isinstance(class_plan, dict) else None) or {}
    for unit, res in per_unit(before).items():
        nnodes = (res.get("server_args") or {}).get("nnodes") or 1
        new_version = (now.get(unit) or {}).get("sglang_version")
        if int(nnodes) > 1 or not res.get("running") or not new_version:
            continue
        if per_class:
            decided = class_member_value(members.get(unit), res.get("pin"), margin_steps, run)
        else:
            decided = upgrade_value(res.get("pin"), running.get(unit) or {}, res.get("sglang_version"), new_version,
                                    run)
        if decided["value"] is not None:
            found.append({"unit": unit, "value": decided["value"], "why": decided["why"]})
    return found

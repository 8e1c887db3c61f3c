# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""kv_tune_strategy per_class inside the rollout: a host's re-tune plan from what this rollout already re-tuned.

The rollout has no probe of the whole fleet on the new release before it starts (the fingerprints change only as each
batch upgrades), so a class forms as the batches go: a server whose fingerprint on the new release is one that a host
of an earlier batch re-tuned (or found holding) verifies that value with one restart under the load, and the first
server of a fingerprint searches for it. Servers of one host form classes among themselves too (the first searches,
the others verify its value in the same kv_tune run). Hosts of one batch run at once: two of them with a new
fingerprint both search."""
from __future__ import annotations

from typing import Any, Iterable

from ansible_collections.llmserve.sglang.plugins.module_utils.service.host_units import other_gib
from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner.class_values import class_plan_units


def verified_units(outcome: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    """unit -> ``{"status": "unchanged", "fingerprint_hash", "pin"}`` for each unit of a host's kv_tune outcome (the
    kv_tune role's ``kv_tune_outcome``) that ends on a value verified under its fingerprint: a search's or a
    verification's pin, or a pin that held. A unit that found no value, or failed, says nothing of its class."""
    outcome = outcome or {}
    results = outcome.get("units") or ({outcome["unit"]: outcome} if outcome.get("unit") else {})
    found: dict[str, dict[str, Any]] = {}
    for unit, res in results.items():
        res = res or {}
        if res.get("failed"):
            continue
        if res.get("status") == "tuned" and res.get("result"):
            digest, pin = res["result"].get("fingerprint_hash"), res["result"].get("after")
        elif res.get("status") == "unchanged":
            digest, pin = res.get("fingerprint_hash"), res.get("pin")
        else:
            continue
        if digest and (pin or {}).get("mem_fraction_static") is not None:
            found[unit] = {"status": "unchanged", "fingerprint_hash": digest, "pin": pin}
    return found


def class_plan(host: str, fingerprints: Iterable[dict[str, Any]], earlier: dict[str, Any]) -> dict[str, Any]:
    """``host``'s class plan entry (tuner.class_values.class_plan_units' ``{"canary", "units", "lines"}``, the
    kv_tune role's ``kv_tune_class``) for its re-tune. ``fingerprints``: kv_fingerprint's result for each of the
    host's units on the new release (``item`` its unit); ``earlier``: host -> its kv_tune outcome in this rollout, for
    the other hosts that ran their re-tune (None: not yet). A unit whose fingerprint an earlier host verified a value
    under is a member with that value; the others search, the first of each fingerprint on the host for the rest."""
    probes: dict[str, Any] = {}
    for other, outcome in earlier.items():
        units = verified_units(outcome)
        if other != host and units:
            probes[other] = {"units": units}
    probes[host] = {"units": {
        found["item"]: {"status": "would_tune", "fingerprint_hash": found.get("fingerprint_hash"),
                        "other_gib": other_gib(found.get("gpu_memory"))}
        for found in fingerprints if found.get("item")}}
    return class_plan_units(probes, list(probes))[host]

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""kv_tune_strategy per_class: who searches and who verifies, per class of identical fingerprints, and the value a
member verifies."""
from __future__ import annotations

from typing import Any, Iterable

from ansible_collections.llmserve.sglang.plugins.module_utils.capacity import kv_search
from ansible_collections.llmserve.sglang.plugins.module_utils.service.host_units import target_label


def class_plan(probes: dict[str, Any], hosts: Iterable[str], force: bool = False) -> dict[str, dict[str, Any]]:
    """Who searches and who verifies, per class of identical fingerprints (GPUs, driver, SGLang, model, memory
    arguments: the fingerprint hash). ``probes``: host -> what kv_tune said in check mode (``status``,
    ``fingerprint_hash``, ``pin``; None or failed: no answer); ``hosts``: the play's hosts in inventory order.
    Returns host -> ``{"role", "class", "canary", "value", "why"}``:

    - ``canary``: the first host of its class that must be tuned and whose GPUs hold no other process's memory
      (``other_gib``; the first host when none is clean) searches for the class (``value`` None);
    - ``member``: verifies the class's value with one restart under the load; ``canary`` names the host whose tune
      gives it, or ``value`` is already known: a host of the class holds a pin of this very fingerprint (status
      ``unchanged``). Hosts whose pin holds are members too: they are not tuned at all;
    - ``alone``: no fingerprint (no answer, a unit that cannot be read): its own search, if any.
    ``force`` (kv_tune_force): no pin counts, every class gets a canary."""
    plan: dict[str, dict[str, Any]] = {}
    classes: dict[str, list[str]] = {}
    for host in hosts:
        probe = probes.get(host) or {}
        key = probe.get("fingerprint_hash")
        if not key or probe.get("failed"):
            plan[host] = {"role": "alone", "class": None, "canary": None, "value": None,
                          "why": "no fingerprint: %s" % (probe.get("msg") or "the host did not answer")}
            continue
        classes.setdefault(key, []).append(host)
    for key, members in classes.items():
        pinned = [] if force else [host for host in members if probes[host].get("status") == "unchanged"
                                   and (probes[host].get("pin") or {}).get("mem_fraction_static") is not None]
        label = key[:12]
        if pinned:
            source = pinned[0]
            value = probes[source]["pin"]["mem_fraction_static"]
            for host in members:
                plan[host] = {"role": "member", "class": label, "canary": None, "value": value,
                              "why": "%s holds the class's pin %s" % (source, value)}
            continue
        # A canary whose GPUs hold another process's memory finds a value too low for the rest of its class.
        clean = [host for host in members if not probes[host].get("other_gib")]
        canary = (clean or members)[0]
        for host in members:
            plan[host] = {"role": "canary" if host == canary else "member", "class": label, "value": None,
                          "canary": None if host == canary else canary,
                          "why": "searches for %d host(s) of class %s" % (len(members), label) if host == canary
                          else "verifies the value of %s, the canary of class %s" % (canary, label)}
    return plan


def class_plan_units(probes: dict[str, Any], hosts: Iterable[str], force: bool = False) -> dict[str, dict[str, Any]]:
    """:func:`class_plan` over every unit of every host (a host with several servers has a target per unit; a class
    may hold units of one host). ``probes``: host -> what kv_tune said in check mode. Returns host ->
    ``{"canary": whether one of its units searches for a class, "units": {unit: class_plan's entry, with the
    canary's ``canary_host`` and ``canary_unit``}, "lines": [one per unit]}``."""
    targets: list[tuple[str, Any]] = []
    where: dict[str, tuple[str, Any]] = {}
    for host in hosts:
        probe: Any = probes.get(host) or {}
        units = probe.get("units") or {}
        several = len(units) > 1
        for unit, unit_probe in (units.items() if units else [(probe.get("unit"), probe)]):
            label = target_label(host, unit) if several else host
            targets.append((label, unit_probe))
            where[label] = (host, unit)
    plan = class_plan(dict(targets), [label for label, _probe in targets], force=force)
    out: dict[str, dict[str, Any]] = {host: {"canary": False, "units": {}, "lines": []} for host in hosts}
    for label, _probe in targets:
        host, unit = where[label]
        entry = dict(plan[label])
        entry["canary_host"], entry["canary_unit"] = where.get(entry["canary"], (None, None))
        out[host]["canary"] = out[host]["canary"] or entry["role"] == "canary"
        if unit is not None:
            out[host]["units"][unit] = entry
        out[host]["lines"].append("%s: %s of class %s: %s" % (label, entry["role"], entry["class"], entry["why"]))
    return out


def _canary_pin(entry: dict[str, Any] | None, canary_outcome: dict[str, Any] | None) -> dict[str, Any] | None:
    """What the canary of a member's class pinned (its result's ``after``, or the pin that held), or None."""
    if not entry or entry.get("role") != "member":
        return None
    res = canary_outcome or {}
    if res.get("status") == "tuned" and res.get("result"):
        return res["result"]["after"]
    if res.get("status") == "unchanged" and res.get("pin"):
        return res["pin"]
    return None


def class_value(entry: dict[str, Any] | None, canary_outcome: dict[str, Any] | None = None) -> float | None:
    """The value a member of a class verifies (before the margin), or None: its own search. ``entry``: its
    class_plan entry; ``canary_outcome``: what the canary's kv_tune returned (None: it did not run or answer)."""
    if entry and entry.get("role") == "member" and entry.get("value") is not None:
        return entry["value"]
    return (_canary_pin(entry, canary_outcome) or {}).get("mem_fraction_static")


def class_tokens(entry: dict[str, Any] | None, canary_outcome: dict[str, Any] | None = None) -> int | None:
    """The pool the canary of a member's class verified (what kv_tune_pin_tokens caps the class at), or None when
    the member's value did not come from its canary's outcome."""
    if entry and entry.get("value") is not None:
        return None
    return (_canary_pin(entry, canary_outcome) or {}).get("tokens")


def verify_value(value: float, settings: dict[str, Any]) -> float:
    """The class's value less the margin, on the grid and at most the cap: what a member runs under the load.

    The margin (kv_tune_class_margin_steps grid steps, none by default) can absorb what differs between hosts of one
    fingerprint without being in it (CUDA context and driver reservations, a few MiB to a few hundred): one step is
    0.47 GiB per GPU on a 96 GB card and 0.7 GiB on an H200, and costs as many tokens on every member. Without it a
    member that holds pins the canary's value, what its own search would find; one that does not (the verification
    runs the same load as a search trial) searches on its own from there."""
    res = settings["resolution"]
    lowered = kv_search.grid_down(value + kv_search.TOLERANCE, res) - settings["class_margin_steps"] * res
    return min(kv_search.grid_down(lowered + kv_search.TOLERANCE, res), kv_search.grid_down(settings["cap"], res))

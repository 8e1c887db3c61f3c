# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The KV tuner's plan for a whole fleet, from what every host's probe said: which units need tuning, the canaries
and members of each class of identical fingerprints, the servers that span hosts, and the hosts that cannot be
tuned. Computed once per run on the controller (playbooks/tune_kv.yml's first play, ``tasks_from: probe``); every
host then reads its own entry and the groups come from the result. Pure function, linear in the hosts."""
from __future__ import annotations

from typing import Any, Iterable

from ansible_collections.llmserve.sglang.plugins.plugin_utils.fleet import multinode
from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner import class_values
from ansible_collections.llmserve.sglang.plugins.module_utils.service import host_units

# The groups the tuning plays of playbooks/tune_kv.yml take.
TODO = "kv_tune_todo"            # single-host servers to tune, in serial batches
MULTINODE = "kv_tune_multinode"  # nodes of the servers that span hosts to tune, every node at once
CANARIES = "kv_tune_canaries"    # per_class: the host that searches for a class, tuned before the others
GROUPS = (TODO, MULTINODE, CANARIES)


def fleet_plan(probes: dict[str, Any], hosts: Iterable[str], strategy: str = "per_host",
               force: Any = False) -> dict[str, Any]:
    """The plan of one tuning run. ``probes``: host -> what kv_tune said in check mode (``status``,
    ``fingerprint_hash``, ``pin``, ``node``, ``units``; None: no answer); ``hosts``: the play's hosts in inventory
    order; ``strategy`` and ``force``: kv_tune_strategy and kv_tune_force of the run.

    Returns ``{"hosts", "groups", "memberships", "errors", "classes", "servers"}``:

    - ``hosts``: host -> ``{"unchanged"`` (every unit's pin holds: its probe is its outcome), ``"server"``
      (:func:`multinode.server_plan`'s entry, None for a server on one host), ``"class"`` (per_class only:
      :func:`class_values.class_plan_units`' entry, else None), ``"lines"`` (the class lines worth printing: per_class and
      not unchanged), ``"error"`` (why the host's server cannot be tuned in this run, else None), ``"groups"}``;
    - ``groups``: group -> hosts in inventory order (:data:`GROUPS`, each present, maybe empty); ``memberships``:
      ``[{"host", "groups"}]`` for the hosts in any group, in inventory order (for ``add_host``);
    - ``errors``: host -> message, for the hosts whose ``error`` is set (they join no group);
    - ``classes``: class label -> ``{"canary"`` (the target that searches, or None), ``"members"`` (targets),
      ``"value"`` (the class's pinned value, when a target holds it)``}``; per_class only;
    - ``servers``: server key -> ``{"nodes", "tune", "why", "error"}``."""
    hosts = list(hosts)
    servers = multinode.server_plan(probes, hosts)
    classes = class_values.class_plan_units(probes, hosts, force=bool(force)) if strategy == "per_class" else {}
    out: dict[str, Any] = {"hosts": {}, "groups": {group: [] for group in GROUPS}, "memberships": [], "errors": {},
                           "classes": {}, "servers": {}}
    for host in hosts:
        probe = probes.get(host) or {}
        unchanged = probe.get("status") == "unchanged"
        server = servers.get(host)
        entry = classes.get(host)
        error = server["error"] if server is not None else None
        groups: list[str] = []
        if error is None:
            if server is None and not unchanged:
                groups.append(TODO)
            if server is not None and server["tune"]:
                groups.append(MULTINODE)
            if entry is not None and entry["canary"] and server is None and not unchanged:
                groups.append(CANARIES)
        out["hosts"][host] = {"unchanged": unchanged, "server": server, "class": entry, "error": error,
                              "lines": list(entry["lines"]) if entry is not None and not unchanged else [],
                              "groups": groups}
        for group in groups:
            out["groups"][group].append(host)
        if groups:
            out["memberships"].append({"host": host, "groups": groups})
        if error is not None:
            out["errors"][host] = error
        if server is not None:
            out["servers"].setdefault(server["key"], {"nodes": server["nodes"], "tune": server["tune"],
                                                      "why": server["why"], "error": server["error"]})
        for unit_entry in _class_entries(host, entry):
            _add_to_class(out["classes"], unit_entry)
    return out


def _class_entries(host: str, entry: dict[str, Any] | None) -> list[tuple[str, dict[str, Any]]]:
    """(target, class_plan entry) of each unit of ``host``'s class plan entry."""
    if entry is None:
        return []
    units = entry["units"]
    if not units:
        return []
    several = len(units) > 1
    return [(host_units.target_label(host, unit) if several else host, unit_entry) for unit, unit_entry in units.items()]


def _add_to_class(classes: dict[str, Any], target_entry: tuple[str, dict[str, Any]]) -> None:
    target, entry = target_entry
    if entry.get("class") is None:
        return
    found = classes.setdefault(entry["class"], {"canary": None, "members": [], "value": entry.get("value")})
    if entry["role"] == "canary":
        found["canary"] = target
    else:
        found["members"].append(target)

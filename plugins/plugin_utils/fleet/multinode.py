# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The KV tuner's decisions for a server that spans hosts (SGLang's ``--nnodes``, ``--node-rank``,
``--dist-init-addr``): which hosts are one server, who leads its search, and what the nodes' observations of one trial
say together. Pure functions; the kv_tune action performs them (docs/DESIGN.md, "Multi-node servers").

SGLang sizes the KV pool of every rank from the minimum free memory over the whole tensor-parallel group, every node
included, and every rank holds the same activations under load, so the server is one thing to tune: one value on
every node, restarted together, judged by the least free GPU of any node, pinned on every node.
"""
from __future__ import annotations

import hashlib
from typing import Any, Iterable, Sequence

from ansible_collections.llmserve.sglang.plugins.module_utils.startup import boot_trust
from ansible_collections.llmserve.sglang.plugins.module_utils.checks import InvalidInput

# Failures that say where the memory ran out; a peer's lost connection (ECHO_KINDS) or a timeout on another node is
# only the echo of such a failure.
_MEMORY_KINDS = ("init_oom", "weights_oom", "capture_oom", "runtime_oom", "unbalanced_memory")
ECHO_KINDS = ("nccl_error",)


class MultinodeError(InvalidInput):
    """The nodes of a server do not add up (a rank missing or twice, another node count); the message says which."""


def node_of(server_args: dict[str, Any] | None) -> dict[str, Any] | None:
    """``{"key", "nnodes", "node_rank", "dist_init_addr"}`` of one node of a multi-node server (``server_args``: the
    node's command line, parsed), or None for a server on one host. ``key`` names the server: the nodes of one server
    share their --dist-init-addr."""
    args = server_args or {}
    try:
        nnodes = int(args.get("nnodes") or 1)
        rank = int(args.get("node_rank") or 0)
    except (TypeError, ValueError):
        raise MultinodeError("--nnodes and --node-rank must be integers, got %r and %r"
                             % (args.get("nnodes"), args.get("node_rank"))) from None
    if nnodes <= 1:
        return None
    addr = args.get("dist_init_addr")
    if not addr:
        raise MultinodeError("--nnodes %d without --dist-init-addr: SGLang cannot join the nodes" % nnodes)
    if not 0 <= rank < nnodes:
        raise MultinodeError("--node-rank %d is not in 0..%d" % (rank, nnodes - 1))
    return {"key": hashlib.sha256(str(addr).encode()).hexdigest()[:12], "nnodes": nnodes, "node_rank": rank,
            "dist_init_addr": str(addr)}


def server_plan(probes: dict[str, Any], hosts: Iterable[str]) -> dict[str, dict[str, Any]]:
    """The multi-node servers among ``hosts`` (what each host's kv_tune said in check mode: ``node``, ``status``).
    Returns host -> ``{"key", "node_rank", "leader", "nodes" (hosts by rank), "tune", "why", "error"}`` for each node
    of a multi-node server; hosts of single-host servers are left out.

    ``tune``: the server needs tuning when any node does (a node without its pin, or another fingerprint), and then
    every node takes part. A server whose nodes are not all in the run (a rank missing, twice) cannot be tuned:
    ``tune`` False, and ``error`` says why when it would need tuning."""
    servers: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for host in hosts:
        node = (probes.get(host) or {}).get("node")
        if node:
            servers.setdefault(node["key"], []).append((host, node))
    plan: dict[str, dict[str, Any]] = {}
    for key, members in servers.items():
        nnodes = members[0][1]["nnodes"]
        ranks: dict[int, list[str]] = {}
        for host, node in members:
            ranks.setdefault(node["node_rank"], []).append(host)
        nodes = [ranks.get(rank, [None])[0] for rank in range(nnodes)]
        problem: str | None = None
        if any(node["nnodes"] != nnodes for _host, node in members):
            problem = "its nodes disagree on --nnodes"
        elif any(len(found) > 1 for found in ranks.values()):
            problem = "node rank %s is given to %s" % next(
                (rank, " and ".join(found)) for rank, found in sorted(ranks.items()) if len(found) > 1)
        elif None in nodes:
            missing = [str(rank) for rank in range(nnodes) if nodes[rank] is None]
            problem = "node rank%s %s %s not in this run (give every node of the server to the play)" % (
                "s" if len(missing) > 1 else "", ", ".join(missing), "are" if len(missing) > 1 else "is")
        unsettled = [host for host, _node in members if (probes.get(host) or {}).get("status") != "unchanged"]
        if problem:
            why = "the server of %s cannot be tuned: %s" % (", ".join(host for host, _node in members), problem)
        elif unsettled:
            why = "%s need%s tuning" % (", ".join(unsettled), "s" if len(unsettled) == 1 else "")
        else:
            why = "every node holds its pin"
        for host, node in members:
            plan[host] = {"key": key, "node_rank": node["node_rank"], "leader": nodes[0], "nodes": nodes,
                          "tune": bool(unsettled) and problem is None, "why": why,
                          "error": why if unsettled and problem else None}
    return plan


def followers_reason(hellos: Sequence[dict[str, Any]], leader: dict[str, Any] | None = None) -> str | None:
    """Why the server must be tuned according to its other nodes (``hellos``: what each follower said when it
    joined: ``rank``, ``host``, ``status``, ``why``, ``pin`` and ``running`` values), or None when each of them holds
    its pin and runs node 0's (``leader``: node 0's ``rank``, ``host``, ``pin``, ``running``); raises
    :class:`MultinodeError` when a node refuses (its unit cannot be tuned): nothing has changed yet."""
    refused = [hello for hello in hellos if hello.get("status") == "refuse"]
    if refused:
        raise MultinodeError("; ".join("node %d (%s): %s" % (hello["rank"], hello["host"], hello.get("why"))
                                       for hello in refused))
    reasons = ["node %d (%s): %s" % (hello["rank"], hello["host"], hello.get("why"))
               for hello in sorted(hellos, key=lambda hello: hello["rank"]) if hello.get("status") != "unchanged"]
    if leader is not None:
        reasons.extend(_disagreements([leader] + sorted(hellos, key=lambda hello: hello["rank"])))
    return "; ".join(reasons) or None


def _disagreements(nodes: Sequence[dict[str, Any]]) -> list[str]:
    """The nodes of one server pinned on, or running, different values (a commit that reached only some of them):
    one value for every node is what a server that spans hosts can be verified on."""
    found: list[str] = []
    for key, what in (("pin", "pinned on"), ("running", "running")):
        values = [None if node.get(key) is None else round(float(node[key]), 6) for node in nodes]
        if any(value != values[0] for value in values):
            found.append("the nodes are %s different values (%s)" % (what, ", ".join(
                "node %d (%s) %s" % (node["rank"], node["host"], "none" if node.get(key) is None else node[key])
                for node in nodes)))
    return found


def merge_samples(stress: dict[str, Any] | None, followers: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The load's result for the whole server: ``stress`` (kv_stress on node 0, which drives the load) with the free
    memory of every other node's GPUs sampled during the same load (``followers``: host -> ``{"min_free_gib_per_gpu",
    "running", "same_start", "msg"}``). The least free GPU of any node is the server's; a node whose server is gone or
    restarted under the load did not hold it."""
    merged = dict(stress or {})
    per_gpu = dict(merged.get("min_free_gib_per_gpu") or {})
    for host, seen in sorted(followers.items()):
        for index, free in (seen.get("min_free_gib_per_gpu") or {}).items():
            per_gpu["%s:%s" % (host, index)] = free
        if merged.get("held") and not (seen.get("running") and seen.get("same_start")):
            merged["held"] = False
            merged["failure_reason"] = "node %s: %s" % (host, seen.get("msg") or (
                "its server is not running after the load" if not seen.get("running")
                else "its server restarted under the load"))
    merged["min_free_gib_per_gpu"] = per_gpu
    merged["min_free_gib"] = min(per_gpu.values()) if per_gpu else merged.get("min_free_gib")
    return merged


def server_start_failure(leader_boot: dict[str, Any] | None,
                         follower_boots: dict[str, dict[str, Any] | None] | None) -> dict[str, Any]:
    """The startup facts of a start of the whole server that did not serve, from each node's: the first node (node 0,
    then the others by host) whose failure is neither a lack of memory nor a lost connection, which a value of
    --mem-fraction-static does not fix, its line naming a node other than node 0; else :func:`server_boot`'s (a
    node's lack of memory, beside the others' lost connection to it, explains the start)."""
    for host, boot in [(None, leader_boot)] + sorted((follower_boots or {}).items()):
        failure = (boot or {}).get("failure") or {}
        if failure.get("kind") and failure["kind"] not in _MEMORY_KINDS + ECHO_KINDS:
            if host is None:
                return dict(boot or {})
            return dict(boot or {}, failure=dict(failure, line="node %s: %s" % (host, failure.get("line"))))
    return server_boot(leader_boot, follower_boots)


def server_boot(leader_boot: dict[str, Any] | None,
                follower_boots: dict[str, dict[str, Any] | None] | None) -> dict[str, Any]:
    """The startup facts of the whole server from each node's (its own log: its own ranks).

    SGLang sizes the pool from the least free memory of any rank of any node, before the weights (P) and after them
    (A), while each rank logs its own: the server's P and A are the minimum over the nodes. The failure that explains
    how the start ended is node 0's, unless node 0 only saw another node fail (its peer's connection lost, a
    timeout) while a node has a memory failure of its own: then that node's facts, whose phase and numbers the tuner
    reads. Why a node's memory numbers cannot be trusted (its ``untrusted``) is the server's too, named by node: the
    pool is sized from every node's. So are the ranks of one stage on different nodes that disagree (the same amount
    taken on every GPU of one node shows in no node's own log)."""
    followers = sorted((follower_boots or {}).items())
    boots = [leader_boot or {}] + [boot or {} for _host, boot in followers]
    explaining = boots[0]
    if ((explaining.get("failure") or {}).get("kind")) not in _MEMORY_KINDS:
        explaining = next((boot for boot in boots[1:] if (boot.get("failure") or {}).get("kind") in _MEMORY_KINDS),
                          explaining)
    merged = dict(explaining)
    for key in ("pre_load_free_gib", "post_load_free_gib"):
        values = [boot[key] for boot in boots if boot.get(key) is not None]
        if values:
            merged[key] = min(values)
    untrusted = list((leader_boot or {}).get("untrusted") or [])
    untrusted += ["node %s: %s" % (host, why) for host, boot in followers for why in (boot or {}).get("untrusted") or []]
    if not untrusted and followers:
        ranks = [dict(rank, tag=("%s %s" % (host, rank.get("tag") or "")).strip())
                 for host, boot in [("node 0", leader_boot)] + followers for rank in (boot or {}).get("ranks") or []]
        untrusted = boot_trust.findings({"ranks": ranks})
    if untrusted:
        merged["untrusted"] = untrusted
    return merged

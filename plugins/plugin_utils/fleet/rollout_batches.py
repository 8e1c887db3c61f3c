# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The rollout's batches (playbooks/rollout.yml): whole servers in each. The nodes of a server that spans hosts
(``--nnodes``) must change together, so they go in the same batch, one after the other; ``rollout_serial`` counts
servers, not hosts, and the canary is a whole server. Pure: the rollout_batches filter reads each host's inputs, and
the play takes the order and the batch sizes (Ansible's ``serial``, in hosts) from its answer."""
from __future__ import annotations

from typing import Any, Sequence

from ansible_collections.llmserve.sglang.plugins.module_utils.service import server_args as sa
from ansible_collections.llmserve.sglang.plugins.plugin_utils.fleet.multinode import MultinodeError, node_of
from ansible_collections.llmserve.sglang.plugins.plugin_utils.fleet.rollout_inputs import RolloutInputError


def _host_nodes(values: dict[str, Any]) -> list[dict[str, Any]]:
    """The multi-node servers a host is a node of (multinode.node_of), from the sglang_service role's inputs it sets:
    the server arguments, and each instance's over them."""
    base = {sa.canonical(key): value for key, value in (values.get("sglang_service_server_args") or {}).items()}
    instances = values.get("sglang_service_instances") or []
    found = []
    for args in [base] if not instances else [
            dict(base, **{sa.canonical(key): value for key, value in ((inst or {}).get("server_args") or {}).items()})
            for inst in instances if isinstance(inst, dict)]:
        try:
            node = node_of(args)
        except MultinodeError as exc:
            raise RolloutInputError(str(exc)) from None
        if node:
            found.append(node)
    return found


def _batch_size(spec: Any, servers: int) -> int:
    """Servers in a batch of ``spec`` (a count, or a percentage of ``servers``, at least one), as Ansible's
    pct_to_int counts hosts."""
    text = str(spec).strip()
    if text.endswith("%"):
        return int(float(text[:-1]) / 100.0 * servers) or 1
    return int(text)


def batches(hosts: Sequence[str], host_values: dict[str, dict[str, Any]], serial: Any = (1, "25%")) -> dict[str, Any]:
    """The play's hosts in batches of whole servers: {order (the hosts, each server's nodes together, node 0
    first), serial (hosts per batch, every batch given), servers (each batch's servers, as lists of hosts), nodes
    (host -> the hosts of its multi-node server by rank, for each node of one)}. ``hosts``: the play's hosts in
    inventory order; ``host_values``: each host's sglang_service inputs; ``serial``: rollout_serial (servers per
    batch, the last repeated, as Ansible's serial). Raises RolloutInputError for a server whose nodes are not all
    in the play, or disagree."""
    ranks_of: dict[str, dict[int, str]] = {}   # a multi-node server (its --dist-init-addr) -> rank -> host
    size_of: dict[str, int] = {}
    for host in hosts:
        for node in _host_nodes(host_values.get(host) or {}):
            addr = node["dist_init_addr"]
            ranks = ranks_of.setdefault(addr, {})
            if ranks.get(node["node_rank"], host) != host:
                raise RolloutInputError("the server at %s has node rank %d on both %s and %s"
                                        % (addr, node["node_rank"], ranks[node["node_rank"]], host))
            if size_of.setdefault(addr, node["nnodes"]) != node["nnodes"]:
                raise RolloutInputError("the nodes of the server at %s disagree on --nnodes (%d on %s, %d before)"
                                        % (addr, node["nnodes"], host, size_of[addr]))
            ranks[node["node_rank"]] = host
    nodes: dict[str, list[str]] = {}
    for addr, ranks in ranks_of.items():
        missing = [str(rank) for rank in range(size_of[addr]) if rank not in ranks]
        if missing:
            raise RolloutInputError(
                "the server at %s spans %d nodes, and node rank%s %s %s not among the rollout's hosts (%s): its nodes "
                "change together, so give every node to the play (rollout_hosts)" % (
                    addr, size_of[addr], "s" if len(missing) > 1 else "", ", ".join(missing),
                    "are" if len(missing) > 1 else "is", ", ".join(sorted(set(ranks.values())))))
        for host in ranks.values():
            nodes[host] = [ranks[rank] for rank in range(size_of[addr])]
    servers: list[list[str]] = []
    placed: set[str] = set()
    for host in hosts:
        if host in placed:
            continue
        group = nodes.get(host) or [host]
        servers.append(group)
        placed.update(group)
    specs = list(serial) if isinstance(serial, (list, tuple)) else [serial]
    out_batches: list[list[list[str]]] = []
    start = 0
    while start < len(servers):
        size = _batch_size(specs[min(len(out_batches), len(specs) - 1)], len(servers))
        out_batches.append(servers[start:start + size])
        start += size
    return {"order": [host for group in servers for host in group],
            "serial": [sum(len(group) for group in batch) for batch in out_batches],
            "servers": out_batches, "nodes": nodes}

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""``sglang-sim-oracle``: the ground truth a tuner is measured against.

For a host and a launch configuration it prints (JSON) the largest ``--mem-fraction-static`` on a grid (the
resolution) at which the simulated server starts and the stress load (a full prefill chunk and a full decode
batch with the KV pool full) leaves at least ``--safety-gib`` free on every GPU, the smallest value at which the
server starts at all, and the KV tokens at both. It calls memory.plan, the very function the server uses, so
the server started at the printed maximum survives the stress load, and one resolution step above it does not
keep the margin.

    sglang-sim-oracle --host /etc/sglang-sim/host.json --model-path /models/field/model --tp 8 \\
        --speculative-algorithm EAGLE3 --speculative-draft-model-path /models/field/draft --safety-gib 1

The SGLang version is the server's (hostspec.sglang_version: the ``sglang`` distribution installed beside the
oracle, else host.json's), or ``--sglang-version``: the version of the venv that serves, which may differ from the
oracle's own.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys

from sglang_sim import args as server_args
from sglang_sim import hostspec, memory
from sglang_sim.hostspec import GIB, SimConfigError
from sglang_sim.model import load_model


def _plan(host, model, draft, args, fraction, hosts=None):
    args.mem_fraction_static = fraction
    return memory.plan(host, model, draft, args, hosts)


def search(host, model, draft, args, safety_gib: float, resolution: float, hosts=None) -> dict:
    """Scan the grid of f values (resolution apart, in (0, 1)) and report the viable range, and the verdict for
    ``args.mem_fraction_static`` (resolved: the flag or SGLang's default) under ``given``. ``hosts``: every node's
    host of a multi-node server (--nnodes), in --node-rank order; the plan is the whole server's, so the maximum is
    the smallest over the nodes."""
    given = args.mem_fraction_static
    steps = int(round(1 / resolution))
    digits = max(0, len(("%.10f" % resolution).rstrip("0").split(".")[1]))
    lowest = highest = starts = survives = None
    for step in range(1, steps):
        fraction = round(step * resolution, digits)
        plan = _plan(host, model, draft, args, fraction, hosts)
        if plan.failure is None and lowest is None:
            lowest = (fraction, plan)
        if plan.failure is None:
            starts = fraction
        if plan.survives_stress(0):
            survives = fraction
        if plan.survives_stress(int(safety_gib * GIB)):
            highest = (fraction, plan)
    result = {
        "host": host.path, "model_path": args.model_path, "sglang_version": host.sglang_version,
        "sglang_version_from": host.sglang_version_from,
        "safety_gib": safety_gib, "resolution": resolution,
        "max_mem_fraction_static": highest[0] if highest else None,
        "max_kv_tokens": highest[1].replicas[0].tokens if highest else None,
        "min_mem_fraction_static": lowest[0] if lowest else None,
        "min_kv_tokens": lowest[1].replicas[0].tokens if lowest else None,
        # Without the margin: the largest value that starts at all, and the largest that survives the stress load.
        "max_start_mem_fraction_static": starts,
        "max_survive_mem_fraction_static": survives,
    }
    if highest:
        plan = highest[1]
        replica = plan.replicas[0]
        result.update({
            "pre_load_free_gib": round(replica.p / GIB, 4),
            "weights_gib": round(plan.weight_bytes / GIB, 4),
            "cell_size_bytes": plan.cell,
            "free_after_start_gib_at_max": round(plan.min_headroom() / GIB, 4),
            "stress_activation_gib": round(plan.stress_activation_bytes(replica) / GIB, 4),
            "stress_free_gib_at_max": round(plan.stress_headroom() / GIB, 4),
        })
        if plan.hybrid:
            # Hybrid linear-attention model: the Mamba state pool sized beside the KV pool at the maximum.
            result.update({
                "max_mamba_cache_size_at_max": replica.mamba_slots,
                "mamba_cache_per_req_bytes": plan.mamba_per_req,
                "max_running_requests_at_max": replica.max_running_requests,
            })
        if hosts:
            result["nodes"] = [{"node_rank": node, "host": each.path,
                                "free_after_start_gib_at_max": round(min(
                                    rank.free for rank in plan.ranks if rank.node == node) / GIB, 4)}
                               for node, each in enumerate(hosts)]
    plan = _plan(host, model, draft, args, given, hosts)
    result["given"] = {
        "mem_fraction_static": given, "starts": plan.failure is None,
        "failure": None if plan.failure is None else plan.failure.kind,
        "kv_tokens": plan.replicas[0].tokens if plan.failure is None else None,
        "free_after_start_gib": round(plan.min_headroom() / GIB, 4) if plan.failure is None else None,
        "survives_stress": plan.survives_stress(0),
        "keeps_safety": plan.survives_stress(int(safety_gib * GIB)),
    }
    args.mem_fraction_static = given
    return result


def split_host_file(argv: list) -> tuple:
    """(host file or None, the other arguments). ``--host`` names the host file when its value is a file or ends
    in .json; otherwise it is launch_server's --host (an address) and stays with the launch flags."""
    host_file, rest, position = None, [], 0
    while position < len(argv):
        arg = argv[position]
        if arg in ("--host", "--host-file") and position + 1 < len(argv):
            value = argv[position + 1]
            if arg == "--host-file" or value.endswith(".json") or os.path.isfile(value):
                host_file = value
            else:
                rest += [arg, value]
            position += 2
            continue
        if arg.startswith("--host=") or arg.startswith("--host-file="):
            value = arg.split("=", 1)[1]
            if arg.startswith("--host-file=") or value.endswith(".json") or os.path.isfile(value):
                host_file = value
            else:
                rest.append(arg)
        else:
            rest.append(arg)
        position += 1
    return host_file, rest


def _node_hosts(host, args, paths: list, version):
    """Every node's host for --nnodes > 1 (None for one node); --node-host files, else ``host`` on each node."""
    nnodes = int(args.nnodes or 1)
    if nnodes <= 1:
        if paths:
            raise SimConfigError("--node-host needs --nnodes > 1")
        return None
    if args.tp_size % nnodes or args.pp_size != 1 or args.dp_size != 1:
        raise SimConfigError("multi-node is simulated for one tensor-parallel group: --tp-size a multiple of "
                             "--nnodes, --pp-size 1, --dp-size 1")
    if not paths:
        return [host] * nnodes
    if len(paths) != nnodes:
        raise SimConfigError("--nnodes %d needs --node-host %d times (node 0 first), got %d"
                             % (nnodes, nnodes, len(paths)))
    hosts = [host if index == 0 and host.path == path else hostspec.load_host(path)
             for index, path in enumerate(paths)]
    for each in hosts:
        if version is not None:
            each.sglang_version = version
    return hosts


def main(argv=None) -> int:
    """sglang-sim-oracle --host FILE --safety-gib X [--resolution R] [--sglang-version V] <launch_server flags>"""
    argv = sys.argv[1:] if argv is None else argv
    host_file, argv = split_host_file(argv)
    parser = argparse.ArgumentParser(prog="sglang-sim-oracle", allow_abbrev=False,
                                     description="Largest --mem-fraction-static that survives the stress load. "
                                     "--host FILE (or --host-file FILE) names host.json (default: $SGLANG_SIM_HOST "
                                     "or /etc/sglang-sim/host.json); other flags are launch_server's.")
    parser.add_argument("--safety-gib", type=float, default=0.0, help="GiB that must stay free under stress")
    parser.add_argument("--resolution", type=float, default=0.001, help="grid step of the search")
    parser.add_argument("--node-host", action="append", default=[], metavar="FILE",
                        help="with --nnodes N: the host.json of each node, N times in --node-rank order (default: "
                        "--host for every node)")
    parser.add_argument("--sglang-version", help="the SGLang version of the server (default: the installed sglang "
                        "distribution's, else host.json's sglang_version)")
    own, launch = parser.parse_known_args(argv)
    if not 0 < own.resolution < 1 or own.safety_gib < 0:
        parser.error("--resolution must be in (0, 1) and --safety-gib >= 0")
    if own.sglang_version is not None and not re.match(r"^v?\d+(\.\d+)*", own.sglang_version):
        parser.error("--sglang-version must be a version such as 0.5.9, got %r" % own.sglang_version)
    try:
        host = hostspec.load_host(host_file if host_file or not own.node_host else own.node_host[0])
        if own.sglang_version is not None:
            host.sglang_version = own.sglang_version
        args = server_args.parse(launch)
        hosts = _node_hosts(host, args, own.node_host, own.sglang_version)
        model = load_model(args.model_path)
        server_args.resolve(args, host, model, memory.era(host.sglang_version) == memory.ERA_CURRENT)
        draft = None
        if args.speculative_algorithm in memory.SPEC_WITH_DRAFT and args.speculative_draft_model_path:
            draft = load_model(args.speculative_draft_model_path)
        memory.check_supported(host, model, draft, args)
    except SimConfigError as exc:
        sys.stderr.write("sglang-sim-oracle: %s\n" % exc)
        return 1
    result = search(host, model, draft, args, own.safety_gib, own.resolution, hosts)
    explicit = any(arg == "--mem-fraction-static" or arg.startswith("--mem-fraction-static=") for arg in launch)
    result["given"]["source"] = "flag" if explicit else "sglang default"
    print(json.dumps(result, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())

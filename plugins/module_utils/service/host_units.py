# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Several servers on one host (sglang@a on GPUs 0-3, sglang@b on 4-7): how each unit is named, which share GPUs,
and the host's result and reports out of its units'."""
from __future__ import annotations

from typing import Any, Iterable, Sequence

from ansible_collections.llmserve.sglang.plugins.module_utils import checks
from ansible_collections.llmserve.sglang.plugins.module_utils.service import server_args as sa


def target_label(host: str, unit: str) -> str:
    """How lines, reports and the summary name one of several units of a host: ``gpu1/sglang@a``."""
    stem = unit[:-len(".service")] if unit.endswith(".service") else unit
    return "%s/%s" % (host, stem)


def report_name(label: str) -> str:
    """The file name (without extension) of a unit's reports: its label, with no directory in it."""
    return label.replace("/", "_")


def unit_gpus(gpu_memory: Iterable[dict[str, Any]] | None) -> list[int] | None:
    """The GPUs a running unit's processes use (kv_fingerprint's ``gpu_memory``), or None: not running, unknown."""
    found = sorted(gpu["index"] for gpu in gpu_memory or [] if gpu.get("server_bytes"))
    return found or None


def configured_gpus(server_args: dict[str, Any], environment: dict[str, str] | None,
                    gpu_uuids: Sequence[str | None]) -> list[int] | None:
    """The GPUs (NVML's indices) that a unit's configuration gives its server on this host, or None when that cannot
    be told; what runs does not count, so a unit that is down still holds its GPUs.

    SGLang puts this node's ranks on ``base_gpu_id + i * gpu_id_step`` for i below tp_size x pp_size / nnodes (times
    dp_size without DP attention: each replica takes the next GPUs), counted within CUDA_VISIBLE_DEVICES when the
    unit sets it (indices, or a ``GPU-`` UUID or a unique prefix of one, as CUDA takes them; ``gpu_uuids`` are NVML's
    in index order). A MIG device, an entry CUDA would not accept or a rank past the visible GPUs is None: not this
    function's to guess."""
    def number(name: str, default: int) -> Any:
        value = server_args.get(name, default)
        try:
            return checks.parse_number("server arg " + name, default if value is None else value, int,
                                       sa.ServerArgsError)
        except sa.ServerArgsError:
            return None

    sizes = [number(name, 1) for name in ("tp_size", "pp_size", "dp_size", "nnodes")]
    base, step = number("base_gpu_id", 0), number("gpu_id_step", 1)
    if None in sizes or base is None or step is None or min(sizes) < 1 or base < 0 or step < 1:
        return None
    tp, pp, dp, nnodes = sizes
    dp_attention = str(server_args.get("enable_dp_attention", False)).lower() in ("true", "1", "yes")
    count = tp * pp * (1 if dp_attention else dp) // nnodes
    logical = [base + i * step for i in range(max(count, 1))]
    visible = (environment or {}).get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return sorted(logical) if max(logical) < len(gpu_uuids) or not gpu_uuids else None
    physical: list[int] = []
    for entry in visible.split(","):
        index = _visible_index(entry.strip(), gpu_uuids)
        if index is None:
            break   # CUDA ignores the rest; a rank it would need there fails the server
        physical.append(index)
    if max(logical) >= len(physical):
        return None
    return sorted(set(physical[i] for i in logical))


def _visible_index(entry: str, gpu_uuids: Sequence[str | None]) -> int | None:
    """NVML's index of one CUDA_VISIBLE_DEVICES entry; None where CUDA would not take it, or for a MIG device."""
    if entry.isdigit():
        return int(entry) if int(entry) < len(gpu_uuids) else None
    found = [index for index, uuid in enumerate(gpu_uuids) if entry.startswith("GPU-") and (uuid or "").startswith(entry)]
    return found[0] if len(found) == 1 else None


def outside_bytes(gpu_memory: Iterable[dict[str, Any]] | None,
                  neighbour_memory: Iterable[Iterable[dict[str, Any]] | None] = ()) -> dict[int, int]:
    """GPU index -> the bytes that processes other than the unit's and its neighbours' hold there, from the unit's
    kv_fingerprint ``gpu_memory`` and each neighbour's (whose ``server_bytes`` the unit's ``other_bytes`` count)."""
    out = {gpu["index"]: gpu.get("other_bytes") or 0 for gpu in gpu_memory or []}
    for memory in neighbour_memory:
        for gpu in memory or []:
            if gpu["index"] in out:
                out[gpu["index"]] = max(0, out[gpu["index"]] - (gpu.get("server_bytes") or 0))
    return out


def unlisted_at(gpu_memory: Iterable[dict[str, Any]] | None) -> dict[int, int]:
    """GPU index -> the bytes no process was listed for (boot_trust.unlisted_bytes), from kv_fingerprint's
    ``gpu_memory``; a GPU whose total is not known is left out."""
    return {gpu["index"]: gpu["unlisted_bytes"] for gpu in gpu_memory or [] if gpu.get("unlisted_bytes") is not None}


def other_gib(gpu_memory: Sequence[dict[str, Any]] | None) -> float | None:
    """GiB that other processes hold on the unit's GPUs (every GPU when none is known to be the unit's), from
    kv_fingerprint's ``gpu_memory``; None when it is not known."""
    if gpu_memory is None:
        return None
    mine = unit_gpus(gpu_memory)
    held = sum(gpu.get("other_bytes") or 0 for gpu in gpu_memory if mine is None or gpu["index"] in mine)
    return round(held / 2.0 ** 30, 2)


def neighbours(gpu_sets: dict[str, list[int] | None]) -> dict[str, list[str]]:
    """unit -> the other units whose servers share a GPU with it (unit -> its GPUs; None: unknown, so it may share
    any of them).

    A trial of a unit then loads its neighbours too, at the same time: the batches of servers on one GPU take their
    activations from the same free memory, and a value stable alone can run the pair out of memory at peak traffic."""
    found: dict[str, list[str]] = {unit: [] for unit in gpu_sets}
    for unit, gpus in gpu_sets.items():
        for other, other_gpus in gpu_sets.items():
            if other != unit and (not gpus or not other_gpus or set(gpus) & set(other_gpus)):
                found[unit].append(other)
    return {unit: sorted(others) for unit, others in found.items()}


def unit_outcome(outcome: dict[str, Any] | None, unit: str) -> Any:
    """What kv_tune returned for ``unit`` out of what it returned for its host (all of it when it tuned one unit or
    failed before any)."""
    units = (outcome or {}).get("units") or {}
    return units.get(unit, outcome)


def combine_units(host: str, results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The host's result when it has several units (unit -> that unit's result, in the order tuned): a failure of one
    unit fails the host after the others are tuned, and names the unit."""
    failed = [(unit, res) for unit, res in results.items()
              if res.get("failed") or res.get("status") in ("failed", "no_stable_value")]
    statuses = set(res.get("status") for res in results.values() if not res.get("failed"))
    out: dict[str, Any] = {
        "changed": any(res.get("changed") for res in results.values()), "units": results,
        "line": "\n".join(res.get("line") or "%s: %s" % (res.get("label", unit), res.get("msg"))
                          for unit, res in results.items())}
    if failed:
        out["status"] = "no_stable_value" if all(res.get("status") == "no_stable_value" for _u, res in failed) \
            else "failed"
        out["msg"] = "%s: %d of %d units not tuned: %s" % (host, len(failed), len(results), "; ".join(
            res.get("msg") or res.get("line") or unit for unit, res in failed))
    elif statuses == {"unchanged"}:
        out["status"] = "unchanged"
    else:
        for status in ("would_tune", "would_reset", "tuned", "reset", "unchanged"):
            if status in statuses:
                out["status"] = status
                break
    return out


def expand_units(outcomes: dict[str, Any]) -> dict[str, Any]:
    """host -> kv_tune's result, as label -> one unit's result: a host with several units gives a row each."""
    out: dict[str, Any] = {}
    for host, outcome in outcomes.items():
        units = (outcome or {}).get("units") or {}
        if len(units) > 1:
            for unit, res in units.items():
                out[res.get("label") or target_label(host, unit)] = res
        else:
            out[host] = outcome
    return out


def report_items(outcome: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The reports a host's result gives: one per unit that was searched, {name, unit, status, line, result,
    report}."""
    units = (outcome or {}).get("units") or {}
    found = units.values() if len(units) > 1 else [outcome or {}]
    return [{"name": report_name(res.get("label") or "?"), "unit": res.get("unit"), "status": res.get("status"),
             "line": res.get("line"), "result": res["result"], "report": res.get("report")}
            for res in found if res.get("result")]

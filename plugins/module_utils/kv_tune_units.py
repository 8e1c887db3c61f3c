# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Several servers on one host (sglang@a on GPUs 0-3, sglang@b on 4-7): how each unit is named, which share GPUs,
and the host's result and reports out of its units'."""
from __future__ import annotations


def target_label(host, unit):
    """How lines, reports and the summary name one of several units of a host: ``gpu1/sglang@a``."""
    stem = unit[:-len(".service")] if unit.endswith(".service") else unit
    return "%s/%s" % (host, stem)


def report_name(label):
    """The file name (without extension) of a unit's reports: its label, with no directory in it."""
    return label.replace("/", "_")


def unit_gpus(gpu_memory):
    """The GPUs a running unit's processes use (kv_fingerprint's ``gpu_memory``), or None: not running, unknown."""
    found = sorted(gpu["index"] for gpu in gpu_memory or [] if gpu.get("server_bytes"))
    return found or None


def other_gib(gpu_memory):
    """GiB that other processes hold on the unit's GPUs (every GPU when none is known to be the unit's), from
    kv_fingerprint's ``gpu_memory``; None when it is not known."""
    if gpu_memory is None:
        return None
    mine = unit_gpus(gpu_memory)
    held = sum(gpu.get("other_bytes") or 0 for gpu in gpu_memory if mine is None or gpu["index"] in mine)
    return round(held / 2.0 ** 30, 2)


def neighbours(gpu_sets):
    """unit -> the other units whose servers share a GPU with it (unit -> its GPUs, None: unknown, shares nothing
    known).

    A trial of a unit then loads its neighbours too, at the same time: the batches of servers on one GPU take their
    activations from the same free memory, and a value stable alone can run the pair out of memory at peak traffic."""
    found = {unit: [] for unit in gpu_sets}
    for unit, gpus in gpu_sets.items():
        for other, other_gpus in gpu_sets.items():
            if other != unit and gpus and other_gpus and set(gpus) & set(other_gpus):
                found[unit].append(other)
    return {unit: sorted(others) for unit, others in found.items()}


def unit_outcome(outcome, unit):
    """What kv_tune returned for ``unit`` out of what it returned for its host (all of it when it tuned one unit or
    failed before any)."""
    units = (outcome or {}).get("units") or {}
    return units.get(unit, outcome)


def combine_units(host, results):
    """The host's result when it has several units (unit -> that unit's result, in the order tuned): a failure of one
    unit fails the host after the others are tuned, and names the unit."""
    failed = [(unit, res) for unit, res in results.items()
              if res.get("failed") or res.get("status") in ("failed", "no_stable_value")]
    statuses = set(res.get("status") for res in results.values() if not res.get("failed"))
    out = {"changed": any(res.get("changed") for res in results.values()), "units": results,
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


def expand_units(outcomes):
    """host -> kv_tune's result, as label -> one unit's result: a host with several units gives a row each."""
    out = {}
    for host, outcome in outcomes.items():
        units = (outcome or {}).get("units") or {}
        if len(units) > 1:
            for unit, res in units.items():
                out[res.get("label") or target_label(host, unit)] = res
        else:
            out[host] = outcome
    return out


def report_items(outcome):
    """The reports a host's result gives: one per unit that was searched, {name, unit, status, line, result,
    report}."""
    units = (outcome or {}).get("units") or {}
    found = units.values() if len(units) > 1 else [outcome or {}]
    return [{"name": report_name(res.get("label") or "?"), "unit": res.get("unit"), "status": res.get("status"),
             "line": res.get("line"), "result": res["result"], "report": res.get("report")}
            for res in found if res.get("result")]

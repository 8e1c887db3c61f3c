# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Whether the memory numbers of a boot can be trusted: another process that allocates on a GPU while SGLang loads
makes the log's "mem usage" (P - A of that rank) far larger than the weights, and A too small, so the formula's
inputs are wrong and any token figure computed from them is too.

Pure and stdlib only. Two checks, each a finding (a sentence with the numbers) when it fails:

- weights vs checkpoint: the weights a GPU holds are the checkpoint's bytes (``metadata.total_size`` of
  ``model.safetensors.index.json``) over TP x PP. A rank that reports more than that by over
  ``CHECKPOINT_SLACK_RATIO`` and ``CHECKPOINT_SLACK_GIB`` both did not spend it on weights. Loading never grows a
  checkpoint by that much: online quantization shrinks it, and buffers SGLang builds while loading are far smaller.
- while a restarted server starts, sglang_ready watches its GPUs (:func:`add_sample`): memory that processes outside
  the unit hold there and that grows or shrinks by over ``WATCH_SLACK_GIB`` against the run's first look moved under
  SGLang's measurements, whatever the log says (the same amount taken on every GPU, below the checkpoint's slack,
  shows nowhere else) (:func:`start_findings`).
- ranks of one pipeline stage load the same shards, so their "mem usage" is the same: every real multi-rank boot
  in tests/fixtures (TP8 Kimi-K2.5 on RTX PRO 6000 and MI355X, TP8 GLM-5, DP4 x TP4 Qwen3-MoE with EP, TP2 Qwen3.5)
  prints one figure on every rank, to SGLang's 0.01 GB. Ranks that differ by over ``RANK_SPREAD_GIB`` had free
  memory taken from some GPUs, not others, during the load: 4 GiB on one GPU of eight is 5.5% of a 72 GiB share,
  which no ratio could tell from a clean load of a larger model, so the bound is absolute.
"""
from __future__ import annotations

import re

GIB = 2 ** 30
CHECKPOINT_SLACK_RATIO = 0.25
CHECKPOINT_SLACK_GIB = 1.0
RANK_SPREAD_GIB = 0.5
# A CUDA context is about 0.3-0.5 GiB: less than that moving is not another process's allocation.
WATCH_SLACK_GIB = 0.25

__all__ = ["add_sample", "checkpoint_bytes", "findings", "start_findings"]


def checkpoint_bytes(index):
    """The checkpoint's size in bytes from a parsed ``model.safetensors.index.json`` (its ``metadata.total_size``);
    None when the index does not say."""
    if not isinstance(index, dict):
        return None
    size = (index.get("metadata") or {}).get("total_size") if isinstance(index.get("metadata"), dict) else None
    if isinstance(size, bool) or not isinstance(size, (int, float)) or size <= 0:
        return None
    return int(size)


def _shards(facts):
    """(tp, pp) of the boot: its server_args, else one pipeline stage of as many TP ranks as printed records."""
    args = facts.get("server_args") or {}
    tp = args.get("tp_size") if isinstance(args.get("tp_size"), int) else None
    pp = args.get("pp_size") if isinstance(args.get("pp_size"), int) else None
    return tp or max(1, len(facts.get("ranks") or [])), pp or 1


def _stage(tag):
    match = re.search(r"\bPP(\d+)\b", tag or "")
    return match.group(1) if match else ""


def findings(facts, checkpoint_size=None):
    """Sentences that say why the boot's memory numbers cannot be trusted (an empty list when nothing is wrong).
    ``facts``: parse_startup_log's facts; ``checkpoint_size``: the checkpoint's bytes (None: that check is skipped)."""
    found = []
    weights = facts.get("weights_gib")
    if checkpoint_size and weights is not None:
        tp, pp = _shards(facts)
        expected = float(checkpoint_size) / GIB / (tp * pp)
        excess = weights - expected
        if excess > CHECKPOINT_SLACK_GIB and excess > CHECKPOINT_SLACK_RATIO * expected:
            found.append(
                "the log says the weights took %.2f GiB per GPU, but the checkpoint is %.2f GiB (%.2f GiB per GPU at "
                "TP %d x PP %d): %.2f GiB were taken by something else while SGLang loaded (another process on the "
                "GPU?), so P, A and the token figures computed from them are wrong"
                % (weights, float(checkpoint_size) / GIB, expected, tp, pp, excess))
    stages = {}
    for rank in facts.get("ranks") or []:
        if rank.get("weights_gib") is not None:
            stages.setdefault(_stage(rank.get("tag")), []).append(rank)
    for stage in sorted(stages):
        ranks = stages[stage]
        low = min(ranks, key=lambda r: r["weights_gib"])
        high = max(ranks, key=lambda r: r["weights_gib"])
        spread = high["weights_gib"] - low["weights_gib"]
        if spread > RANK_SPREAD_GIB:
            found.append(
                "ranks that load the same shards report different weights: %s %.2f GiB, %s %.2f GiB: free memory "
                "moved on some GPUs during the load (another process?), so P and A are not what SGLang's pool will see "
                "next time" % (high.get("tag") or "untagged", high["weights_gib"], low.get("tag") or "untagged",
                               low["weights_gib"]))
    return found


def add_sample(seen, gpus, indices, server_pids):
    """Fold one GPU sample (gpu_probe's dicts, with compute_processes) into ``seen``: per GPU of ``indices``, the
    least and most bytes that processes outside ``server_pids`` held, and those processes. Returns ``seen``
    ({index: {"gpu", "min_bytes", "max_bytes", "processes": {pid: {"pid", "name", "max_bytes"}}}})."""
    for gpu in gpus:
        if gpu.get("index") not in indices:
            continue
        others = [proc for proc in gpu.get("compute_processes") or [] if proc.get("pid") not in server_pids]
        held = sum(proc.get("used_memory_bytes") or 0 for proc in others)
        entry = seen.setdefault(gpu["index"], {"gpu": gpu["index"], "min_bytes": held, "max_bytes": held,
                                               "processes": {}})
        entry["min_bytes"], entry["max_bytes"] = min(entry["min_bytes"], held), max(entry["max_bytes"], held)
        for proc in others:
            found = entry["processes"].setdefault(proc["pid"], {"pid": proc["pid"], "name": proc.get("name"),
                                                                "max_bytes": 0})
            found["max_bytes"] = max(found["max_bytes"], proc.get("used_memory_bytes") or 0)
    return seen


def start_findings(seen, before, during="while the server started"):
    """Sentences for memory outside the server that appeared or went away on its GPUs ``during`` its start or its
    load (an empty list when nothing moved). ``seen``: sglang_ready's ``other_memory_seen`` (a list of :func:`add_sample`'s
    entries, processes as a list); ``before``: GPU index -> the bytes other processes held there at the run's first
    look (kv_fingerprint's ``gpu_memory``); a GPU it does not know counts as 0."""
    found = []
    for entry in sorted(seen or [], key=lambda e: e["gpu"]):
        was = (before or {}).get(entry["gpu"], 0) or 0
        if entry["max_bytes"] - was > WATCH_SLACK_GIB * GIB:
            procs = sorted(entry.get("processes") or [], key=lambda proc: -proc["max_bytes"])
            who = ", ".join("pid %s %s" % (proc["pid"], proc.get("name") or "?") for proc in procs[:3])
            found.append("another process held up to %.2f GiB on GPU %d %s (%s), against %.2f GiB at the first "
                         "look: P, A and the pool of this start are not what the next start will see"
                         % (entry["max_bytes"] / GIB, entry["gpu"], during, who or "?", was / GIB))
        elif was - entry["min_bytes"] > WATCH_SLACK_GIB * GIB:
            found.append("memory other processes held on GPU %d at the first look (%.2f GiB) was given back %s "
                         "(%.2f GiB at the least): this start had memory the next one may not have"
                         % (entry["gpu"], was / GIB, during, entry["min_bytes"] / GIB))
    return found

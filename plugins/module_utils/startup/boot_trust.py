# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Whether the memory numbers of a boot can be trusted: another process that allocates on a GPU while SGLang loads
makes the log's "mem usage" (P - A of that rank) far larger than the weights, and A too small, so the formula's
inputs are wrong and any token figure computed from them is too.

Pure and stdlib only. The checks, each a finding (a sentence with the numbers) when it fails:

- weights vs checkpoint: the weights a GPU holds are the checkpoint's bytes (``metadata.total_size`` of
  ``model.safetensors.index.json``) over TP x PP. A rank that reports more than that by over
  ``CHECKPOINT_SLACK_RATIO`` and ``CHECKPOINT_SLACK_GIB`` both did not spend it on weights. Loading never grows a
  checkpoint by that much: online quantization shrinks it, and buffers SGLang builds while loading are far smaller.
- while a restarted server starts, sglang_ready watches its GPUs (:func:`add_sample`): memory that processes outside
  the unit hold there and that grows or shrinks by over ``WATCH_SLACK_GIB`` against the run's first look moved under
  SGLang's measurements, whatever the log says (the same amount taken on every GPU, below the checkpoint's slack,
  shows nowhere else) (:func:`start_findings`). kv_stress watches the load the same way, and the look at the GPUs
  after it (the trial's kv_fingerprint, just before the trial is judged and committed) is judged so too
  (:func:`look_findings`).
- memory no process is listed for (a GPU's ``memory.used`` less every compute process NVML lists: another
  container's process, or one NVML cannot attribute) is watched the same way, against its amount at the first look.
  The total and the processes are two reads, so a server that grows between them makes this figure jitter: it counts
  only when two samples in a row agree (a load holds its memory for seconds).
- ranks of one pipeline stage load the same shards, so their "mem usage" is the same: every real multi-rank boot
  in tests/fixtures (TP8 Kimi-K2.5 on RTX PRO 6000 and MI355X, TP8 GLM-5, DP4 x TP4 Qwen3-MoE with EP, TP2 Qwen3.5)
  prints one figure on every rank, to SGLang's 0.01 GB. Ranks that differ by over ``RANK_SPREAD_GIB`` had free
  memory taken from some GPUs, not others, during the load: 4 GiB on one GPU of eight is 5.5% of a 72 GiB share,
  which no ratio could tell from a clean load of a larger model, so the bound is absolute.
- the same ranks then allocate the same pools from what the weights left: what goes between "Load weight end" and
  "Memory pool end" besides the logged pools (:func:`pool_window_gib`: the request-to-token table, workspaces) is
  the same on every rank of a stage. The free memory of the ranks differs (by 0.42 GB in the TP8 Kimi-K2.5 boot on
  MI355X) but that figure does not: 4.09-4.10 GB there, 3.25-3.26 GB in the TP8 GLM-5 boot, 0.09 GB on both DP
  ranks of the Qwen3-MoE boot, 0.11 GB on both ranks of the Qwen3.5 one. A rank off the others by over
  ``RANK_SPREAD_GIB`` had memory taken or given back on its GPU while SGLang measured it and sized the pool, after
  the weights' figures were printed.
"""
from __future__ import annotations

import re
from typing import Any, Callable, Iterable, Iterator, Mapping

GIB = 2 ** 30
CHECKPOINT_SLACK_RATIO = 0.25
CHECKPOINT_SLACK_GIB = 1.0
RANK_SPREAD_GIB = 0.5
# A CUDA context is about 0.3-0.5 GiB: less than that moving is not another process's allocation.
WATCH_SLACK_GIB = 0.25

__all__ = ["add_sample", "checkpoint_bytes", "findings", "look_findings", "pool_findings", "pool_window_gib",
           "start_findings", "unlisted_bytes"]


def checkpoint_bytes(index: Any) -> int | None:
    """The checkpoint's size in bytes from a parsed ``model.safetensors.index.json`` (its ``metadata.total_size``);
    None when the index does not say."""
    if not isinstance(index, dict):
        return None
    size = (index.get("metadata") or {}).get("total_size") if isinstance(index.get("metadata"), dict) else None
    if isinstance(size, bool) or not isinstance(size, (int, float)) or size <= 0:
        return None
    return int(size)


def _shards(facts: dict[str, Any]) -> tuple[int, int]:
    """(tp, pp) of the boot: its server_args, else one pipeline stage of as many TP ranks as printed records."""
    args = facts.get("server_args") or {}
    tp = args.get("tp_size") if isinstance(args.get("tp_size"), int) else None
    pp = args.get("pp_size") if isinstance(args.get("pp_size"), int) else None
    return tp or max(1, len(facts.get("ranks") or [])), pp or 1


def _stage(tag: str | None) -> str:
    match = re.search(r"\bPP(\d+)\b", tag or "")
    return match.group(1) if match else ""


def pool_window_gib(rank: Any) -> float | None:
    """GiB a rank's GPU lost between the end of the weights and the first "Memory pool end" besides the pools its log
    reports in between (the KV pool, a hybrid model's state pool; a classic draft's pool comes after it): A less those
    pools less the free memory at "Memory pool end". None when the rank's log lacks one of them (a start that failed
    before its pool)."""
    after, pool, end = rank.get("post_load_free_gib"), rank.get("kv_size_gib"), rank.get("memory_pool_end_free_gib")
    if None in (after, pool, end):
        return None
    return after - pool - (rank.get("mamba_size_gib") or 0) - end


def _spread(stages: dict[str, list[dict[str, Any]]],
            figure: Callable[[dict[str, Any]], Any]) -> Iterator[tuple[Any, Any]]:
    """Per stage (stage -> ranks), the ranks with the highest and the lowest ``figure`` when they differ by over
    RANK_SPREAD_GIB; ranks without it do not count."""
    for stage in sorted(stages):
        ranks = [(figure(rank), rank) for rank in stages[stage] if figure(rank) is not None]
        if len(ranks) < 2:
            continue
        low, high = min(ranks, key=lambda pair: pair[0]), max(ranks, key=lambda pair: pair[0])
        if high[0] - low[0] > RANK_SPREAD_GIB:
            yield high, low


def _tag(rank: dict[str, Any]) -> str:
    return rank.get("tag") or "untagged"


def findings(facts: dict[str, Any], checkpoint_size: float | None = None) -> list[str]:
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
    stages: dict[str, list[dict[str, Any]]] = {}
    for rank in facts.get("ranks") or []:
        stages.setdefault(_stage(rank.get("tag")), []).append(rank)
    for (most, high), (least, low) in _spread(stages, lambda rank: rank.get("weights_gib")):
        found.append(
            "ranks that load the same shards report different weights: %s %.2f GiB, %s %.2f GiB: free memory "
            "moved on some GPUs during the load (another process?), so P and A are not what SGLang's pool will see "
            "next time" % (_tag(high), most, _tag(low), least))
    for (most, high), (least, low) in _spread(stages, pool_window_gib):
        found.append(
            "ranks that build the same pools lost different memory between the weights and the pool's end besides "
            "the pools: %s %.2f GiB, %s %.2f GiB: memory moved on some GPUs while SGLang sized the pool (another "
            "process?), so the pool and the headroom of this start are not what the next start will see"
            % (_tag(high), most, _tag(low), least))
    return found


def pool_findings(residual_gib: float | None, reference_gib: float | None) -> list[str]:
    """A sentence when the pool of a start is off SGLang's formula at its own P, A and f by other than what it was at
    the run's first start (``residual_gib``, ``reference_gib``: pool_model.pool_residual_gib of each): what the
    formula leaves out is the same at every start of one configuration, so memory moved on the GPUs while SGLang
    measured them again to size the pool. An empty list when they agree within WATCH_SLACK_GIB or one is unknown."""
    if residual_gib is None or reference_gib is None or abs(residual_gib - reference_gib) <= WATCH_SLACK_GIB:
        return []
    return ["the pool SGLang logged is %.2f GiB %s than its formula gives at this start's P, A and f, where the run's "
            "first start's was %.2f GiB %s: memory moved on the GPUs while SGLang measured them again and sized the "
            "pool (another process?), so the pool and the headroom of this start are not what the next start will see"
            % (abs(residual_gib), "smaller" if residual_gib >= 0 else "larger", abs(reference_gib),
               "smaller" if reference_gib >= 0 else "larger")]


def unlisted_bytes(gpu: dict[str, Any]) -> int | None:
    """Bytes a GPU uses beyond what its listed compute processes hold (gpu_probe's dict); None when its total is
    not known. Never below 0."""
    used = gpu.get("memory_used_bytes")
    if used is None:
        return None
    return max(0, used - sum(proc.get("used_memory_bytes") or 0 for proc in gpu.get("compute_processes") or []))


def needs_second_read(gpus: Iterable[dict[str, Any]]) -> bool:
    """Whether a look at the GPUs (gpu_probe's dicts) shows memory no process was listed for on any GPU: read them
    again (:func:`settled_read`) before it counts."""
    return any((unlisted_bytes(gpu) or 0) > WATCH_SLACK_GIB * GIB for gpu in gpus)


def settled_read(first: Iterable[dict[str, Any]], second: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """One look from two reads of the GPUs, per GPU the read with the less memory no process was listed for: a
    process that exits between the totals and the process list of a read (a server that fails as it starts) leaves
    memory no process holds in that read alone. What another container holds is in both. The watches need two
    samples in a row for the same reason (:func:`add_sample`)."""
    again = {gpu.get("index"): gpu for gpu in second}
    return [min((gpu, again.get(gpu.get("index"), gpu)), key=lambda read: unlisted_bytes(read) or 0)
            for gpu in first]


def add_sample(seen: dict[int, dict[str, Any]], gpus: Iterable[dict[str, Any]], indices: Any,
               server_pids: Any) -> dict[int, dict[str, Any]]:
    """Fold one GPU sample (gpu_probe's dicts, with compute_processes) into ``seen``: per GPU of ``indices``, the
    least and most bytes that processes outside ``server_pids`` held, and those processes; and the least and most
    bytes no process was listed for (:func:`unlisted_bytes`) that two samples in a row agree on (the lower of the
    two for the most, the higher for the least). Returns ``seen`` ({index: {"gpu", "min_bytes", "max_bytes",
    "processes": {pid: {"pid", "name", "max_bytes"}}, "unlisted_min_bytes", "unlisted_max_bytes",
    "unlisted_last_bytes"}}; the unlisted figures None until two samples are taken or when totals are unknown)."""
    for gpu in gpus:
        if gpu.get("index") not in indices:
            continue
        others = [proc for proc in gpu.get("compute_processes") or [] if proc.get("pid") not in server_pids]
        held = sum(proc.get("used_memory_bytes") or 0 for proc in others)
        entry = seen.setdefault(gpu["index"], {"gpu": gpu["index"], "min_bytes": held, "max_bytes": held,
                                               "processes": {}, "unlisted_min_bytes": None,
                                               "unlisted_max_bytes": None, "unlisted_last_bytes": None})
        entry["min_bytes"], entry["max_bytes"] = min(entry["min_bytes"], held), max(entry["max_bytes"], held)
        unlisted, last = unlisted_bytes(gpu), entry["unlisted_last_bytes"]
        if unlisted is not None and last is not None:
            low, high = min(unlisted, last), max(unlisted, last)
            entry["unlisted_max_bytes"] = max(low, entry["unlisted_max_bytes"] or 0)
            entry["unlisted_min_bytes"] = high if entry["unlisted_min_bytes"] is None \
                else min(high, entry["unlisted_min_bytes"])
        entry["unlisted_last_bytes"] = unlisted
        for proc in others:
            found = entry["processes"].setdefault(proc["pid"], {"pid": proc["pid"], "name": proc.get("name"),
                                                                "max_bytes": 0})
            found["max_bytes"] = max(found["max_bytes"], proc.get("used_memory_bytes") or 0)
    return seen


def start_findings(seen: Iterable[dict[str, Any]] | None, before: Mapping[int, int] | None,
                   during: str = "while the server started",
                   unlisted_before: Mapping[int, int | None] | None = None) -> list[str]:
    """Sentences for memory outside the server that appeared or went away on its GPUs ``during`` its start or its
    load (an empty list when nothing moved). ``seen``: sglang_ready's ``other_memory_seen`` (a list of :func:`add_sample`'s
    entries, processes as a list); ``before``: GPU index -> the bytes other processes held there at the run's first
    look (kv_fingerprint's ``gpu_memory``); a GPU it does not know counts as 0. ``unlisted_before``: GPU index -> the
    bytes no process was listed for at the first look; a GPU it does not know (or None) is not judged on them, as
    a driver may keep some there for ever."""
    found = []
    for entry in sorted(seen or [], key=lambda e: e["gpu"]):
        found += _unlisted_findings(entry, (unlisted_before or {}).get(entry["gpu"]), during)
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


def look_findings(gpu_memory: Iterable[dict[str, Any]] | None, gpus: Any, before: Mapping[int, int] | None,
                  unlisted_before: Mapping[int, int | None] | None = None,
                  during: str = "between the load and the commit") -> list[str]:
    """:func:`start_findings` for one look at the GPUs (kv_fingerprint's ``gpu_memory``, whose ``other_bytes`` leave out
    the unit's neighbours' processes) on ``gpus`` (None: every GPU): memory that came or went outside the server
    after its watched start and load, before the trial is judged. One sample, where the watches need two in a row
    for memory no process is listed for: the server is idle then and no longer grows between the two reads."""
    seen = [{"gpu": gpu["index"], "min_bytes": gpu.get("other_bytes") or 0, "max_bytes": gpu.get("other_bytes") or 0,
             "processes": [dict(proc, max_bytes=0) for proc in gpu.get("other_processes") or []],
             "unlisted_min_bytes": gpu.get("unlisted_bytes"), "unlisted_max_bytes": gpu.get("unlisted_bytes")}
            for gpu in gpu_memory or [] if gpus is None or gpu["index"] in gpus]
    return start_findings(seen, before, during, unlisted_before)


def _unlisted_findings(entry: dict[str, Any], was: int | None, during: str) -> list[str]:
    """:func:`start_findings`' sentences for one GPU's memory that no process is listed for."""
    if was is None:
        return []
    most, least = entry.get("unlisted_max_bytes"), entry.get("unlisted_min_bytes")
    if most is not None and most - was > WATCH_SLACK_GIB * GIB:
        return ["GPU %d used up to %.2f GiB that no process was listed for %s, against %.2f GiB at the first look "
                "(a process of another container, or one NVML does not attribute): P, A and the pool of this start "
                "are not what the next start will see" % (entry["gpu"], most / GIB, during, was / GIB)]
    if least is not None and was - least > WATCH_SLACK_GIB * GIB:
        return ["memory no process was listed for on GPU %d at the first look (%.2f GiB) was given back %s "
                "(%.2f GiB at the least): this start had memory the next one may not have"
                % (entry["gpu"], was / GIB, during, least / GIB)]
    return []

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The grammar of SGLang's startup log: text in, memory facts and a failure diagnosis out.

Pure and stdlib only: no I/O. The caller reads the log (a file, a journal) and hands the text in.

Public API
----------
``parse_startup_log(text) -> dict``
    Facts of the **last boot** in ``text`` (see "Boots" below). Raises ``StartupLogError`` when the text holds
    no SGLang boot at all (empty or unrelated text). A boot that failed early is not an error: its facts come
    back with ``failure`` set and the values it never printed as ``None``.
``split_boots(lines) -> list[list[str]]``
    The boots of a log, oldest first (only the boots that hold SGLang records).
``classify_failure(lines) -> dict | None``
    The failure of one boot (``{kind, line, advice[, oom]}``) or ``None``.
``StartupLogError(ValueError)``
    The text holds no SGLang boot.

Aggregation (one boot)
----------------------
P (``pre_load_free_gib``) = MIN over ranks of each rank's first ``Load weight begin``; A (``post_load_free_gib``)
= MIN over ranks of each rank's first ``Load weight end``; ``weights_gib`` = MAX over ranks of its ``mem usage``;
``kv_tokens`` = MIN over ranks of the first KV line's ``#tokens``; ``kv_size_gib`` = MAX over ranks of K+V (or KV)
size; ``cuda_graph_gib`` = MAX over ranks of the SUM of every capture kind's ``mem usage`` on that rank (draft and
piecewise graphs included). A rank's second ``Load weight``/KV line (or one whose class or label names a draft:
Eagle, MTP, NextN, Draft) is the speculative draft model's and goes to the ``draft_*`` facts, never to P, A or
the weights. ``max_total_num_tokens`` and its companions come from the scheduler line of each DP replica
(``replicas``); the top-level values are those of the replica with the fewest tokens,
``available_gpu_mem_gib`` is the MIN over replicas.

The line grammar and the boots are startup_records', the failures startup_failure's.
"""
from __future__ import annotations

import re
from typing import Any, Iterable, Sequence

from ansible_collections.llmserve.sglang.plugins.module_utils.startup.boot_trust import findings as untrusted_findings
from ansible_collections.llmserve.sglang.plugins.module_utils.service.server_args import from_log_line as server_args_from_log_line
from ansible_collections.llmserve.sglang.plugins.module_utils.startup.startup_failure import FAILURE_KINDS, classify_failure
from ansible_collections.llmserve.sglang.plugins.module_utils.startup.startup_records import (
    CAPTURE_DEVICE, CAPTURE_END, KV_ALLOC, LW_BEGIN, LW_END, MAX_TOTAL, NUM, POOL_END, READY, SERVER_ARGS,
    split_boots, split_record)

__all__ = [
    "StartupLogError",
    "FAILURE_KINDS",
    "parse_startup_log",
    "split_boots",
    "classify_failure",
]


class StartupLogError(ValueError):
    """The text holds no SGLang startup record at all (empty or unrelated text)."""


# The lines only the facts read (startup_records has the others).
_KV_DTYPE = re.compile(r"Using KV cache dtype: (\S+)")
_KEY_VALUE = re.compile(r"(\w+)=(-?\d+(?:\.\d+)?)")
_SWA = re.compile(r"use sliding window memory pool\. full_layer_tokens=(\d+), swa_layer_tokens=(\d+)",
                  re.IGNORECASE)
_SWA_POOL = re.compile(r"SWAKVPool mem usage: ([\d.]+) GB, swa size: (\d+), full size: (\d+)")
_AVAILABLE_MEM = re.compile(r"available_(?:gpu|cpu)_mem=" + NUM + r" GB")
_MM_REDUCE = re.compile(r"Automatically reduce --mem-fraction-static to ([\d.]+) because this is a multimodal model")
_MAMBA = re.compile(r"Mamba Cache is allocated\.\s*(?:max_mamba_cache_size: (\d+),\s*)?conv_state size: ([\d.]+) ?GB,"
                    r"\s*ssm_state size: ([\d.]+) ?GB")
_FIELD = {
    "elapsed": re.compile(r"elapsed=" + NUM + r" ?s\b"),
    "type": re.compile(r"type=([\w.]+)"),
    "dtype": re.compile(r"dtype=(torch\.\w+)"),
    "avail": re.compile(r"avail mem=" + NUM + r" GB"),
    "usage": re.compile(r"mem usage=" + NUM + r" GB"),
}
_DRAFT_CLASS = re.compile(r"eagle|draft|mtp|nextn", re.IGNORECASE)


def _capture_name(name: str) -> str:
    """'' (classic target decode), 'piecewise', 'draft', 'draft extend', 'target decode', 'target verify', ..."""
    name = CAPTURE_DEVICE.sub(" ", name)
    name = " ".join(name.lower().split())
    return name or "decode"


_RANK_KEYS = (
    "pre_load_free_gib", "post_load_free_gib", "weights_gib", "weights_type", "load_elapsed_s",
    "kv_tokens", "kv_size_gib", "kv_dtype", "memory_pool_end_free_gib", "cuda_graph_gib", "cuda_graphs",
    "post_capture_free_gib", "draft_pre_load_free_gib", "draft_weights_gib", "draft_weights_type",
    "draft_kv_tokens", "draft_kv_size_gib", "full_tokens", "swa_tokens", "mamba_cache_size", "mamba_size_gib",
)


def _new_rank(tag: str) -> dict[str, Any]:
    rank: dict[str, Any] = dict((key, None) for key in _RANK_KEYS)
    rank["tag"] = tag
    rank["cuda_graphs"] = {}
    rank["_loads"] = 0
    rank["_begins"] = 0
    rank["_kvs"] = 0
    return rank


def _float(text: str | None) -> float | None:
    return None if text is None else float(text)


def _min(values: Iterable[Any]) -> Any:
    values = [v for v in values if v is not None]
    return min(values) if values else None


def _max(values: Iterable[Any]) -> Any:
    values = [v for v in values if v is not None]
    return max(values) if values else None


def _dp_key(tag: str | None) -> str:
    for part in (tag or "").split():
        if part.startswith("DP"):
            return part
    return ""


def _rank_sort_key(tag: str) -> list[tuple[str, int]]:
    return [(re.sub(r"\d+$", "", p), int(re.sub(r"^\D+", "", p) or 0)) for p in tag.split()]


class _Boot:
    """What the lines of one boot said so far: per-rank records, DP replicas and boot-level values."""

    __slots__ = ("ranks", "replicas", "server_args", "kv_dtype_line", "ready", "fmt_current", "mm_reduced")

    def __init__(self) -> None:
        self.ranks: dict[str, dict[str, Any]] = {}  # rank tag ("" untagged) -> _new_rank() dict
        # DP tag ("" without DP) -> the first scheduler line's values of that replica
        self.replicas: dict[str, dict[str, Any]] = {}
        self.server_args: dict[str, Any] = {}
        self.kv_dtype_line: str | None = None  # "Using KV cache dtype: ..." (the first one)
        self.ready = False
        self.fmt_current = False  # a line only the current wording prints was seen
        # "Automatically reduce --mem-fraction-static to X ... multimodal model" (SGLang 0.4.x)
        self.mm_reduced: float | None = None

    def rank(self, tag: str | None) -> dict[str, Any]:
        """The record of rank ``tag`` (``None`` and ``""`` are the untagged rank), created on first use."""
        key = tag or ""
        if key not in self.ranks:
            self.ranks[key] = _new_rank(key)
        return self.ranks[key]


# Line handlers: handler(boot, tag, message, match) records what one matched line says into ``boot``.
# ``tag`` is the line's rank tag (None without an SGLang prefix), ``message`` the text after the prefix.


def _on_server_args(boot: _Boot, _tag: str | None, message: str, _match: re.Match[str]) -> None:
    boot.server_args = server_args_from_log_line(message)  # the last one of the boot wins


def _on_ready(boot: _Boot, _tag: str | None, _message: str, _match: re.Match[str]) -> None:
    boot.ready = True


def _on_load_begin(boot: _Boot, tag: str | None, _message: str, match: re.Match[str]) -> None:
    rank = boot.rank(tag)
    rank["_begins"] += 1
    # A rank's second "Load weight begin" is the draft model's.
    if rank["_begins"] == 1:
        rank["pre_load_free_gib"] = float(match.group(1))
    elif rank["draft_pre_load_free_gib"] is None:
        rank["draft_pre_load_free_gib"] = float(match.group(1))


def _on_load_end(boot: _Boot, tag: str | None, _message: str, match: re.Match[str]) -> None:
    rest = match.group("rest")
    boot.fmt_current = boot.fmt_current or "elapsed=" in rest
    rank = boot.rank(tag)
    rank["_loads"] += 1
    type_match = _FIELD["type"].search(rest)
    cls = type_match.group(1) if type_match else None
    avail = _FIELD["avail"].search(rest)
    usage = _FIELD["usage"].search(rest)
    elapsed = _FIELD["elapsed"].search(rest)
    # The second load of a rank, or a class that names a draft (Eagle, MTP, NextN), is the draft model's.
    is_draft = rank["_loads"] > 1 or bool(cls and _DRAFT_CLASS.search(cls))
    if not is_draft:
        rank["post_load_free_gib"] = float(avail.group(1)) if avail else None
        rank["weights_gib"] = float(usage.group(1)) if usage else None
        rank["weights_type"] = cls
        rank["load_elapsed_s"] = float(elapsed.group(1)) if elapsed else None
    elif rank["draft_weights_gib"] is None and rank["draft_weights_type"] is None:
        rank["draft_weights_gib"] = float(usage.group(1)) if usage else None
        rank["draft_weights_type"] = cls


def _on_kv_dtype(boot: _Boot, _tag: str | None, _message: str, match: re.Match[str]) -> None:
    boot.kv_dtype_line = boot.kv_dtype_line or match.group(1)


def _on_kv_alloc(boot: _Boot, tag: str | None, _message: str, match: re.Match[str]) -> None:
    rank = boot.rank(tag)
    rank["_kvs"] += 1
    if match.group("dtype"):
        boot.fmt_current = True  # only the current wording prints "dtype: " in the KV line
    size = (float(match.group("k")) + float(match.group("v"))) if match.group("k") else float(match.group("kv"))
    tokens = int(match.group("tokens")) if match.group("tokens") else None
    label = match.group("label") or ""
    if rank["_kvs"] == 1 and "draft" not in label.lower():
        rank["kv_tokens"], rank["kv_size_gib"] = tokens, round(size, 2)
        rank["kv_dtype"] = match.group("dtype")
    elif rank["draft_kv_size_gib"] is None:
        rank["draft_kv_tokens"], rank["draft_kv_size_gib"] = tokens, round(size, 2)


def _on_pool_end(boot: _Boot, tag: str | None, _message: str, match: re.Match[str]) -> None:
    rank = boot.rank(tag)
    if rank["memory_pool_end_free_gib"] is None:
        rank["memory_pool_end_free_gib"] = float(match.group(1))


def _on_capture_end(boot: _Boot, tag: str | None, _message: str, match: re.Match[str]) -> None:
    rank = boot.rank(tag)
    rest = match.group("rest")
    # current: "... CUDA graph end. elapsed=T s, ..."; classic: "... graph end. Time elapsed: T s. ..."
    if "elapsed=" in rest and "Time elapsed" not in rest:
        boot.fmt_current = True
    usage = _FIELD["usage"].search(rest)
    avail = _FIELD["avail"].search(rest)
    if usage:
        name = _capture_name(match.group("name"))
        rank["cuda_graphs"][name] = round(rank["cuda_graphs"].get(name, 0.0) + float(usage.group(1)), 2)
    if avail:
        rank["post_capture_free_gib"] = float(avail.group(1))


def _on_swa(boot: _Boot, tag: str | None, _message: str, match: re.Match[str]) -> None:
    rank = boot.rank(tag)
    rank["full_tokens"], rank["swa_tokens"] = int(match.group(1)), int(match.group(2))


def _on_swa_pool(boot: _Boot, tag: str | None, _message: str, match: re.Match[str]) -> None:
    rank = boot.rank(tag)
    rank["full_tokens"], rank["swa_tokens"] = int(match.group(3)), int(match.group(2))


def _on_mm_reduce(boot: _Boot, _tag: str | None, _message: str, match: re.Match[str]) -> None:
    boot.mm_reduced = float(match.group(1))


def _on_mamba(boot: _Boot, tag: str | None, _message: str, match: re.Match[str]) -> None:
    rank = boot.rank(tag)
    if rank["mamba_size_gib"] is None:  # a draft's own state pool (MTP) comes second
        rank["mamba_cache_size"] = int(match.group(1)) if match.group(1) else None
        rank["mamba_size_gib"] = round(float(match.group(2)) + float(match.group(3)), 2)


def _on_max_total(boot: _Boot, tag: str | None, message: str, _match: re.Match[str]) -> None:
    values: dict[str, float] = {}
    for key, value in _KEY_VALUE.findall(message):
        values[key] = float(value) if "." in value else int(value)
    gpu_mem = _AVAILABLE_MEM.search(message)
    replica = {
        "tag": tag or "",
        "max_total_num_tokens": values.get("max_total_num_tokens"),
        "chunked_prefill_size": values.get("chunked_prefill_size"),
        "max_prefill_tokens": values.get("max_prefill_tokens"),
        "max_running_requests": values.get("max_running_requests"),
        "context_len": values.get("context_len"),
        "available_gpu_mem_gib": float(gpu_mem.group(1)) if gpu_mem else None,
    }
    boot.replicas.setdefault(_dp_key(tag), replica)  # the first scheduler line of each DP replica


# The grammar of the facts, in the order a line is tried: a line goes to the FIRST pattern that matches and to no
# other (a "Load weight end" line never counts as a KV or capture line, whatever else it holds).
_LINE_HANDLERS = (
    (SERVER_ARGS, _on_server_args),  # server_args=ServerArgs(...)
    (READY, _on_ready),  # The server is fired up and ready to roll!
    (LW_BEGIN, _on_load_begin),  # Load weight begin. avail mem=P GB
    (LW_END, _on_load_end),  # Load weight end. [elapsed=S s, ]type=C, ..., avail mem=A GB, mem usage=W GB.
    (_KV_DTYPE, _on_kv_dtype),  # Using KV cache dtype: torch.X
    (KV_ALLOC, _on_kv_alloc),  # [label ]KV Cache is allocated. [dtype: D, ]#tokens: N, K size: .., V size: ..
    (POOL_END, _on_pool_end),  # Memory pool end. avail mem=X GB
    (CAPTURE_END, _on_capture_end),  # Capture <kind> graph end. ... mem usage=M GB ... avail mem=Z GB
    (_SWA, _on_swa),  # Use sliding window memory pool. full_layer_tokens=F, swa_layer_tokens=S
    (_SWA_POOL, _on_swa_pool),  # SWAKVPool mem usage: x GB, swa size: S, full size: F
    (MAX_TOTAL, _on_max_total),  # max_total_num_tokens=N, chunked_prefill_size=C, ..., available_gpu_mem=X GB
    (_MM_REDUCE, _on_mm_reduce),  # Automatically reduce --mem-fraction-static to X because this is a multimodal model
    (_MAMBA, _on_mamba),  # Mamba Cache is allocated. [max_mamba_cache_size: K, ]conv_state size: x GB, ssm_state ..
)


def _boot_facts(lines: Sequence[str]) -> dict[str, Any]:
    boot = _Boot()
    for raw in lines:
        tag, message = split_record(raw)
        for pattern, handler in _LINE_HANDLERS:
            match = pattern.search(message)
            if match:
                handler(boot, tag, message, match)
                break
    return _aggregate(boot)


def _aggregate(boot: _Boot) -> dict[str, Any]:
    """The facts of a boot from its per-rank and per-replica records (module docstring, "Aggregation")."""
    rank_list = []
    for tag in sorted(boot.ranks, key=_rank_sort_key):
        rank = boot.ranks[tag]
        if rank["cuda_graphs"]:
            rank["cuda_graph_gib"] = round(sum(rank["cuda_graphs"].values()), 2)
        for private in ("_loads", "_begins", "_kvs"):
            rank.pop(private)
        rank_list.append(rank)

    replica_list = [boot.replicas[key] for key in sorted(boot.replicas, key=_rank_sort_key)]
    best: dict[str, Any] | None = None
    for replica in replica_list:
        if replica["max_total_num_tokens"] is None:
            continue
        if best is None or replica["max_total_num_tokens"] < best["max_total_num_tokens"]:
            best = replica
    best = best or (replica_list[0] if replica_list else {})

    kv_dtype = boot.kv_dtype_line or next((r["kv_dtype"] for r in rank_list if r["kv_dtype"]), None)
    facts: dict[str, Any] = {
        "format": "current" if boot.fmt_current else "classic",
        "pre_load_free_gib": _min(r["pre_load_free_gib"] for r in rank_list),
        "weights_gib": _max(r["weights_gib"] for r in rank_list),
        "post_load_free_gib": _min(r["post_load_free_gib"] for r in rank_list),
        "kv_tokens": _min(r["kv_tokens"] for r in rank_list),
        "kv_size_gib": _max(r["kv_size_gib"] for r in rank_list),
        "kv_dtype": kv_dtype,
        "memory_pool_end_free_gib": _min(r["memory_pool_end_free_gib"] for r in rank_list),
        "cuda_graph_gib": _max(r["cuda_graph_gib"] for r in rank_list),
        "post_capture_free_gib": _min(r["post_capture_free_gib"] for r in rank_list),
        "draft_weights_gib": _max(r["draft_weights_gib"] for r in rank_list),
        "draft_kv_tokens": _min(r["draft_kv_tokens"] for r in rank_list),
        "draft_kv_size_gib": _max(r["draft_kv_size_gib"] for r in rank_list),
        "swa_tokens": _min(r["swa_tokens"] for r in rank_list),
        "mamba_cache_size": _min(r["mamba_cache_size"] for r in rank_list),
        "mamba_size_gib": _max(r["mamba_size_gib"] for r in rank_list),
        "full_tokens": _min(r["full_tokens"] for r in rank_list),
        "max_total_num_tokens": best.get("max_total_num_tokens"),
        "max_running_requests": best.get("max_running_requests"),
        "context_len": best.get("context_len"),
        "chunked_prefill_size": best.get("chunked_prefill_size"),
        "max_prefill_tokens": best.get("max_prefill_tokens"),
        "available_gpu_mem_gib": _min(r["available_gpu_mem_gib"] for r in replica_list),
        "replicas": replica_list,
        "ready": boot.ready,
        "server_args": boot.server_args,
        "ranks": rank_list,
        "tp_size": len(rank_list),
    }
    facts.update(_fraction(boot))
    return facts


def _fraction(boot: _Boot) -> dict[str, Any]:
    """The --mem-fraction-static the pool was sized with, the one server_args printed, and where the first came from:
    SGLang 0.4.x printed server_args, then multiplied f by 0.9 for a multimodal model and said so in a line of its own."""
    logged = boot.server_args.get("mem_fraction_static") if boot.server_args else None
    logged = logged if isinstance(logged, (int, float)) and not isinstance(logged, bool) else None
    if boot.mm_reduced is not None:
        return {"mem_fraction_static": boot.mm_reduced, "mem_fraction_static_logged": logged,
                "mem_fraction_static_source": "multimodal_reduction"}
    return {"mem_fraction_static": logged, "mem_fraction_static_logged": logged,
            "mem_fraction_static_source": "server_args" if logged is not None else None}


def parse_startup_log(text: Any) -> dict[str, Any]:
    """Parse SGLang startup-log ``text`` and return the facts of its last boot (see the module docstring).

    Keys: ``format`` ('classic'|'current'), ``boots``, ``pre_load_free_gib``, ``weights_gib``,
    ``post_load_free_gib``, ``kv_tokens``, ``kv_size_gib``, ``kv_dtype``, ``memory_pool_end_free_gib``,
    ``cuda_graph_gib``, ``post_capture_free_gib``, ``draft_weights_gib``, ``draft_kv_tokens``,
    ``draft_kv_size_gib``, ``swa_tokens``, ``full_tokens``, ``max_total_num_tokens``, ``max_running_requests``,
    ``context_len``, ``chunked_prefill_size``, ``max_prefill_tokens``, ``available_gpu_mem_gib``, ``replicas``,
    ``ready``, ``failure``, ``server_args``, ``ranks``, ``tp_size``, ``mamba_cache_size``, ``mamba_size_gib``,
    ``mem_fraction_static`` (the value that sized the pool), ``mem_fraction_static_logged`` (server_args'),
    ``mem_fraction_static_source``, ``untrusted`` (boot_trust.findings of the log alone: ranks of one stage that
    report different weights). Values the log does not hold are ``None``.

    Raises ``StartupLogError`` when ``text`` is empty or holds no SGLang record.
    """
    if text is None or not str(text).strip():
        raise StartupLogError("the SGLang startup log is empty: there is no text to parse")
    lines = str(text).splitlines()
    boots = split_boots(lines)
    if not boots:
        sample = next((line.strip() for line in lines if line.strip()), "")[:120]
        raise StartupLogError(
            "no SGLang startup record in the text (%d lines, first: %r): expected lines such as "
            "'server_args=ServerArgs(...)', 'Load weight begin. avail mem=...' or 'KV Cache is allocated.'"
            % (len(lines), sample)
        )
    last = boots[-1]
    facts = _boot_facts(last)
    facts["boots"] = len(boots)
    facts["failure"] = classify_failure(last)
    facts["untrusted"] = untrusted_findings(facts)  # what the log alone shows; callers add the checkpoint's check
    return facts

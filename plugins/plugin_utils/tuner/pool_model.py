# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the formula needs of the model and the boot for the tuner: the KV cell, P and A in the command line's terms,
and the lowest value worth trying."""
from __future__ import annotations

from typing import Any, Iterable

from ansible_collections.llmserve.sglang.plugins.module_utils.capacity import (
    kv_base, kv_capacity_report, kv_cell, kv_search, kv_shape)
from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner.run_settings import TuneError


def model_inputs(config: dict[str, Any] | None, memory_args: dict[str, Any] | None, sglang_version: str | None,
                 environment: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """What the formula needs of the model, from config.json (as data) and the fingerprint's memory args: the KV
    cell per GPU (bytes per token), the page size, the multimodal reservation, and whether SGLang sizes the pool
    after CUDA-graph capture with the unit's ``environment`` (then no formula predicts it: every value is measured).
    None without a config (a Hub id the host has no copy of). A model the formula cannot read fails here, before
    anything restarts."""
    if config is None:
        return None
    args = memory_args or {}
    try:
        shape = kv_shape.model_shape(config, dtype=args.get("dtype") or "auto")
        cell = kv_cell.cell_size_bytes(
            shape, tp_size=args.get("tp_size") or 1, dp_size=args.get("dp_size") or 1,
            enable_dp_attention=bool(args.get("enable_dp_attention")), kv_cache_dtype=args.get("kv_cache_dtype") or "auto",
            sglang_version=sglang_version, speculative_algorithm=args.get("speculative_algorithm"))
        mm_gib = kv_capacity_report.mm_reservation_gib(shape, sglang_version)
        after_capture = kv_capacity_report.post_capture_sizing(shape, sglang_version, environment or {})
    except kv_base.KvModelError as exc:
        raise TuneError("the model cannot be tuned: %s. Nothing was restarted." % exc) from None
    return {"cell_size_bytes": cell, "page_size": args.get("page_size") or 1, "mm_reservation_gib": mm_gib,
            "hybrid_state": shape.linear_state is not None, "post_capture_sizing": after_capture}


def split_pool(config: dict[str, Any] | None, boots: Iterable[Any]) -> bool | None:
    """Whether SGLang splits this model's KV memory between pools (full and sliding-window layers, or a
    linear-attention state pool beside the KV pool), from its startup logs ``boots`` or else its config.json; None
    when neither tells."""
    boots = [boot for boot in boots if boot]
    if any(boot.get(key) is not None for boot in boots for key in ("swa_tokens", "full_tokens", "mamba_cache_size")):
        return True
    if config is not None:
        try:
            shape = kv_shape.model_shape(config)
        except kv_base.KvModelError:
            return None
        return shape.swa_layers > 0 or shape.linear_state is not None
    return False if any(boot.get("max_total_num_tokens") for boot in boots) else None


def effective_memory(boot: dict[str, Any] | None) -> tuple[Any, Any]:
    """(P, A) of a boot in terms of the command line's --mem-fraction-static. SGLang 0.4.x sized a multimodal model's
    pool with s * f (it said so: mem_fraction_static_source 'multimodal_reduction'); A - P * (1 - s * f) is
    A' - P' * (1 - f) with P' = s * P and A' = A - P * (1 - s), so the formula, the floor and the slope keep working
    on the values the tuner writes. (None, None) when the log does not give them or cannot be trusted (another process
    allocated while SGLang loaded: the search re-measures instead of predicting from it)."""
    boot = boot or {}
    p, a = boot.get("pre_load_free_gib"), boot.get("post_load_free_gib")
    if not p or not a or boot.get("untrusted"):
        return None, None
    used, logged = boot.get("mem_fraction_static"), boot.get("mem_fraction_static_logged")
    if boot.get("mem_fraction_static_source") == "multimodal_reduction" and used and logged:
        scale = used / logged
        return p * scale, a - p * (1 - scale)
    return p, a


def lower_bound(boot: dict[str, Any] | None, model: dict[str, Any] | None,
                min_tokens: int | None = None) -> float | None:
    """The formula's lowest viable value from the running server's P and A (and, with the model known, the pool that
    holds ``min_tokens``); None when its startup log does not give P and A, or they cannot be trusted."""
    p, a = effective_memory(boot)
    if not p or not a:
        return None
    model = model or {}
    if min_tokens is not None and model.get("hybrid_state"):
        raise TuneError("kv_tune_min_tokens is not supported for hybrid linear-attention models yet: their state pool "
                        "shares the budget with the KV pool. Unset it; nothing was restarted.")
    return kv_search.lower_bound(p, a, target_tokens=min_tokens if model else None,
                                 cell_size_bytes=model.get("cell_size_bytes"), page_size=model.get("page_size", 1),
                                 mm_reservation_gib=model.get("mm_reservation_gib", 0.0))


# The server args capacity() reads, by their memory_args names.
_POOL_OPTIONS = ("tp_size", "dp_size", "kv_cache_dtype", "page_size", "max_total_tokens", "max_running_requests",
                 "speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
                 "speculative_num_draft_tokens", "chunked_prefill_size", "mamba_ssm_dtype", "mamba_full_memory_ratio",
                 "max_mamba_cache_size")


def pool_residual_gib(config: dict[str, Any] | None, memory_args: dict[str, Any] | None, sglang_version: str | None,
                      environment: dict[str, Any] | None, boot: dict[str, Any] | None) -> float | None:
    """GiB of the budget that the pool of this boot did not get, by SGLang's formula at the boot's own P, A and f:
    (the formula's tokens - the logged tokens) x the formula's pool bytes per token. Whatever the formula leaves out
    (a LoRA buffer, a workspace taken before the pool) is the same at every boot of one configuration, so the figure
    is too, to SGLang's 0.01 GB of rounding, unless memory moved while SGLang measured the free memory again and sized
    the pool. None when it cannot be computed: no config, no P, A, f or pool in the log, a pool at its
    --max-total-tokens, a 0.4.x multimodal reduction, a pool sized after CUDA-graph capture, a model the formula does
    not read."""
    boot, args = boot or {}, memory_args or {}
    p, a = boot.get("pre_load_free_gib"), boot.get("post_load_free_gib")
    f = (boot.get("server_args") or {}).get("mem_fraction_static") or boot.get("mem_fraction_static")
    logged = boot.get("max_total_num_tokens") or boot.get("kv_tokens")
    cap = (boot.get("server_args") or {}).get("max_total_tokens")
    if config is None or not p or not a or not f or not isinstance(logged, int) or logged <= 0 \
            or boot.get("mem_fraction_static_source") == "multimodal_reduction":
        return None
    if isinstance(cap, int) and logged >= cap:
        return None     # the pool is its --max-total-tokens (the pin's, or the operator's): it tells of no budget
    try:
        shape = kv_shape.model_shape(config, dtype=args.get("dtype") or "auto")
        if kv_capacity_report.post_capture_sizing(shape, sglang_version, environment or {}):
            return None
        options = {name: args[name] for name in _POOL_OPTIONS if args.get(name) is not None}
        result = kv_capacity_report.capacity(
            shape, f, p, a, sglang_version=sglang_version, environment=environment or {},
            enable_dp_attention=bool(args.get("enable_dp_attention")),
            disable_radix_cache=bool(args.get("disable_radix_cache")), **options)
    except kv_base.KvModelError:
        return None
    tokens = result["max_total_num_tokens"]
    if not tokens:
        return None
    return (tokens - logged) * result["kv_pool_gib"] / tokens

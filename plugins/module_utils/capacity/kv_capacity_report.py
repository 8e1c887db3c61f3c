# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Everything at once for one server (the kv_capacity module): the KV pool SGLang builds, what f a token target
needs, the multimodal reservation, and the what-ifs (idle headroom, hierarchical cache, the observed log)."""
from __future__ import annotations

from typing import Any, Callable

from ansible_collections.llmserve.sglang.plugins.module_utils import checks
from ansible_collections.llmserve.sglang.plugins.module_utils.capacity.kv_base import GIB, KvModelError
from ansible_collections.llmserve.sglang.plugins.module_utils.capacity.kv_cell import cell_and_plan
from ansible_collections.llmserve.sglang.plugins.module_utils.capacity.kv_defaults import gpu_memory_defaults
from ansible_collections.llmserve.sglang.plugins.module_utils.capacity.kv_pool import (
    F_MAX,
    check_memory,
    lowest_viable_fraction,
    pool_sizes,
    smallest_fraction,
)
from ansible_collections.llmserve.sglang.plugins.module_utils.capacity.kv_state import state_bytes_per_request, state_slots
from ansible_collections.llmserve.sglang.plugins.module_utils.capacity.kv_versions import (
    POST_CAPTURE_SIZING_MODELS,
    V_PAGED_HYBRID_ASSERT,
    V_POST_CAPTURE_MODEL_ON,
    V_POST_CAPTURE_SIZING,
    V_SWA_CAP_NEEDS_CHUNK,
    V_SWA_CAP_ONE_REQUEST,
    V_SWA_MIN_POOL,
    V_SWA_REQUEST_CAP,
    V_VLM_RESERVATION,
    compare_versions,
    kv_era,
    model_class_missing,
    since,
)


def mm_reservation_gib(shape: Any, sglang_version: str | None = None, mm_feature_transport: str | None = None) -> float:
    """GiB a multimodal model reserves out of the KV budget (>= 0.5.18: SGLANG_VLM_CACHE_SIZE_MB = 100, plus
    SGLANG_MM_FEATURE_CACHE_MB = 1024 with the cuda_ipc/cuda_vmm feature transport); env overrides not modelled."""
    if not shape.is_vlm or not since(sglang_version, V_VLM_RESERVATION):
        return 0.0
    mib = 100
    if mm_feature_transport in ("cuda_ipc", "cuda_vmm"):
        mib += 1024
    return mib / 1024


def _observed_tokens(observed: Any) -> int | None:
    if not observed:
        return None
    if not isinstance(observed, dict):
        raise KvModelError("observed startup facts must be a dict, got %s" % type(observed).__name__)
    for key in ("max_total_num_tokens", "kv_tokens"):
        value = observed.get(key)
        if isinstance(value, list):
            value = min((v for v in value if checks.is_integer(v)), default=None)
        if checks.is_integer(value):
            return value
    return None


def _idle_headroom(f: float, p: float, a: float, mm: float, sizes_at: Callable[[float], dict[str, Any]], observed: Any,
                   free_after_start_gib: Any, safety_margin_gib: Any, issues: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"free_after_start_gib": None, "headroom_mem_fraction": None, "headroom_kv_budget_gib": None,
                           "headroom_tokens": None}
    m = free_after_start_gib
    if m is None and isinstance(observed, dict):
        for key in ("post_capture_free_gib", "available_gpu_mem_gib"):
            if checks.is_number(observed.get(key)):
                m = observed[key]
                break
    if m is None:
        return out
    m = checks.number("free_after_start_gib", m, KvModelError, minimum=0)
    safety = checks.number("safety_margin_gib", safety_margin_gib, KvModelError, minimum=0)
    out["free_after_start_gib"] = round(m, 4)
    fh = f + (m - safety) / p
    if not 0 < fh < 1:
        issues.append("the idle headroom gives mem_fraction_static %.4f (f %r + (%.2f - %.2f) / %.2f), outside (0, 1)"
                      % (fh, f, m, safety, p))
        return out
    sizes = sizes_at(fh)
    out["headroom_mem_fraction"] = fh
    # the KV pool's part: a hybrid model's state pool takes its share first
    out["headroom_kv_budget_gib"] = round(a - p * (1 - fh) - mm - sizes.get("mamba_state_gib", 0.0), 4)
    out["headroom_tokens"] = sizes["max_total_num_tokens"]
    return out


def _hicache(tokens: int, cell: Any, page_size: int, ranks: int, hicache_ratio: Any,
             hicache_size_gb: Any) -> dict[str, Any]:
    """HostKVCache (memory_pool_host.py): size = int(device tokens * ratio), or int(size_gb * 1e9 // bytes per token);
    then (size // page + 1) * page. Host bytes per token = the target's per-token KV (no draft)."""
    out: dict[str, Any] = {"hicache_host_tokens": None, "hicache_host_gib_per_rank": None, "hicache_host_gib_total": None}
    if hicache_ratio is None and hicache_size_gb is None:
        return out
    if cell is None:
        raise KvModelError("the hierarchical-cache what-if is not modelled for hybrid sliding-window models")
    if hicache_size_gb is not None and checks.number("hicache_size_gb", hicache_size_gb, KvModelError) > 0:
        size = int(hicache_size_gb * 1e9 // cell)
    else:
        ratio = checks.number("hicache_ratio", hicache_ratio, KvModelError, above=0)
        size = int(tokens * ratio)
    size = (size // page_size + 1) * page_size
    out["hicache_host_tokens"] = size
    out["hicache_host_gib_per_rank"] = round(size * cell / GIB, 4)
    out["hicache_host_gib_total"] = round(size * cell * ranks / GIB, 4)
    return out


# What capacity() reads besides the model, f, P and A: the server arguments, at SGLang's defaults, and the report's
# what-ifs (module docs of kv_capacity). Given by name; a name not here is an error, never ignored.
CAPACITY_OPTIONS = {
    "tp_size": 1, "dp_size": 1, "enable_dp_attention": False, "kv_cache_dtype": "auto", "page_size": 1,
    "sglang_version": None, "max_total_tokens": None, "max_running_requests": None, "swa_full_tokens_ratio": 0.8,
    "dsa_kv_layout": "auto", "mm_feature_transport": None,
    # speculative decoding
    "speculative_algorithm": None, "draft_layers": None, "speculative_num_steps": None,
    "speculative_eagle_topk": None, "speculative_num_draft_tokens": None,
    # the state pool of hybrid linear-attention models
    "mamba_ssm_dtype": None, "mamba_full_memory_ratio": None, "max_mamba_cache_size": None,
    "disable_radix_cache": False,
    # the sliding-window request cap (radix cache off, >= 0.5.14)
    "chunked_prefill_size": None, "disable_overlap_schedule": False, "gpu_memory_mib": None,
    # the server's environment (SGLANG_* variables that change the sizing)
    "environment": None,
    # what-ifs: a pool to reach, the idle headroom, a host-memory cache, a boot to compare with
    "target_tokens": None, "free_after_start_gib": None, "safety_margin_gib": 2.0, "hicache_ratio": None,
    "hicache_size_gb": None, "observed": None,
}


class CapacityOptions(object):
    """capacity()'s options as attributes: CAPACITY_OPTIONS with the given ones over them, checked."""

    # Each of CAPACITY_OPTIONS, set by __init__ (as given: the checks of each are where it is read).
    tp_size: Any
    dp_size: Any
    enable_dp_attention: Any
    kv_cache_dtype: Any
    page_size: int
    sglang_version: str | None
    max_total_tokens: Any
    max_running_requests: Any
    swa_full_tokens_ratio: Any
    dsa_kv_layout: Any
    mm_feature_transport: str | None
    speculative_algorithm: str | None
    draft_layers: Any
    speculative_num_steps: Any
    speculative_eagle_topk: Any
    speculative_num_draft_tokens: Any
    mamba_ssm_dtype: Any
    mamba_full_memory_ratio: Any
    max_mamba_cache_size: Any
    disable_radix_cache: Any
    chunked_prefill_size: Any
    disable_overlap_schedule: Any
    gpu_memory_mib: Any
    environment: Any
    target_tokens: Any
    free_after_start_gib: Any
    safety_margin_gib: Any
    hicache_ratio: Any
    hicache_size_gb: Any
    observed: Any

    def __init__(self, options: dict[str, Any]) -> None:
        unknown = sorted(set(options) - set(CAPACITY_OPTIONS))
        if unknown:
            raise KvModelError("capacity() has no option %s" % ", ".join(unknown))
        for name, default in CAPACITY_OPTIONS.items():
            setattr(self, name, options.get(name, default))
        checks.integer("page_size", self.page_size, KvModelError, minimum=1)
        for name in ("max_total_tokens", "target_tokens", "max_running_requests"):
            checks.integer(name, getattr(self, name), KvModelError, minimum=1, allow_none=True)


def capacity(shape: Any, mem_fraction_static: Any, pre_load_free_gib: Any, post_load_free_gib: Any,
             **options: Any) -> dict[str, Any]:
    """The KV pool SGLang builds for one model, server arguments, P, A and f; what f a target needs; and, with
    observed startup facts (the sglang_startup_facts module's result), how far the prediction is from the log.

    `shape` is a ModelShape or a config.json dict. Returns a dict (GiB rounded to 4 decimals):
    cell_size_bytes, kv_budget_gib (A - P*(1-f)), reserved_gib (P*(1-f)), mm_reservation_gib,
    max_total_num_tokens, swa_max_total_num_tokens (hybrid sliding-window models, else None), eagle_headroom_tokens
    (classic EAGLE), kv_pool_gib, kv_pools (independent pools: dp_size), total_kv_tokens, min_mem_fraction_static
    (kv_pool.lowest_viable_fraction with mm_reservation_gib, as kv_search.lower_bound computes it),
    mem_fraction_for_target (None without target_tokens or when out of reach), sglang_era, attention,
    kv_cache_dtype, issues (why SGLang would not start, why the target is out of reach); and with observed facts
    observed_tokens, predicted_tokens, prediction_error_pct ((predicted - observed) / observed * 100).

    Hybrid linear-attention models (kv_state): the state pool comes out of the budget first; state_bytes_per_request,
    mamba_cache_size (its request slots K) and mamba_state_gib (what it takes) are added (None for other models), and
    the KV pool is sized from what is left, with only the full-attention layers in the cell.

    Idle headroom (DESIGN's first prediction step): with m = free_after_start_gib (else the observed facts'
    post_capture_free_gib, else available_gpu_mem_gib), headroom_mem_fraction = f + (m - safety_margin_gib) / P,
    with headroom_kv_budget_gib and headroom_tokens at that f; None without m (an upper estimate: activations
    under load need part of m). HiCache what-if (hicache_ratio, or hicache_size_gb in 1e9 bytes as SGLang reads
    --hicache-size): hicache_host_tokens = int(tokens * ratio) (or size // bytes per token) rounded up to a page
    plus one, hicache_host_gib_per_rank and hicache_host_gib_total (all ranks of the host); it never enlarges the
    GPU pool.
    """
    p, a, _none = check_memory(pre_load_free_gib, post_load_free_gib)
    f = checks.fraction("mem_fraction_static", mem_fraction_static, KvModelError)   # required here
    o = CapacityOptions(options)
    model = _PoolModel(shape, p, a, o)
    shape, plan, cell, mm, swa, per_request = model.shape, model.plan, model.cell, model.mm, model.swa, model.per_request
    issues = [why for why in (_model_class_issue(shape, o.sglang_version),) if why]
    budget = a - p * (1 - f)
    lowest = lowest_viable_fraction(p, a, mm_reservation_gib=mm)
    sizes = model.sizes_at(f)
    tokens = sizes["max_total_num_tokens"]
    issues.extend(_start_issues(o, f, sizes, swa, budget - mm, lowest))
    pools = o.dp_size if checks.is_integer(o.dp_size) else 1
    result = {
        "sglang_era": kv_era(o.sglang_version),
        "attention": shape.attention,
        "kv_cache_dtype": plan["kv_cache_dtype"],
        "cell_size_bytes": cell if isinstance(cell, int) else round(cell, 3),
        "kv_budget_gib": round(budget, 4),
        "reserved_gib": round(p * (1 - f), 4),
        "mm_reservation_gib": round(mm, 4),
        "max_total_num_tokens": tokens,
        "swa_max_total_num_tokens": sizes["swa_max_total_num_tokens"],
        "eagle_headroom_tokens": sizes["eagle_headroom_tokens"],
        "kv_pool_gib": round(_pool_bytes(tokens, cell, swa, sizes) / GIB, 4),
        "kv_pools": pools,
        "total_kv_tokens": tokens * pools,
        "min_mem_fraction_static": round(lowest, 6),
        "mem_fraction_for_target": _for_target(model, o, lowest, issues),
        "issues": issues,
    }
    result["mem_fraction_static"] = f
    result["state_bytes_per_request"] = per_request
    result["mamba_cache_size"] = sizes.get("mamba_cache_size")
    result["mamba_state_gib"] = round(sizes["mamba_state_gib"], 4) if per_request is not None else None
    if per_request is not None and sizes["mamba_cache_size"] <= 0:
        issues.append("the budget at mem_fraction_static=%r leaves no slot for the hybrid model's state pool "
                      "(%.1f MiB per request): SGLang refuses to start" % (f, per_request / 2 ** 20))
    result.update(_idle_headroom(f, p, a, mm, model.sizes_at, o.observed, o.free_after_start_gib, o.safety_margin_gib,
                                 issues))
    ranks = (o.tp_size if o.enable_dp_attention else o.tp_size * pools)
    result.update(_hicache(tokens, plan["target_cell"], o.page_size, ranks, o.hicache_ratio, o.hicache_size_gb))
    if o.observed:
        result.update(_against_observed(o.observed, tokens))
    return result


def _start_issues(o: CapacityOptions, f: float, sizes: dict[str, Any], swa: dict[str, Any] | None,
                  budget_gib: float, lowest: float) -> list[str]:
    """Why SGLang would not start with the pool ``sizes`` at ``f`` (``budget_gib`` the KV budget less the
    multimodal reservation, ``lowest`` the lowest viable f): one sentence, or none."""
    tokens = sizes["max_total_num_tokens"]
    if sizes.get("refused"):
        return ["SGLang %s does not start with this at mem_fraction_static=%r: %s"
                % (o.sglang_version or "(newest)", f, sizes["refused"])]
    if tokens == 0 and swa is not None and swa.get("request_cap") is not None and budget_gib > 0:
        return ["SGLang %s does not start with this: the sliding-window pool's request cap (%d tokens for "
                "max_running_requests %d) leaves no room for the full KV pool at mem_fraction_static=%r"
                % (o.sglang_version or "(newest)", swa["request_cap"], o.max_running_requests, f)]
    if tokens == 0:
        return ["the KV budget at mem_fraction_static=%r is %.3f GiB: SGLang refuses to start (raise "
                "mem_fraction_static above %.4f)" % (f, budget_gib, lowest)]
    return []


def _pool_bytes(tokens: int, cell: Any, swa: dict[str, Any] | None, sizes: dict[str, Any]) -> float:
    """The bytes of the KV pool: ``tokens`` cells, or a hybrid sliding-window model's full and window pools."""
    if swa is None:
        return tokens * cell
    full_layers = swa["full_layers"] + swa["draft_layers"]
    swa_tokens = sizes["swa_max_total_num_tokens"] or 0
    return (tokens * swa["full_bytes"] * full_layers + swa_tokens * swa["swa_bytes"] * swa["swa_layers"]
            if swa["full_layers"] else swa_tokens * swa["swa_bytes"] * swa["swa_layers"])


def _against_observed(observed: Any, tokens: int) -> dict[str, Any]:
    """The prediction of ``tokens`` against the observed startup facts: observed_tokens, predicted_tokens and
    prediction_error_pct ((predicted - observed) / observed * 100, None without an observed pool)."""
    seen = _observed_tokens(observed)
    return {"observed_tokens": seen, "predicted_tokens": tokens,
            "prediction_error_pct": (round((tokens - seen) / seen * 100, 4) if seen else None)}


class _PoolModel(object):
    """The pools SGLang sizes for one model and its options at any f, from P and A: the KV cell and plan
    (kv_cell), the multimodal reservation, and for a hybrid linear-attention model its state pool, carved first."""

    def __init__(self, shape: Any, p: float, a: float, o: CapacityOptions) -> None:
        self.p, self.a, self.o = p, a, o
        self.cell, self.plan = cell_and_plan(shape, o.tp_size, o.dp_size, o.enable_dp_attention, o.kv_cache_dtype,
                                             o.sglang_version, o.speculative_algorithm, o.draft_layers,
                                             o.swa_full_tokens_ratio, o.dsa_kv_layout)
        self.shape = shape = self.plan["shape"]
        self.mm = mm_reservation_gib(shape, o.sglang_version, o.mm_feature_transport)
        self.swa = self.plan["swa"]
        _refuse_where_sglang_does(shape, self.swa, o)
        cap = swa_request_cap(shape, self.swa, o)
        if cap is not None:
            self.swa = dict(self.swa, request_cap=cap)
        self.pool_args = dict(
            page_size=o.page_size, max_total_tokens=o.max_total_tokens, sglang_version=o.sglang_version,
            speculative_algorithm=self.plan["speculative_algorithm"], max_running_requests=o.max_running_requests,
            speculative_num_steps=o.speculative_num_steps, speculative_eagle_topk=o.speculative_eagle_topk,
            speculative_num_draft_tokens=o.speculative_num_draft_tokens, architecture=shape.architecture,
            swa=self.swa)
        self.per_request = None
        if shape.linear_state is not None:
            if self.plan["speculative_algorithm"]:
                raise KvModelError("speculative decoding with a hybrid linear-attention model is not modelled: SGLang "
                                   "reserves state for every draft token")
            self.per_request = state_bytes_per_request(shape.linear_state, self.plan["attn_tp"], o.sglang_version,
                                                       o.mamba_ssm_dtype)
        self.state_args = dict(
            sglang_version=o.sglang_version, ratio=o.mamba_full_memory_ratio,
            max_mamba_cache_size=o.max_mamba_cache_size, disable_radix_cache=o.disable_radix_cache,
            max_running_requests=o.max_running_requests, dp_size=o.dp_size if o.enable_dp_attention else 1,
            radix_forced_off=shape.linear_state is not None and shape.linear_state.kind == "mamba2")

    def sizes_at(self, frac: float) -> dict[str, Any]:
        rest = self.a - self.p * (1 - frac) - self.mm
        if self.per_request is None:
            return self._admits(pool_sizes(rest, self.cell, **self.pool_args))
        slots, state_gib = state_slots(rest, self.per_request, **self.state_args)
        sizes = pool_sizes(rest - state_gib if slots > 0 else 0.0, self.cell, **self.pool_args)
        sizes.update(mamba_cache_size=slots, mamba_state_gib=state_gib)
        return sizes

    def _admits(self, sizes: dict[str, Any]) -> dict[str, Any]:
        """From 0.5.16 HybridSWAPoolConfigurator (validate_swa_pool_size from 0.5.20) refuses to start when the
        ratio-split SWA pool holds no more than window + page tokens (one request's prefill floor): no pool at all."""
        swa, window = self.swa, gpt_oss_window(self.shape)
        if swa is None or not swa["full_layers"] or swa.get("request_cap") is not None or window is None \
                or not since(self.o.sglang_version, V_SWA_MIN_POOL) or not sizes["max_total_num_tokens"]:
            return sizes
        if window + self.o.page_size < sizes["swa_max_total_num_tokens"]:
            return sizes
        why = ("the sliding-window pool (%d tokens) cannot hold one request: the prefill floor is the window (%d) + "
               "page_size (%d)" % (sizes["swa_max_total_num_tokens"], window, self.o.page_size))
        return dict(sizes, max_total_num_tokens=0, swa_max_total_num_tokens=0, refused=why)


_ENV_TRUE, _ENV_FALSE = ("true", "1", "yes", "y"), ("false", "0", "no", "n")   # environ.py EnvBool


def post_capture_sizing(shape: Any, sglang_version: str | None, environment: Any) -> bool:
    """Whether SGLang ``sglang_version`` sizes this model's pool after CUDA-graph capture, with the server's
    ``environment`` (server_args.SIZING_VARIABLES it sets): then A - P x (1 - f) is not what sizes it. KvModelError for a value
    SGLang rejects."""
    return _post_capture_sizing(shape, CapacityOptions({"sglang_version": sglang_version, "environment": environment}))


def _post_capture_sizing(shape: Any, o: CapacityOptions) -> bool:
    """True when SGLang sizes the KV pool after CUDA-graph capture (SGLANG_ENABLE_POST_CAPTURE_KV_SIZING, from
    0.5.16; on by default for Muse Spark in 0.5.23); it skips MLA models. KvModelError for a value SGLang rejects."""
    if not since(o.sglang_version, V_POST_CAPTURE_SIZING):
        return False
    env = o.environment or {}
    if not isinstance(env, dict):
        raise KvModelError("environment must be a dict of the server's environment variables, got %r" % (env,))
    name = "SGLANG_ENABLE_POST_CAPTURE_KV_SIZING"
    raw = env.get(name)
    if raw is None:
        on = shape.architecture in POST_CAPTURE_SIZING_MODELS and since(o.sglang_version, V_POST_CAPTURE_MODEL_ON)
    elif str(raw).lower() in _ENV_TRUE + _ENV_FALSE:
        on = str(raw).lower() in _ENV_TRUE
    else:
        raise KvModelError("SGLang %s does not start with this: %s=%r is not a valid boolean value"
                           % (o.sglang_version or "(newest)", name, raw))
    return on and shape.attention == "mha"


def _refuse_where_sglang_does(shape: Any, swa: dict[str, Any] | None, o: CapacityOptions) -> None:
    """KvModelError for a configuration the stated SGLang release does not start with: no token figure for it; and
    for one whose pool the formula does not size (post-capture sizing)."""
    if _post_capture_sizing(shape, o):
        raise KvModelError(
            "SGLang %s sizes the KV pool after CUDA-graph capture here (SGLANG_ENABLE_POST_CAPTURE_KV_SIZING, a "
            "model without MLA; unless CUDA graphs or prefill capture are off): the pool is what is free after "
            "capture, not A - P x (1 - f), so there is no prediction; measure it (the tuner does)"
            % (o.sglang_version or "(newest)"))
    version = o.sglang_version
    if version is None:
        return
    why = None
    if swa is not None and o.page_size > 1 and kv_era(version) == "classic" \
            and compare_versions(version, V_PAGED_HYBRID_ASSERT) >= 0:
        why = ("a hybrid sliding-window model with page_size %d (its paged allocator asserts `not self.is_hybrid`; "
               "use page_size 1, or SGLang 0.5.8 or later)" % o.page_size)
    if why:
        raise KvModelError("SGLang %s does not start with this: %s" % (version, why))


def gpt_oss_window(shape: Any) -> int | None:
    """The attention window SGLang gives a gpt-oss model (get_attention_sliding_window_size: sliding_window - 1);
    None for other models, whose window rules are not modelled."""
    if shape.architecture != "GptOssForCausalLM" or not checks.is_integer(shape.sliding_window):
        return None
    return shape.sliding_window - 1


SWA_EVICTION_INTERVAL = 128   # SGLANG_SWA_EVICTION_INTERVAL's default (environ.py, 0.5.14 - 0.5.23)


def swa_request_cap(shape: Any, swa: dict[str, Any] | None, o: CapacityOptions) -> int | None:
    """The SWA pool's tokens when SGLang >= 0.5.14 sizes it from --max-running-requests (the radix cache off, a
    chunked prefill; SWAChunkCapPoolConfigurator, in 0.5.22 SWARequestCapPoolConfigurator), else None:
    (window + interval + 2 * page) * requests + chunks in flight * chunked_prefill_size + page."""
    if swa is None or not swa["full_layers"] or not since(o.sglang_version, V_SWA_REQUEST_CAP) \
            or o.max_running_requests is None or not o.disable_radix_cache:
        return None
    chunk = o.chunked_prefill_size
    if chunk is None and o.gpu_memory_mib is not None:
        # Not given: SGLang's own pick from the GPU's memory (_handle_gpu_memory_settings), divided among the DP
        # ranks with DP attention (_handle_data_parallelism), as it does before it sizes the pool.
        chunk = gpu_memory_defaults(o.gpu_memory_mib, o.tp_size, o.sglang_version)[0]
        if o.enable_dp_attention and o.dp_size > 1:
            chunk //= o.dp_size
    if chunk is None:
        raise KvModelError("give chunked_prefill_size or the GPU's memory: with disable_radix_cache and "
                           "max_running_requests, SGLang %s sizes the sliding-window pool from it, and picks it "
                           "from the GPU's memory when not given (the startup log's server_args say which)"
                           % (o.sglang_version or "(newest)"))
    chunk = checks.integer("chunked_prefill_size", chunk, KvModelError)
    if chunk <= 0 and since(o.sglang_version, V_SWA_CAP_NEEDS_CHUNK):
        return None   # no chunked prefill: the whole prompt lands in the SWA pool, the ratio split applies
    if o.speculative_algorithm:
        raise KvModelError("speculative decoding with the sliding-window request cap (disable_radix_cache and "
                           "max_running_requests) is not modelled: the draft's tokens change the cap")
    window = gpt_oss_window(shape)
    if window is None:
        raise KvModelError("the sliding-window request cap (disable_radix_cache and max_running_requests) is "
                           "modelled for gpt-oss only (its window is config.json's sliding_window - 1), not %s"
                           % shape.architecture)
    dp = o.dp_size if o.enable_dp_attention else 1
    requests = o.max_running_requests // dp
    if since(o.sglang_version, V_SWA_CAP_ONE_REQUEST):
        requests = max(1, requests)
    per_request = window + SWA_EVICTION_INTERVAL + o.page_size + o.page_size   # trailing tokens + one decode page
    return per_request * requests + (1 if o.disable_overlap_schedule else 2) * chunk + o.page_size


def _model_class_issue(shape: Any, sglang_version: str | None) -> str | None:
    absent = model_class_missing(shape.architecture, sglang_version)
    if absent is None:
        return None
    return ("SGLang %s has no model class %s (absent up to %s in the released code): it cannot load this model, "
            "and the figures are what a release that has it would size with this release's arithmetic"
            % (sglang_version, shape.architecture, absent))


def _for_target(model: _PoolModel, o: CapacityOptions, lowest: float, issues: list[str]) -> float | None:
    """The smallest f whose whole-model pool (speculative headroom, hybrid SWA, the cap) holds target_tokens, above
    the same lowest f; None without a target or out of reach (said in ``issues``)."""
    if o.target_tokens is None:
        return None

    def tokens_at(frac: float) -> int:
        return model.sizes_at(frac)["max_total_num_tokens"]
    for_target = smallest_fraction(tokens_at, o.target_tokens, lowest, F_MAX)
    if for_target is None:
        reach = tokens_at(F_MAX)
        why = ("max_total_tokens=%d caps the pool" % o.max_total_tokens
               if o.max_total_tokens is not None and o.max_total_tokens < o.target_tokens
               else "even mem_fraction_static -> 1 gives %d tokens" % reach)
        issues.append("target_tokens %d is out of reach: %s" % (o.target_tokens, why))
    return for_target

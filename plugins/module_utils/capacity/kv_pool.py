# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The KV pool: the budget, the tokens it holds, and the inverse (which --mem-fraction-static gives how many tokens).

P = free GPU memory before the weights load (MIN over ranks), A = free memory when the KV pool is sized (MIN over
ranks), f = --mem-fraction-static. The pool gets the budget ``A - P * (1 - f)`` GiB; SGLang divides it by the cell
(kv_cell), caps it at --max-total-tokens and rounds it down to a page. Classic SGLang adds the EAGLE headroom tokens
outside the budget. A budget <= 0 means SGLang refuses to start; ``lowest_viable_fraction`` is the f above that
(and above what a token target needs), the one lower bound of the capacity report and of the tuner's search.
"""
from __future__ import annotations

import math
from typing import Any, Callable, cast

from ansible_collections.llmserve.sglang.plugins.module_utils import checks
from ansible_collections.llmserve.sglang.plugins.module_utils.capacity.kv_base import GIB, KvModelError
from ansible_collections.llmserve.sglang.plugins.module_utils.capacity.kv_cell import EAGLE_FAMILY, check_speculative
from ansible_collections.llmserve.sglang.plugins.module_utils.capacity.kv_versions import (
    V_SWA_ALIGNED_FIRST,
    V_SWA_CONFIGURATOR,
    kv_era,
    release_of,
)


def check_memory(pre_load_free_gib: float, post_load_free_gib: float,
                 mem_fraction_static: float | None = None) -> tuple[float, float, float | None]:
    """Validate P, A (GiB) and, when given, f. Returns them as floats; raises KvModelError with the reason."""
    p = checks.number("pre_load_free_gib", pre_load_free_gib, KvModelError, above=0)
    a = checks.number("post_load_free_gib", post_load_free_gib, KvModelError)
    if a <= 0:
        raise KvModelError("post_load_free_gib must be > 0, got %r (the weights filled the GPU)"
                           % (post_load_free_gib,))
    if a > p:
        raise KvModelError(
            "post_load_free_gib (%r) is larger than pre_load_free_gib (%r): free memory after the weights load "
            "cannot exceed free memory before it; were the two swapped, or taken on different GPUs?"
            % (post_load_free_gib, pre_load_free_gib))
    if mem_fraction_static is None:
        return p, a, None
    f = checks.fraction("mem_fraction_static", mem_fraction_static, KvModelError)
    return p, a, f


def kv_budget_gib(pre_load_free_gib: float, post_load_free_gib: float, mem_fraction_static: float) -> float:
    """A - P * (1 - f): the GiB the KV pool gets (negative: SGLang refuses to start)."""
    p, a, f = check_memory(pre_load_free_gib, post_load_free_gib, mem_fraction_static)
    return a - p * (1 - cast(float, f))   # given, so checked and returned


def reserved_gib(pre_load_free_gib: float, mem_fraction_static: float) -> float:
    """P * (1 - f): what is left for CUDA graphs, activations, (mixin: draft) and allocator slack."""
    p = checks.number("pre_load_free_gib", pre_load_free_gib, KvModelError, above=0)
    f = checks.fraction("mem_fraction_static", mem_fraction_static, KvModelError)
    return p * (1 - f)


def min_mem_fraction_static(pre_load_free_gib: float, post_load_free_gib: float) -> float:
    """1 - A / P: the f at which the budget is 0 (SGLang >= 0.5.14 prints it as 'minimum viable');
    lowest_viable_fraction without a multimodal reservation or a target."""
    return lowest_viable_fraction(pre_load_free_gib, post_load_free_gib)


def speculative_params(architecture: str | None = None, speculative_algorithm: str | None = "EAGLE",
                       speculative_num_steps: int | None = None, speculative_eagle_topk: int | None = None,
                       speculative_num_draft_tokens: int | None = None) -> tuple[int, int, int]:
    """(steps, topk, draft_tokens) as server_args resolves them: auto_choose_speculative_params when steps is unset
    (STANDALONE and DeepSeek/gpt-oss/Bailing: 3, 1, 4; others 5, 4, 8), and draft_tokens = steps + 1 when topk == 1."""
    steps, topk, draft = speculative_num_steps, speculative_eagle_topk, speculative_num_draft_tokens
    if steps is None:
        if (speculative_algorithm or "").upper() == "STANDALONE" or architecture in (
                "DeepseekV32ForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV2ForCausalLM", "GptOssForCausalLM",
                "BailingMoeForCausalLM", "BailingMoeV2ForCausalLM"):
            auto = (3, 1, 4)
        else:
            auto = (5, 4, 8)
        steps = auto[0]
        topk = auto[1] if topk is None else topk
        draft = auto[2] if draft is None else draft
    checks.integer("speculative_num_steps", steps, KvModelError, minimum=1)
    topk = checks.integer("speculative_eagle_topk", 1 if topk is None else topk, KvModelError, minimum=1)
    draft = checks.integer("speculative_num_draft_tokens", steps + 1 if draft is None else draft, KvModelError,
                           minimum=1)
    if topk == 1 and draft != steps + 1:
        draft = steps + 1
    return steps, topk, draft


def eagle_headroom_tokens(max_running_requests: int | None = None, architecture: str | None = None,
                          speculative_algorithm: str | None = "EAGLE", speculative_num_steps: int | None = None,
                          speculative_eagle_topk: int | None = None,
                          speculative_num_draft_tokens: int | None = None) -> int:
    """Classic (< 0.5.7) init_memory_pool: R*steps*topk + R*draft_tokens + 100 tokens added to the profiled count,
    outside the budget. R = --max-running-requests, which speculative decoding defaults to 48."""
    r = checks.integer("max_running_requests", 48 if max_running_requests is None else max_running_requests,
                       KvModelError, minimum=1)
    steps, topk, draft = speculative_params(architecture, speculative_algorithm, speculative_num_steps,
                                            speculative_eagle_topk, speculative_num_draft_tokens)
    return r * steps * topk + r * draft + 100


def _page_floor(tokens: int, page_size: int) -> int:
    return tokens // page_size * page_size


def pool_sizes(budget_gib: float, cell: float, page_size: int = 1, max_total_tokens: int | None = None,
               sglang_version: str | None = None, speculative_algorithm: str | None = None,
               max_running_requests: int | None = None, speculative_num_steps: int | None = None,
               speculative_eagle_topk: int | None = None, speculative_num_draft_tokens: int | None = None,
               architecture: str | None = None, swa: Any = None) -> dict[str, Any]:
    """max_total_num_tokens (full-attention tokens for hybrid SWA), swa tokens and classic headroom."""
    checks.integer("page_size", page_size, KvModelError, minimum=1)
    checks.integer("max_total_tokens", max_total_tokens, KvModelError, minimum=1, allow_none=True)
    budget = checks.number("budget_gib", budget_gib, KvModelError)
    if not (checks.is_number(cell) and cell > 0):
        raise KvModelError("cell_size_bytes must be a positive number, got %r" % (cell,))
    era = kv_era(sglang_version)
    alg = check_speculative(speculative_algorithm)
    headroom = 0
    out: dict[str, Any] = {"max_total_num_tokens": 0, "swa_max_total_num_tokens": None, "eagle_headroom_tokens": 0}
    if era == "classic":
        tokens = int(budget * GIB // cell)   # profile_max_num_token: int(rest * (1 << 30) // cell_size)
        if alg in EAGLE_FAMILY:
            headroom = eagle_headroom_tokens(max_running_requests, architecture, alg, speculative_num_steps,
                                             speculative_eagle_topk, speculative_num_draft_tokens)
            tokens += headroom
        out["eagle_headroom_tokens"] = headroom
    else:
        if budget <= 0:
            return out
        available = int(budget * GIB)
        tokens = int(available // cell)
    hybrid = swa is not None
    if not hybrid or era == "classic" or release_of(sglang_version) < V_SWA_CONFIGURATOR:
        if max_total_tokens is not None:
            tokens = min(tokens, max_total_tokens)
        tokens = _page_floor(tokens, page_size)
        if hybrid:
            nf, ns, r = swa["full_layers"], swa["swa_layers"], swa["ratio"]
            if era == "classic":    # set_num_token_hybrid: per-layer token count split by the ratio
                full = int(tokens * swa["layers"] / (r * ns + nf))
            else:                   # set_num_tokens_hybrid_swa: memory-based split
                F, S = swa["full_bytes"], swa["swa_bytes"]
                full = int(tokens * (F * nf + S * ns) / (F * nf + r * S * ns)) if nf else tokens
            if nf == 0:
                out["swa_max_total_num_tokens"] = _page_floor(tokens, page_size)
                tokens = out["swa_max_total_num_tokens"]
            else:
                tokens = _page_floor(full, page_size)
                # set_num_tokens_hybrid_swa (< 0.5.10) takes the SWA count from the unaligned full count
                unaligned = era == "mixin" and release_of(sglang_version) < V_SWA_ALIGNED_FIRST
                out["swa_max_total_num_tokens"] = _page_floor(int((full if unaligned else tokens) * r), page_size)
    elif swa.get("request_cap") is not None:
        # SWAChunkCap/SWARequestCapPoolConfigurator: the SWA pool is the request cap, the full pool gets the rest
        swa_tokens = -(-swa["request_cap"] // page_size) * page_size
        full_cell = swa["full_bytes"] * (swa["full_layers"] + swa["draft_layers"])
        tokens = _page_floor(int((available - swa_tokens * swa["swa_bytes"] * swa["swa_layers"]) // full_cell),
                             page_size)
        if max_total_tokens is not None and tokens > max_total_tokens:   # calculate_pool_sizes_from_max_tokens
            tokens, swa_tokens = _page_floor(max_total_tokens, page_size), min(swa_tokens, max_total_tokens)
        out["swa_max_total_num_tokens"] = swa_tokens
    else:   # HybridSWAPoolConfigurator: tokens are full tokens already; the cap re-solves from the capped count
        tokens = _page_floor(tokens, page_size)
        if max_total_tokens is not None:
            tokens = _page_floor(min(tokens, max_total_tokens), page_size)
        if swa["full_layers"] == 0:
            out["swa_max_total_num_tokens"] = tokens
        else:
            out["swa_max_total_num_tokens"] = _page_floor(int(tokens * swa["ratio"]), page_size)
    out["max_total_num_tokens"] = max(0, tokens)
    if out["max_total_num_tokens"] == 0 and out["swa_max_total_num_tokens"] is not None:
        out["swa_max_total_num_tokens"] = 0
    return out


def max_total_num_tokens(budget_gib: float, cell_size_bytes: float, *, page_size: int = 1,
                         max_total_tokens: int | None = None, sglang_version: str | None = None,
                         speculative_algorithm: str | None = None, max_running_requests: int | None = None,
                         speculative_num_steps: int | None = None, speculative_eagle_topk: int | None = None,
                         speculative_num_draft_tokens: int | None = None, architecture: str | None = None) -> int:
    """Tokens the pool gets for a budget (GiB) and a cell (bytes), as SGLang logs max_total_num_tokens.

    int(budget * 2**30) // cell (classic: int(budget * 2**30 // cell)); classic + EAGLE family: + the headroom
    (eagle_headroom_tokens) outside the budget; then min(., max_total_tokens) (the cap can only shrink the pool),
    then rounded down to a multiple of page_size. A budget <= 0 gives 0 (SGLang refuses to start: init_oom), except
    that classic SGLang adds its EAGLE headroom even to a negative count. Hybrid sliding-window models: use capacity().
    """
    return pool_sizes(budget_gib, cell_size_bytes, page_size, max_total_tokens, sglang_version, speculative_algorithm,
                      max_running_requests, speculative_num_steps, speculative_eagle_topk,
                      speculative_num_draft_tokens, architecture)["max_total_num_tokens"]


def smallest_fraction(tokens_at: Callable[[float], float], target: float, lo: float, hi: float) -> float | None:
    """Smallest float f in (lo, hi] with tokens_at(f) >= target, tokens_at non-decreasing; None if tokens_at(hi)
    falls short."""
    if tokens_at(hi) < target:
        return None
    if lo > 0 and tokens_at(lo) >= target:
        return lo
    for _step in range(200):
        mid = (lo + hi) / 2
        if mid <= lo or mid >= hi:
            break
        if tokens_at(mid) >= target:
            hi = mid
        else:
            lo = mid
    return hi


F_MAX = 1 - 2 ** -40   # the largest f considered: SGLang needs f < 1


def _round_up(f: float, resolution: float | None, tokens_at: Callable[[float], int], target: int) -> float:
    if resolution is None:
        return f
    res = checks.fraction("resolution", resolution, KvModelError)
    digits = max(0, -int(math.floor(math.log10(res))) + 2)
    g = round(math.ceil(f / res - 1e-9) * res, digits)
    while tokens_at(g) < target:
        g = round(g + res, digits)
    if g >= 1:
        raise KvModelError("no mem_fraction_static below 1 on a %r grid reaches %d tokens" % (resolution, target))
    return g


def _fraction_for_target(p: float, a: float, mm: float, target: int, cell_size_bytes: float,
                         page_size: int) -> tuple[float, Callable[[float], int]]:
    """(f, tokens_at): the smallest f whose pool, with the budget A - P * (1 - f) - mm, holds `target` tokens."""
    def tokens_at(f: float) -> int:
        return max_total_num_tokens(a - p * (1 - f) - mm, cell_size_bytes, page_size=page_size)

    f = smallest_fraction(tokens_at, target, max(0.0, 1 - (a - mm) / p), F_MAX)
    if f is None:
        reserved = " - %.2f GiB multimodal reservation" % mm if mm else ""
        raise KvModelError("target_tokens %d is out of reach: even mem_fraction_static -> 1 gives %d tokens "
                           "(A = %.2f GiB%s / %s bytes per token)"
                           % (target, tokens_at(F_MAX), a, reserved, cell_size_bytes))
    return f, tokens_at


def lowest_viable_fraction(pre_load_free_gib: float, post_load_free_gib: float, *, mm_reservation_gib: float = 0.0,
                           target_tokens: int | None = None, cell_size_bytes: Any = None,
                           page_size: int = 1) -> float:
    """The lowest --mem-fraction-static worth starting SGLang with, the one lower bound of the capacity report
    (capacity()'s min_mem_fraction_static) and of the tuner's search (kv_search.lower_bound).

    Without a target: 1 - (A - mm) / P, the f at which the KV budget less the multimodal reservation (mm, GiB:
    mm_reservation_gib()) is 0; below it SGLang refuses to start (>= 0.5.14 prints it as 'minimum viable').
    With target_tokens and cell_size_bytes: the smallest f whose pool holds that many tokens (page_size pages;
    mixin/current arithmetic as mem_fraction_for_tokens, exact to the token). Raises KvModelError when the target is
    out of reach.
    """
    p, a = check_memory(pre_load_free_gib, post_load_free_gib)[:2]
    mm = checks.number("mm_reservation_gib", mm_reservation_gib, KvModelError, minimum=0)
    if target_tokens is None:
        return max(0.0, 1 - (a - mm) / p)
    target = checks.integer("target_tokens", target_tokens, KvModelError, minimum=1)
    checks.integer("page_size", page_size, KvModelError, minimum=1)
    return _fraction_for_target(p, a, mm, target, cell_size_bytes, page_size)[0]


def mem_fraction_for_tokens(target_tokens: int, cell_size_bytes: float, pre_load_free_gib: float,
                            post_load_free_gib: float, *, page_size: int = 1,
                            resolution: float | None = None) -> float:
    """The smallest --mem-fraction-static giving at least target_tokens (mixin/current arithmetic, no speculative
    headroom: for those, and for hybrid sliding-window models, capacity() solves through the whole model).

    Closed form: with T = target rounded up to page_size, f = 1 - (A - T * cell / 2**30) / P. The value returned is
    the smallest float f for which max_total_num_tokens(kv_budget_gib(P, A, f), cell) >= target_tokens, found by
    bisection over SGLang's own float arithmetic, so it is exact to the token; pass it to SGLang unrounded (its repr
    round-trips) or round it UP. With `resolution` (e.g. 0.001) it is rounded up to that grid instead.
    Raises KvModelError when even f -> 1 does not give target_tokens.
    """
    p, a = check_memory(pre_load_free_gib, post_load_free_gib)[:2]
    target = checks.integer("target_tokens", target_tokens, KvModelError, minimum=1)
    checks.integer("page_size", page_size, KvModelError, minimum=1)
    f, tokens_at = _fraction_for_target(p, a, 0.0, target, cell_size_bytes, page_size)
    return _round_up(f, resolution, tokens_at, target)

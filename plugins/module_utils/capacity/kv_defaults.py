# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""SGLang's own --mem-fraction-static: what it picks when the flag is omitted, and the GPU-memory tiers behind it
(chunked_prefill_size, cuda_graph_max_bs). CUDA only."""
from __future__ import annotations

from typing import Any

from ansible_collections.llmserve.sglang.plugins.module_utils import checks
from ansible_collections.llmserve.sglang.plugins.module_utils.capacity.kv_base import KvModelError
from ansible_collections.llmserve.sglang.plugins.module_utils.capacity.kv_cell import check_speculative
from ansible_collections.llmserve.sglang.plugins.module_utils.capacity.kv_shape import model_shape
from ansible_collections.llmserve.sglang.plugins.module_utils.capacity.kv_versions import (
    V_GRAPH_RESERVE,
    V_MRR_CAPS_BS,
    V_NO_SPEC_RESERVE,
    V_TIER35_AND_095,
    since,
)


def gpu_memory_defaults(gpu_memory_mib: float | None, tp_size: int = 1,
                        sglang_version: str | None = None) -> tuple[int, int]:
    """(chunked_prefill_size, cuda_graph_max_bs) SGLang picks from the GPU memory (nvidia-smi memory.total MiB,
    MIN over GPUs) when they are not set (CUDA; NPU tiers not modelled)."""
    if gpu_memory_mib is None:
        return 4096, 160
    mem = checks.number("gpu_memory_mib", gpu_memory_mib, KvModelError)
    small = tp_size < 4
    if mem < 20 * 1024:
        return 2048, 8
    if mem < 35 * 1024:
        if since(sglang_version, V_TIER35_AND_095):
            return 4096, 48 if small else 160
        return 2048, 24 if small else 80
    if mem < 60 * 1024:
        return 4096, 32 if small else 160
    if mem < 160 * 1024:
        return 8192, 256 if small else 512
    return 16384, 512


def _prefill_graph_sizes(max_bs: int) -> list[int]:
    sizes = (list(range(4, 33, 4)) + list(range(48, 257, 16)) + list(range(288, 513, 32))
             + list(range(576, 1025, 64)) + list(range(1280, 4097, 256)) + list(range(4608, max_bs + 1, 512)))
    return [s for s in sizes if s <= max_bs]


def default_mem_fraction_static(gpu_memory_mib: float | None, tp_size: int = 1, *, pp_size: int = 1,
                                dp_size: int = 1, enable_dp_attention: bool = False,
                                chunked_prefill_size: int | None = None, max_prefill_tokens: int = 16384,
                                cuda_graph_max_bs: int | None = None, cuda_graph_bs: list[int] | None = None,
                                speculative_algorithm: str | None = None, max_running_requests: int | None = None,
                                max_total_tokens: int | None = None, shape: Any = None,
                                sglang_version: str | None = None) -> float:
    """What SGLang uses when --mem-fraction-static is omitted (_handle_gpu_memory_settings, server_args.py;
    handle_gpu_memory_settings, arg_groups/memory_hook.py from 0.5.19).

    reserved (MiB) = 512 + max(chunked_prefill_size or max_prefill_tokens, 2048) * 1.5 + tp * pp / 8 * 1024
    + graph reserve; at least 10240 when gpu_memory_mib > 60 GiB; f = round((gpu - reserved) / gpu, 3), then the
    VLM factor 0.95 * clamp(1 - 0.1 * (vit_layers * vit_hidden**2 / (24 * 1024**2) - 1), 0.8, 1.05).
    Graph reserve: < 0.5.16 cuda_graph_max_bs * 2 (+ bs * dp * 3 and + bs * dp * 1.5 above bs 300 with DP
    attention); from 0.5.16 the same decode term + prefill graphs (MLA: 1536, else 8 per captured size).
    Speculative reserve before 0.5.14: STANDALONE + 6144, other algorithms but NGRAM + 2048.
    Without gpu_memory_mib: 0.88 (0.95 from 0.5.20). CUDA only; no disaggregation, DeepEP, piecewise graphs or
    post-capture sizing.
    """
    alg = check_speculative(speculative_algorithm)
    checks.integer("tp_size", tp_size, KvModelError, minimum=1)
    checks.integer("pp_size", pp_size, KvModelError, minimum=1)
    checks.integer("dp_size", dp_size, KvModelError, minimum=1)
    tier_cpf, tier_bs = gpu_memory_defaults(gpu_memory_mib, tp_size, sglang_version)
    cpf = tier_cpf if chunked_prefill_size is None else chunked_prefill_size
    if cuda_graph_bs:
        bs = max(cuda_graph_bs)
    elif cuda_graph_max_bs is not None:
        bs = cuda_graph_max_bs
    else:
        bs = tier_bs
        if since(sglang_version, V_MRR_CAPS_BS) and max_running_requests is not None and bs > max_running_requests:
            bs = max_running_requests
    if gpu_memory_mib is None:
        return 0.95 if since(sglang_version, V_TIER35_AND_095) else 0.88
    gpu = checks.number("gpu_memory_mib", gpu_memory_mib, KvModelError, above=0)
    reserved = 512 + (max(cpf, 2048) if cpf > 0 else max(max_prefill_tokens, 2048)) * 1.5
    graph: float = bs * 2
    if enable_dp_attention:
        graph += bs * dp_size * 3
        if bs > 300:
            graph += bs * dp_size * 1.5
    mla = shape is not None and model_shape(shape).attention in ("mla", "nsa")
    if since(sglang_version, V_GRAPH_RESERVE):
        reserved += tp_size * pp_size / 8 * 1024
        if mla:
            graph += 1.5 * 1024
        else:
            prefill_max = cpf if max_total_tokens is None else min(cpf, max_total_tokens)
            graph += len(_prefill_graph_sizes(prefill_max)) * 8
        reserved += graph
        if gpu > 60 * 1024:
            reserved = max(reserved, 10 * 1024)
    else:
        reserved += graph + tp_size * pp_size / 8 * 1024
        if gpu > 60 * 1024:
            reserved = max(reserved, 10 * 1024)
        if alg is not None and not since(sglang_version, V_NO_SPEC_RESERVE):
            if alg == "STANDALONE":
                reserved += 6 * 1024
            elif alg != "NGRAM":
                reserved += 2 * 1024
    f = round((gpu - reserved) / gpu, 3)
    if shape is not None:
        s = model_shape(shape)
        if s.is_vlm:
            layers = s.vision_num_layers if checks.is_integer(s.vision_num_layers) else 24
            hidden = s.vision_hidden_size if checks.is_integer(s.vision_hidden_size) else 1024
            ratio = layers * hidden ** 2 / (24 * 1024 ** 2)
            f = f * 0.95 * max(0.8, min(1.05, 1.0 - 0.1 * (ratio - 1.0)))
    return f


def default_for_server_args(gpu_memory_mib: float | None, args: dict[str, Any], *, shape: Any = None,
                            sglang_version: str | None = None) -> float:
    """default_mem_fraction_static for a server's arguments, a dict with SGLang's field names (absent ones take
    SGLang's defaults): the one mapping of server args to that function's inputs."""
    return default_mem_fraction_static(
        gpu_memory_mib, args.get("tp_size") or 1, pp_size=args.get("pp_size") or 1, dp_size=args.get("dp_size") or 1,
        enable_dp_attention=bool(args.get("enable_dp_attention")), chunked_prefill_size=args.get("chunked_prefill_size"),
        max_prefill_tokens=args.get("max_prefill_tokens") or 16384, cuda_graph_max_bs=args.get("cuda_graph_max_bs"),
        cuda_graph_bs=args.get("cuda_graph_bs"), speculative_algorithm=args.get("speculative_algorithm"),
        max_running_requests=args.get("max_running_requests"), max_total_tokens=args.get("max_total_tokens"),
        shape=shape, sglang_version=sglang_version)

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The cell: the bytes one token takes in the KV pool of one GPU, the divisor of the budget.

It depends on the model's shape, the KV cache dtype, the attention kind (MHA/GQA, MLA, NSA/DSA, hybrid sliding
window), the attention TP size, the speculative draft (counted in the cell from 0.5.14) and the SGLang version.
"""
from __future__ import annotations

from typing import Any

from ansible_collections.llmserve.sglang.plugins.module_utils import checks
from ansible_collections.llmserve.sglang.plugins.module_utils.capacity.kv_base import KvModelError
from ansible_collections.llmserve.sglang.plugins.module_utils.capacity.kv_shape import DTYPE_BYTES, model_shape
from ansible_collections.llmserve.sglang.plugins.module_utils.capacity.kv_versions import (
    HYBRID_SWA_0_5_7,
    V_AUTO_READS_KV_QUANT,
    V_DSA_FP8_LAYOUT,
    V_DSA_SPEC_SPLIT,
    V_HYBRID_SWA_MODELS,
    V_HYBRID_SWA_POOLS,
    V_MXFP8_SCALE,
    V_SPEC_ADDITIVE,
    V_SWA_CONFIGURATOR,
    compare_versions,
    kv_era,
    parse_version,
    release_of,
    since,
)

# --------------------------------------------------------------------------------------------------------------
# KV cache dtype
# --------------------------------------------------------------------------------------------------------------

# 0.5.9), and the element size of the torch dtype each becomes (float4_e2m1fn_x2 packs two values in 1 byte).
KV_CACHE_DTYPES = ("auto", "bf16", "bfloat16", "fp8_e4m3", "fp8_e5m2", "mxfp8", "fp4_e2m1", "nvfp4", "fp4_mx_block16")
_FP4 = ("fp4_e2m1", "nvfp4", "fp4_mx_block16")


def resolve_kv_cache_dtype(kv_cache_dtype: str | None, shape: Any,
                           sglang_version: str | None = None) -> tuple[str, int]:
    """(name, element bytes) of the KV cache: 'auto' is the model dtype, or fp8_e4m3 when the checkpoint's
    quantization_config says kv_cache_quant_algo FP8 and the release reads it (init_memory_pool, from 0.5.3rc2)."""
    if kv_cache_dtype is None:
        kv_cache_dtype = "auto"
    if not isinstance(kv_cache_dtype, str) or kv_cache_dtype not in KV_CACHE_DTYPES:
        if isinstance(kv_cache_dtype, str) and kv_cache_dtype.lower() in ("fp16", "float16", "half"):
            raise KvModelError(
                "kv_cache_dtype %r is not one of: %s (SGLang has no float16 KV choice: a float16 model gets a "
                "float16 KV cache with 'auto')" % (kv_cache_dtype, ", ".join(KV_CACHE_DTYPES)))
        raise KvModelError("kv_cache_dtype %r is not one of: %s" % (kv_cache_dtype, ", ".join(KV_CACHE_DTYPES)))
    if kv_cache_dtype == "auto":
        if shape.kv_cache_quant_algo and shape.kv_cache_quant_algo.upper() == "FP8" \
                and (sglang_version is None or compare_versions(sglang_version, V_AUTO_READS_KV_QUANT) >= 0):
            return "fp8_e4m3", 1
        return shape.dtype, DTYPE_BYTES[shape.dtype]
    if kv_cache_dtype in ("bf16", "bfloat16"):
        return "bfloat16", 2
    return kv_cache_dtype, 1


# --------------------------------------------------------------------------------------------------------------
# Cell size: bytes one token takes in the pool (per GPU)
# --------------------------------------------------------------------------------------------------------------

SPECULATIVE_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM")
EAGLE_FAMILY = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE")  # is_eagle() (NEXTN becomes EAGLE) or is_standalone()


def check_speculative(speculative_algorithm: Any) -> str | None:
    """The algorithm's name in upper case, or None for none; KvModelError for one the KV model does not know."""
    if speculative_algorithm is None or speculative_algorithm == "":
        return None
    if not isinstance(speculative_algorithm, str) or speculative_algorithm.upper() not in SPECULATIVE_ALGORITHMS:
        raise KvModelError("speculative_algorithm %r is not one of: %s (DFLASH and other drafts are not modelled)"
                           % (speculative_algorithm, ", ".join(SPECULATIVE_ALGORITHMS)))
    return speculative_algorithm.upper()


def _attn_tp(tp_size: int, dp_size: int, enable_dp_attention: bool) -> int:
    checks.integer("tp_size", tp_size, KvModelError, minimum=1)
    checks.integer("dp_size", dp_size, KvModelError, minimum=1)
    if enable_dp_attention:
        if tp_size % dp_size:
            raise KvModelError("with enable_dp_attention, tp_size (%d) must be a multiple of dp_size (%d)"
                               % (tp_size, dp_size))
        return tp_size // dp_size  # compute_dp_attention_world_info: attn_tp = tp // dp
    return tp_size


def draft_layer_count(shape: Any, speculative_algorithm: str | None, draft_layers: int | None = None) -> int:
    """D, the draft's KV layers SGLang >= 0.5.14 adds to the cell (spec_aux_hidden_state.py): the draft's
    num_nextn_predict_layers, else its num_hidden_layers. Defaults: NEXTN -> the target's num_nextn_predict_layers;
    EAGLE/EAGLE3 -> 1 (an EAGLE head is one decoder layer); STANDALONE needs draft_layers."""
    alg = check_speculative(speculative_algorithm)
    if alg is None or alg == "NGRAM":
        return 0
    if draft_layers is not None:
        return checks.integer("draft_layers", draft_layers, KvModelError, minimum=1)
    if alg == "NEXTN":
        if not shape.num_nextn_predict_layers:
            raise KvModelError("speculative_algorithm NEXTN needs num_nextn_predict_layers > 0 in config.json, got %r; "
                               "give draft_layers" % (shape.num_nextn_predict_layers,))
        return shape.num_nextn_predict_layers
    if alg == "STANDALONE":
        raise KvModelError("speculative_algorithm STANDALONE needs draft_layers (the draft model's num_hidden_layers)")
    return 1


def _uses_hybrid_swa(shape: Any, sglang_version: str | None) -> bool:
    rel = release_of(sglang_version)
    if rel < V_HYBRID_SWA_POOLS:
        return False   # no sliding-window pools (0.4.9: Llama 4 only, with --hybrid-kvcache-ratio)
    if kv_era(sglang_version) == "classic":
        return shape.hybrid_swa_classic
    if rel < V_HYBRID_SWA_MODELS:
        return shape.hybrid_swa and shape.architecture in HYBRID_SWA_0_5_7   # is_hybrid_model
    return shape.hybrid_swa


def _mha_geometry(shape: Any, attn_tp: int, elem: int, sglang_version: str | None) -> tuple[int, int]:
    """(F, S): bytes per token per layer of a full and of a sliding-window layer (MHA)."""
    n = max(1, shape.num_kv_heads // attn_tp)
    if kv_era(sglang_version) == "classic":
        return n * shape.head_dim * 2 * elem, n * shape.head_dim * 2 * elem
    n_swa = max(1, shape.swa_num_kv_heads // attn_tp)
    return n * (shape.head_dim + shape.v_head_dim) * elem, n_swa * (shape.swa_head_dim + shape.swa_v_head_dim) * elem


def _nsa_indexer_bytes(shape: Any, layers: int, sglang_version: str | None) -> int:
    """Indexer K + scales, uint8: (index_head_dim + index_head_dim // 128 * 4) per layer (quant_block_size 128);
    current code divides by index_kpool (ceil)."""
    per = shape.index_head_dim + shape.index_head_dim // 128 * 4
    if kv_era(sglang_version) == "current":
        per = -(-per // shape.index_kpool)
    return per * layers


def _mla_cell(shape: Any, layers: int, kv_name: str, elem: int, sglang_version: str | None,
              dsa_kv_layout: str) -> int:
    rank, rope = shape.kv_lora_rank, shape.qk_rope_head_dim
    dim = rank + rope
    if shape.attention == "nsa" and kv_name == "fp8_e4m3" and since(sglang_version, V_DSA_FP8_LAYOUT) \
            and dsa_kv_layout != "raw":
        # calculate_mla_kv_cache_dim: fp8 nope + per-128 fp32 scales + bf16 rope (CUDA, non-trtllm DSA backends)
        dim = rank + rank // 128 * 4 + rope * 2
    cell = dim * layers * elem
    if kv_name in _FP4:
        cell = cell // 2 + (rank + rope) // 16 * layers * elem  # + kv_scale_buffer, block 16
    return cell


def _validate_geometry(shape: Any) -> None:
    if shape.attention == "mha" and not shape.num_kv_heads:
        raise KvModelError("config.json gives no number of KV heads (num_key_value_heads / num_attention_heads)")


def _base_cell(shape: Any, attn_tp: int, kv_name: str, elem: int, sglang_version: str | None, dsa_kv_layout: str,
               swa_full_tokens_ratio: float, draft: int) -> tuple[float, dict[str, Any] | None]:
    """The cell before the EAGLE draft is added, and the hybrid-SWA pieces (or None)."""
    era = kv_era(sglang_version)
    hybrid = _uses_hybrid_swa(shape, sglang_version)
    L = shape.num_layers
    if shape.attention in ("mla", "nsa"):
        if hybrid:
            raise KvModelError("hybrid sliding-window MLA models (%s) are not supported" % shape.architecture)
        cell = _mla_cell(shape, L, kv_name, elem, sglang_version, dsa_kv_layout)
        if shape.attention == "nsa":
            cell += _nsa_indexer_bytes(shape, L, sglang_version)
        return cell, None
    full_b, swa_b = _mha_geometry(shape, attn_tp, elem, sglang_version)
    n = max(1, shape.num_kv_heads // attn_tp)
    if kv_name in _FP4:
        if since(sglang_version, V_MXFP8_SCALE):
            raise KvModelError(
                "kv_cache_dtype %s on an MHA model is not supported for SGLang >= 0.5.16: its cell comes from the FP4 "
                "recipe (scale layouts and dequant workspace chosen by the attention backend)" % kv_name)
        if hybrid:
            raise KvModelError("kv_cache_dtype %s with a hybrid sliding-window model is not supported" % kv_name)
        base = full_b * L
        return base // 2 + (n * shape.head_dim * L * 2 * elem) // 16, None
    mx = kv_name == "mxfp8" and since(sglang_version, V_MXFP8_SCALE)
    if not hybrid:
        cell = full_b * L
        if mx:
            cell += (n * (shape.head_dim + shape.v_head_dim) * L) // 32
        return cell, None
    nf, ns = shape.full_attention_layers, shape.swa_layers
    if mx:
        n_swa = max(1, shape.swa_num_kv_heads // attn_tp)
        full_b += (n * (shape.head_dim + shape.v_head_dim)) // 32
        swa_b += (n_swa * (shape.swa_head_dim + shape.swa_v_head_dim)) // 32
    swa = {"full_bytes": full_b, "swa_bytes": swa_b, "full_layers": nf, "swa_layers": ns, "layers": L,
           "ratio": swa_full_tokens_ratio, "draft_layers": 0, "era": era}
    if era == "classic":
        return full_b * L, swa   # classic profiles with the plain cell over every layer
    if release_of(sglang_version) < V_SWA_CONFIGURATOR:
        return full_b * nf + swa_b * ns, swa
    swa["draft_layers"] = draft
    if nf == 0:
        return swa_b * ns + full_b * draft, swa
    return full_b * (nf + draft) + swa_full_tokens_ratio * swa_b * ns, swa


def cell_and_plan(shape: Any, tp_size: int = 1, dp_size: int = 1, enable_dp_attention: bool = False,
                  kv_cache_dtype: str | None = "auto", sglang_version: str | None = None,
                  speculative_algorithm: str | None = None, draft_layers: int | None = None,
                  swa_full_tokens_ratio: float = 0.8, dsa_kv_layout: str = "auto") -> tuple[float, dict[str, Any]]:
    """(cell, plan): cell_size_bytes' number and what the pool needs besides it (the shape, the KV dtype, the
    attention TP, the speculative algorithm, the draft layers counted in the cell, the hybrid-SWA pieces or None, the
    target's own cell without the draft or None)."""
    shape = model_shape(shape)
    _validate_geometry(shape)
    if sglang_version is not None:
        parse_version(sglang_version)
    attn_tp = _attn_tp(tp_size, dp_size, enable_dp_attention)
    kv_name, elem = resolve_kv_cache_dtype(kv_cache_dtype, shape, sglang_version)
    alg = check_speculative(speculative_algorithm)
    r = checks.number("swa_full_tokens_ratio", swa_full_tokens_ratio, KvModelError)
    if not 0 < r <= 1:
        raise KvModelError("swa_full_tokens_ratio must be in (0, 1], got %r" % (swa_full_tokens_ratio,))
    if dsa_kv_layout not in ("auto", "raw", "scaled"):
        raise KvModelError("dsa_kv_layout %r is not one of: auto, raw, scaled" % (dsa_kv_layout,))
    draft_in_cell = alg in EAGLE_FAMILY and kv_era(sglang_version) == "current"
    D = draft_layer_count(shape, alg, draft_layers) if draft_in_cell else 0
    hybrid = _uses_hybrid_swa(shape, sglang_version)
    cell, swa = _base_cell(shape, attn_tp, kv_name, elem, sglang_version, dsa_kv_layout, r, D if hybrid else 0)
    target_cell = cell if swa is None else None
    L = shape.num_layers
    if D and not hybrid:
        # DefaultPoolConfigurator: EAGLE/STANDALONE drafts share the target's per-layer KV size.
        if shape.attention == "nsa" and since(sglang_version, V_DSA_SPEC_SPLIT):
            indexer = _nsa_indexer_bytes(shape, L, sglang_version)
            cell += int((cell - indexer) * D / L) + _nsa_indexer_bytes(shape, D, sglang_version)
        elif since(sglang_version, V_SPEC_ADDITIVE):
            cell += int(cell * D / L)
        else:
            cell = int(cell * (1 + D / L))
    return cell, {"shape": shape, "kv_cache_dtype": kv_name, "kv_element_bytes": elem, "attn_tp": attn_tp,
                  "speculative_algorithm": alg, "draft_layers_in_cell": D, "swa": swa, "target_cell": target_cell}


def cell_size_bytes(shape: Any, *, tp_size: int = 1, dp_size: int = 1, enable_dp_attention: bool = False,
                    kv_cache_dtype: str | None = "auto", sglang_version: str | None = None,
                    speculative_algorithm: str | None = None, draft_layers: int | None = None,
                    swa_full_tokens_ratio: float = 0.8, dsa_kv_layout: str = "auto") -> float:
    """Bytes one KV token takes per GPU, as SGLang divides the budget by it.

    - MHA/GQA: max(1, kv_heads // attn_tp) * (head_dim + v_head_dim) * L * elem (classic: head_dim * 2);
      attn_tp = tp_size, or tp_size // dp_size with enable_dp_attention.
    - MLA: (kv_lora_rank + qk_rope_head_dim) * L * elem, not divided by TP (the latent is replicated).
    - NSA/DSA (DeepSeek-V3.2): + (index_head_dim + index_head_dim // 128 * 4) * L bytes of indexer; from 0.5.17
      with fp8_e4m3 the latent row is kv_lora_rank + kv_lora_rank // 128 * 4 + 2 * qk_rope_head_dim bytes
      (dsa_kv_layout='raw' for the trtllm/TileLang backends that keep the raw 576-byte row).
    - FP4 (fp4_e2m1, nvfp4, fp4_mx_block16): cell // 2 + a block-16 scale buffer (MLA: every version; MHA: only
      before 0.5.16, after which the attention backend's recipe decides and KvModelError is raised).
    - mxfp8 (>= 0.5.16): 1 byte + MHA scales (heads * (head_dim + v_head_dim) * L) // 32.
    - Hybrid sliding-window models: classic profiles with the plain cell; 0.5.7 - 0.5.10 with F*nf + S*ns;
      >= 0.5.11 with F*(nf + D) + r*S*ns, a float (r = swa_full_tokens_ratio).
    - EAGLE/EAGLE3/NEXTN/STANDALONE on >= 0.5.14: the draft's D layers are in the cell: int(cell * (1 + D/L))
      until 0.5.21, cell + int(cell * D / L) from 0.5.22 (DSA from 0.5.18: int(kv * D / L) + the draft's indexer).
      Classic adds headroom tokens instead (max_total_num_tokens), mixin counts the draft outside the budget.
    """
    return cell_and_plan(shape, tp_size, dp_size, enable_dp_attention, kv_cache_dtype, sglang_version,
                         speculative_algorithm, draft_layers, swa_full_tokens_ratio, dsa_kv_layout)[0]

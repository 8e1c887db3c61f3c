# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""SGLang's KV-cache arithmetic: how many tokens the KV pool gets, and which --mem-fraction-static gives how many.

Pure and stdlib only: no I/O, no torch, no ``packaging`` (it runs in modules on managed hosts too).

Read from SGLang's released packages (PyPI wheels) 0.4.10, 0.5.5.post3, 0.5.6, 0.5.6.post2, 0.5.7 ... 0.5.23;
the code paths mirrored here are named where they are used. Units: GiB = bytes / 2**30 (SGLang prints it as "GB").

P = free GPU memory before the weights load (MIN over ranks), A = free memory when the KV pool is sized (MIN over
ranks), f = --mem-fraction-static. Every version computes ``rest = A - P * (1 - f)`` and divides it by the bytes one
token takes in the pool (the "cell"). What changed between versions is the cell and what happens around it; three
eras matter (``kv_era``):

- ``classic`` (< 0.5.7, so 0.5.6.post2 included): ``model_runner.py`` ``profile_max_num_token`` /
  ``init_memory_pool``. MHA cell = heads * head_dim * 2 * L * bytes (v_head_dim ignored). With EAGLE, EAGLE3, NEXTN
  or STANDALONE the pool gets ``R*steps*topk + R*draft_tokens + 100`` tokens more, outside the budget.
- ``mixin`` (0.5.7 - 0.5.13): ``model_runner_kv_cache_mixin.py``. MHA cell uses head_dim + v_head_dim; no EAGLE
  headroom; the draft's KV pool is allocated after the target's, outside the budget.
- ``current`` (>= 0.5.14): ``pool_configurator.py`` / ``kv_cache_configurator.py``. EAGLE-family drafts are counted
  in the cell (``cell * D / L`` more), VLMs reserve SGLANG_VLM_CACHE_SIZE_MB (100 MiB) of the budget (>= 0.5.18).
"""
from __future__ import annotations

import math
import re
from collections import namedtuple

from ansible_collections.llmserve.sglang.plugins.module_utils import checks

GIB = 2 ** 30
MIB = 2 ** 20

# --------------------------------------------------------------------------------------------------------------
# Errors and input checks
# --------------------------------------------------------------------------------------------------------------


class KvModelError(checks.InvalidInput):
    """A bad input to the KV model: the message names the field and the value."""


def check_memory(pre_load_free_gib, post_load_free_gib, mem_fraction_static=None):
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


# --------------------------------------------------------------------------------------------------------------
# SGLang versions
# --------------------------------------------------------------------------------------------------------------

_VERSION_RE = re.compile(
    r"^\s*v?(?P<release>\d+(?:\.\d+)*)"
    r"(?:[-_.]?(?P<pre>a|b|c|rc|alpha|beta|pre|preview)[-_.]?(?P<pre_n>\d*))?"
    r"(?:[-_.]?(?:post|rev|r)[-_.]?(?P<post>\d*))?"
    r"(?:[-_.]?dev[-_.]?(?P<dev>\d*))?"
    r"(?:\+[a-z0-9]+(?:[-_.][a-z0-9]+)*)?\s*$",
    re.IGNORECASE)
_PRE_RANK = {"a": 0, "alpha": 0, "b": 1, "beta": 1, "c": 2, "rc": 2, "pre": 2, "preview": 2}

# The newest release whose code this module was checked against; None (no version given) means this one.
CURRENT_VERSION = "0.5.23"


def parse_version(version):
    """PEP 440-style sort key for an SGLang version ("0.5.5.post3", "0.5.6rc1", "v0.5.9", "0.5.10.dev0+gabc")."""
    if not isinstance(version, str):
        raise KvModelError("sglang_version must be a string such as '0.5.9', got %r" % (version,))
    m = _VERSION_RE.match(version)
    if not m:
        raise KvModelError("sglang_version %r is not a version number such as 0.5.9 or 0.5.5.post3" % (version,))
    release = tuple(int(x) for x in m.group("release").split("."))
    release = release + (0,) * (3 - len(release)) if len(release) < 3 else release
    # dev < pre < final < post for one release
    if m.group("pre"):
        pre = (_PRE_RANK[m.group("pre").lower()], int(m.group("pre_n") or 0))
    elif m.group("dev") is not None and m.group("post") is None:
        pre = (-1, 0)
    else:
        pre = (3, 0)
    post = int(m.group("post") or 0) if m.group("post") is not None else -1
    dev = int(m.group("dev") or 0) if m.group("dev") is not None else float("inf")
    return release, pre, post, dev


def compare_versions(left, right):
    """-1, 0 or 1 as left <, ==, > right."""
    a, b = parse_version(left), parse_version(right)
    return (a > b) - (a < b)


def _release(version):
    """The release segment (major, minor, micro) of a version; None means CURRENT_VERSION."""
    return parse_version(CURRENT_VERSION if version is None else version)[0][:3]


def _since(version, threshold):
    """True when `version` (None = current) is at or after release `threshold` (a tuple); pre-releases of a
    release count as that release (0.5.7rc1 has 0.5.7's code)."""
    return _release(version) >= threshold


# Releases where the memory arithmetic changed (read in the wheels; see kv_era's docstring).
_V_MIXIN = (0, 5, 7)            # v_head_dim in the MHA cell, no EAGLE headroom, memory-based hybrid-SWA split
_V_SWA_CONFIGURATOR = (0, 5, 11)  # HybridSWAPoolConfigurator: cell = F*nf + r*S*ns
_V_CURRENT = (0, 5, 14)         # EAGLE draft in the cell, "Loaded weights leave no GPU memory" error
_V_MXFP8_SCALE = (0, 5, 16)     # mxfp8 scale bytes in the MHA cell; FP4 MHA cell via recipe (backend-dependent)
_V_DSA_FP8_LAYOUT = (0, 5, 17)  # DSA + fp8_e4m3: 656-byte latent rows in the cell
_V_DSA_SPEC_SPLIT = (0, 5, 18)  # DSA draft = int(kv * D / L) + the draft's own indexer
_V_VLM_RESERVATION = (0, 5, 18)  # multimodal models reserve SGLANG_VLM_CACHE_SIZE_MB of the KV budget
_V_SPEC_ADDITIVE = (0, 5, 22)   # cell += int(cell * D / L) instead of int(cell * (1 + D / L))
# default --mem-fraction-static
_V_NO_SPEC_RESERVE = (0, 5, 14)  # the +2048/+6144 MiB speculative reserve is gone
_V_GRAPH_RESERVE = (0, 5, 16)   # reserve_for_graph_mb(): decode + prefill graph terms
_V_TIER35_AND_095 = (0, 5, 20)  # <35 GiB tier 4096/48/160, fallback 0.95 without nvidia-smi
_V_MRR_CAPS_BS = (0, 5, 22)     # default decode max_bs capped at --max-running-requests


def kv_era(sglang_version=None):
    """'classic' (< 0.5.7), 'mixin' (0.5.7 - 0.5.13) or 'current' (>= 0.5.14; also for None)."""
    rel = _release(sglang_version)
    if rel < _V_MIXIN:
        return "classic"
    if rel < _V_CURRENT:
        return "mixin"
    return "current"


def is_classic(sglang_version):
    """True for SGLang whose init_memory_pool adds the EAGLE headroom outside the budget and whose MHA cell ignores
    v_head_dim: every release before 0.5.7, post releases included (0.5.5.post3, 0.5.6.post2). None = current."""
    return sglang_version is not None and kv_era(sglang_version) == "classic"


# --------------------------------------------------------------------------------------------------------------
# The model: shape read from a Hugging Face config.json
# --------------------------------------------------------------------------------------------------------------

ModelShape = namedtuple("ModelShape", [
    "architecture",             # architectures[0] of the top-level config
    "attention",                # 'mha', 'mla' or 'nsa' (MLA with the DeepSeek-V3.2 DSA/NSA indexer)
    "num_layers",               # attention layers L = num_hidden_layers of the text model
    "num_kv_heads",             # total KV heads (MHA/GQA)
    "head_dim",
    "v_head_dim",
    "kv_lora_rank",             # MLA latent rank (None for MHA)
    "qk_rope_head_dim",         # MLA rope part (None for MHA)
    "index_head_dim",           # NSA indexer head dim (None unless nsa)
    "index_kpool",              # NSA indexer pooling (1 unless the config says)
    "full_attention_layers",    # layers with full attention (== num_layers without sliding windows)
    "swa_layers",               # sliding-window layers
    "swa_num_kv_heads",
    "swa_head_dim",
    "swa_v_head_dim",
    "hybrid_swa",               # SGLang >= 0.5.7 gives this model separate full and sliding-window pools
    "hybrid_swa_classic",       # SGLang < 0.5.7 does (it went by the model class having a sliding window)
    "dtype",                    # resolved model dtype: bfloat16, float16 or float32
    "num_nextn_predict_layers",  # MTP layers (DeepSeek NEXTN), None when absent
    "is_vlm",                   # a multimodal model SGLang loads with its vision tower
    "context_len",              # max_position_embeddings of the text model (None when absent)
    "kv_cache_quant_algo",      # quantization_config.kv_cache_quant_algo ('FP8' makes kv_cache_dtype auto -> fp8)
    "vision_num_layers",        # vision_config.num_hidden_layers (None when absent)
    "vision_hidden_size",       # vision_config.hidden_size (None when absent)
])

# get_hf_text_config (current): thinker_config > llm_config > language_config > text_config
_TEXT_CONFIG_KEYS = ("thinker_config", "llm_config", "language_config", "text_config")
_STR_TO_DTYPE = {"half": "float16", "float16": "float16", "fp16": "float16", "float": "float32",
                 "float32": "float32", "bfloat16": "bfloat16", "bf16": "bfloat16"}
_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
# Every dtype name torch has (what transformers turns config.json's dtype into; any other name fails to load there).
_TORCH_DTYPE_NAMES = frozenset((
    "float16", "half", "bfloat16", "float32", "float", "float64", "double", "complex32", "complex64", "complex128",
    "uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32", "int64", "short", "int", "long", "bool",
    "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu", "float4_e2m1fn_x2"))

# Architectures SGLang >= 0.5.7 builds separate sliding-window pools for (is_hybrid_swa_model, 0.5.23), plus any
# text config with is_hybrid_swa: true.
_HYBRID_SWA_ARCHS = frozenset([
    "GptOssForCausalLM", "GraniteSWAForCausalLM", "GraniteMoeSWAForCausalLM", "IQuestQ1ForCausalLM",
    "MiMoV2ForCausalLM", "MiMoV2FlashForCausalLM", "Step3p5ForCausalLM", "Step3p7ForConditionalGeneration",
    "Gemma4ForCausalLM", "Gemma4ForConditionalGeneration", "Llama4ForConditionalGeneration", "BeamForCausalLM",
    "LagunaForCausalLM", "MellumForCausalLM"])
# SGLang < 0.5.7: any model class that reports a sliding window (get_attention_sliding_window_size).
_HYBRID_SWA_ARCHS_CLASSIC = frozenset([
    "GptOssForCausalLM", "Gemma2ForCausalLM", "Gemma3ForCausalLM", "Gemma3ForConditionalGeneration",
    "Gemma3nForCausalLM", "Gemma3nForConditionalGeneration"])
# SGLang disables the multimodal path of these by default (enable_multimodal None), so they size as text models.
_MM_DISABLED_ARCHS = frozenset(["Gemma3ForConditionalGeneration", "Llama4ForConditionalGeneration",
                                "Step3VLForConditionalGeneration"])


def _text_config(config):
    for key in _TEXT_CONFIG_KEYS:
        sub = config.get(key)
        if isinstance(sub, dict):
            if key == "thinker_config" and isinstance(sub.get("text_config"), dict):
                return sub["text_config"], key + ".text_config"
            return sub, key
    return config, None


def _get(cfg, key, default=None):
    value = cfg.get(key, default)
    return default if value is None else value


def _int_field(cfg, key, where, required=True, minimum=1):
    value = cfg.get(key)
    if value is None:
        if required:
            raise KvModelError("config.json%s has no %s" % (where, key))
        return None
    if not checks.is_integer(value) or value < minimum:
        raise KvModelError("config.json%s %s must be an integer >= %d, got %r" % (where, key, minimum, value))
    return value


def _resolve_model_dtype(text, config, dtype):
    """_get_and_verify_dtype: the config's dtype/torch_dtype (sub-configs inherit the parent's); 'auto' keeps it,
    except float32 (or none given) becomes float16, or bfloat16 for Gemma."""
    if dtype is None:
        dtype = "auto"
    if not isinstance(dtype, str):
        raise KvModelError("dtype must be a string such as auto or bfloat16, got %r" % (dtype,))
    wanted = dtype.lower()
    if wanted != "auto":
        if wanted not in _STR_TO_DTYPE:
            raise KvModelError("dtype %r is not one of: auto, %s" % (dtype, ", ".join(sorted(_STR_TO_DTYPE))))
        return _STR_TO_DTYPE[wanted]
    raw = None
    for cfg in (text, config):
        raw = cfg.get("dtype") or cfg.get("torch_dtype")
        if raw:
            break
    name = str(raw).lower().replace("torch.", "") if raw else None
    if name is not None and name != "auto" and name not in _TORCH_DTYPE_NAMES:
        raise KvModelError("config.json's dtype %r is not a torch dtype (bfloat16, float16, float32, ...): the model "
                           "would not load, and its KV cache cannot be sized" % (raw,))
    config_dtype = _STR_TO_DTYPE.get(name, None) if name else None
    if config_dtype is None or config_dtype == "float32":
        model_type = str(text.get("model_type") or config.get("model_type") or "")
        return "bfloat16" if model_type.startswith("gemma") else "float16"
    return config_dtype


def _layer_split(text, architecture, num_layers, where):
    """(full_layers, swa_layers) from layer_types / hybrid_layer_pattern / Llama 4 / Gemma 2-3 conventions."""
    layer_types = text.get("layer_types")
    if isinstance(layer_types, list) and layer_types:
        types = [str(t) for t in layer_types[:num_layers]]
        if any("linear" in t or "mamba" in t for t in types):
            raise KvModelError(
                "config.json%s layer_types has linear-attention/Mamba layers (%s): hybrid linear-attention models "
                "keep a state pool that this model does not size; not supported" % (where, sorted(set(types))))
        swa = sum(1 for t in types if t == "sliding_attention")
        return num_layers - swa, swa
    pattern = text.get("hybrid_layer_pattern")
    if isinstance(pattern, list) and pattern:
        swa = sum(1 for x in pattern[:num_layers] if x == 1)
        return num_layers - swa, swa
    if architecture == "Llama4ForConditionalGeneration":
        full = sum(1 for i in range(num_layers) if (i + 1) % 4 == 0)
        return full, num_layers - full
    model_type = str(text.get("model_type") or "")
    if text.get("sliding_window") and model_type == "gemma2":
        swa = sum(1 for i in range(num_layers) if i % 2 == 0)
        return num_layers - swa, swa
    swp = text.get("sliding_window_pattern")
    if text.get("sliding_window") and model_type.startswith("gemma3") and checks.is_integer(swp) and swp > 0:
        full = sum(1 for i in range(num_layers) if (i + 1) % swp == 0)
        return full, num_layers - full
    return num_layers, 0


def _kv_heads(text, config, where):
    """get_total_num_kv_heads: multi_query -> 1; n_head_kv, num_kv_heads, num_key_value_heads,
    multi_query_group_num, num_attention_groups; else num_attention_heads."""
    falcon_new = config.get("model_type") in ("falcon", "RefinedWeb", "RefinedWebModel") \
        and config.get("new_decoder_architecture")
    if text.get("multi_query") and not falcon_new:
        return 1
    attn_config = config.get("attn_config")
    if config.get("model_type") in ("mpt", "dbrx") and isinstance(attn_config, dict) and attn_config.get("kv_n_heads"):
        return _int_field(attn_config, "kv_n_heads", where + ".attn_config")
    for key in ("n_head_kv", "num_kv_heads", "num_key_value_heads", "multi_query_group_num", "num_attention_groups"):
        if text.get(key) is not None:
            return _int_field(text, key, where)
    return _int_field(text, "num_attention_heads", where)


def model_shape(config, dtype="auto"):
    """Read what the KV cache depends on from a Hugging Face config.json (a dict), following text_config,
    language_config, llm_config or thinker_config for multimodal models. `dtype` is SGLang's --dtype."""
    if isinstance(config, ModelShape):
        return config
    if not isinstance(config, dict):
        raise KvModelError("model config must be a JSON object (dict), got %s" % type(config).__name__)
    text, sub = _text_config(config)
    where = " " + sub if sub else ""
    archs = config.get("architectures") or text.get("architectures") or []
    architecture = str(archs[0]) if isinstance(archs, list) and archs else ""

    if config.get("compress_ratios") or text.get("compress_ratios"):
        raise KvModelError("config.json%s has compress_ratios (DeepSeek-V4 compressed attention): its KV pools are "
                           "sized by SGLang's DSV4PoolConfigurator, which this model does not cover" % where)
    if text.get("hybrid_override_pattern") or text.get("full_attention_interval") or text.get("mamba_d_ssm") \
            or str(text.get("model_type") or "").startswith(("mamba", "nemotron_h", "qwen3_next", "falcon_h1")):
        raise KvModelError("config.json%s describes a hybrid Mamba/linear-attention model (model_type %r): its state "
                           "pool is carved out of the KV budget first; not supported"
                           % (where, text.get("model_type")))

    num_layers = _int_field(text, "num_hidden_layers", where)
    full_layers, swa_layers = _layer_split(text, architecture, num_layers, where)
    kv_lora_rank = text.get("kv_lora_rank")
    attention = "mha"
    if kv_lora_rank is not None and text.get("use_mla", True) is not False:
        attention = "mla"
        kv_lora_rank = _int_field(text, "kv_lora_rank", where)
        rope = _int_field(text, "qk_rope_head_dim", where, minimum=0)
        if text.get("index_topk") is not None:
            attention = "nsa"
    else:
        kv_lora_rank = None
        rope = None

    heads = text.get("num_attention_heads")
    hidden = text.get("hidden_size")
    head_dim = text.get("head_dim")
    if head_dim is None:
        if not (checks.is_integer(heads) and heads > 0 and checks.is_integer(hidden) and hidden > 0):
            raise KvModelError("config.json%s has no head_dim, and no hidden_size and num_attention_heads to derive "
                               "it from" % where)
        head_dim = hidden // heads
    elif not checks.is_integer(head_dim) or head_dim < 1:
        raise KvModelError("config.json%s head_dim must be a positive integer, got %r" % (where, head_dim))
    v_head_dim = text.get("v_head_dim") or head_dim
    if not checks.is_integer(v_head_dim) or v_head_dim < 1:
        raise KvModelError("config.json%s v_head_dim must be a positive integer, got %r" % (where, v_head_dim))
    num_kv_heads = _kv_heads(text, config, where) if attention == "mha" else (_get(text, "num_key_value_heads", heads))

    index_head_dim = None
    index_kpool = 1
    if attention == "nsa":
        index_head_dim = _int_field(text, "index_head_dim", where)
        index_kpool = _int_field(text, "index_kpool", where, required=False) or 1

    hybrid = swa_layers > 0 and (architecture in _HYBRID_SWA_ARCHS or bool(text.get("is_hybrid_swa")))
    hybrid_classic = swa_layers > 0 and architecture in _HYBRID_SWA_ARCHS_CLASSIC
    swa_heads = text.get("swa_num_key_value_heads") or num_kv_heads
    swa_head_dim = text.get("swa_head_dim") or head_dim
    swa_v_head_dim = text.get("swa_v_head_dim") or swa_head_dim

    vision = config.get("vision_config") if isinstance(config.get("vision_config"), dict) else None
    is_vlm = vision is not None and architecture not in _MM_DISABLED_ARCHS

    quant = config.get("quantization_config") or text.get("quantization_config") or {}
    kv_quant = None
    if isinstance(quant, dict):
        kv_quant = quant.get("kv_cache_quant_algo")
        if kv_quant is None and isinstance(quant.get("quantization"), dict):
            kv_quant = quant["quantization"].get("kv_cache_quant_algo")
    nextn = text.get("num_nextn_predict_layers")
    context = text.get("max_position_embeddings")

    return ModelShape(
        architecture=architecture, attention=attention, num_layers=num_layers,
        num_kv_heads=num_kv_heads if checks.is_integer(num_kv_heads) else None,
        head_dim=head_dim, v_head_dim=v_head_dim, kv_lora_rank=kv_lora_rank, qk_rope_head_dim=rope,
        index_head_dim=index_head_dim, index_kpool=index_kpool,
        full_attention_layers=full_layers, swa_layers=swa_layers,
        swa_num_kv_heads=swa_heads, swa_head_dim=swa_head_dim, swa_v_head_dim=swa_v_head_dim,
        hybrid_swa=hybrid, hybrid_swa_classic=hybrid_classic,
        dtype=_resolve_model_dtype(text, config, dtype),
        num_nextn_predict_layers=nextn if checks.is_integer(nextn) else None,
        is_vlm=is_vlm, context_len=context if checks.is_integer(context) else None,
        kv_cache_quant_algo=str(kv_quant) if kv_quant else None,
        vision_num_layers=vision.get("num_hidden_layers") if vision else None,
        vision_hidden_size=vision.get("hidden_size") if vision else None,
    )


# --------------------------------------------------------------------------------------------------------------
# KV cache dtype
# --------------------------------------------------------------------------------------------------------------

# --kv-cache-dtype choices over 0.5.5 - 0.5.23 (fp4_e2m1 until 0.5.20, nvfp4/fp4_mx_block16 from 0.5.16, mxfp8 from
# 0.5.9), and the element size of the torch dtype each becomes (float4_e2m1fn_x2 packs two values in 1 byte).
KV_CACHE_DTYPES = ("auto", "bf16", "bfloat16", "fp8_e4m3", "fp8_e5m2", "mxfp8", "fp4_e2m1", "nvfp4", "fp4_mx_block16")
_FP4 = ("fp4_e2m1", "nvfp4", "fp4_mx_block16")


def resolve_kv_cache_dtype(kv_cache_dtype, shape):
    """(name, element bytes) of the KV cache: 'auto' is the model dtype, or fp8_e4m3 when the checkpoint's
    quantization_config says kv_cache_quant_algo FP8 (configure_kv_cache_dtype / init_memory_pool)."""
    if kv_cache_dtype is None:
        kv_cache_dtype = "auto"
    if not isinstance(kv_cache_dtype, str) or kv_cache_dtype not in KV_CACHE_DTYPES:
        if isinstance(kv_cache_dtype, str) and kv_cache_dtype.lower() in ("fp16", "float16", "half"):
            raise KvModelError(
                "kv_cache_dtype %r is not one of: %s (SGLang has no float16 KV choice: a float16 model gets a "
                "float16 KV cache with 'auto')" % (kv_cache_dtype, ", ".join(KV_CACHE_DTYPES)))
        raise KvModelError("kv_cache_dtype %r is not one of: %s" % (kv_cache_dtype, ", ".join(KV_CACHE_DTYPES)))
    if kv_cache_dtype == "auto":
        if shape.kv_cache_quant_algo and shape.kv_cache_quant_algo.upper() == "FP8":
            return "fp8_e4m3", 1
        return shape.dtype, _DTYPE_BYTES[shape.dtype]
    if kv_cache_dtype in ("bf16", "bfloat16"):
        return "bfloat16", 2
    return kv_cache_dtype, 1


# --------------------------------------------------------------------------------------------------------------
# Cell size: bytes one token takes in the pool (per GPU)
# --------------------------------------------------------------------------------------------------------------

SPECULATIVE_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM")
_EAGLE_FAMILY = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE")  # is_eagle() (NEXTN becomes EAGLE) or is_standalone()


def _check_speculative(speculative_algorithm):
    if speculative_algorithm is None or speculative_algorithm == "":
        return None
    if not isinstance(speculative_algorithm, str) or speculative_algorithm.upper() not in SPECULATIVE_ALGORITHMS:
        raise KvModelError("speculative_algorithm %r is not one of: %s (DFLASH and other drafts are not modelled)"
                           % (speculative_algorithm, ", ".join(SPECULATIVE_ALGORITHMS)))
    return speculative_algorithm.upper()


def _attn_tp(tp_size, dp_size, enable_dp_attention):
    checks.integer("tp_size", tp_size, KvModelError, minimum=1)
    checks.integer("dp_size", dp_size, KvModelError, minimum=1)
    if enable_dp_attention:
        if tp_size % dp_size:
            raise KvModelError("with enable_dp_attention, tp_size (%d) must be a multiple of dp_size (%d)"
                               % (tp_size, dp_size))
        return tp_size // dp_size  # compute_dp_attention_world_info: attn_tp = tp // dp
    return tp_size


def draft_layer_count(shape, speculative_algorithm, draft_layers=None):
    """D, the draft's KV layers SGLang >= 0.5.14 adds to the cell (spec_aux_hidden_state.py): the draft's
    num_nextn_predict_layers, else its num_hidden_layers. Defaults: NEXTN -> the target's num_nextn_predict_layers;
    EAGLE/EAGLE3 -> 1 (an EAGLE head is one decoder layer); STANDALONE needs draft_layers."""
    alg = _check_speculative(speculative_algorithm)
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


def _uses_hybrid_swa(shape, sglang_version):
    return shape.hybrid_swa_classic if kv_era(sglang_version) == "classic" else shape.hybrid_swa


def _mha_geometry(shape, attn_tp, elem, sglang_version):
    """(F, S): bytes per token per layer of a full and of a sliding-window layer (MHA)."""
    n = max(1, shape.num_kv_heads // attn_tp)
    if kv_era(sglang_version) == "classic":
        return n * shape.head_dim * 2 * elem, n * shape.head_dim * 2 * elem
    n_swa = max(1, shape.swa_num_kv_heads // attn_tp)
    return n * (shape.head_dim + shape.v_head_dim) * elem, n_swa * (shape.swa_head_dim + shape.swa_v_head_dim) * elem


def _nsa_indexer_bytes(shape, layers, sglang_version):
    """Indexer K + scales, uint8: (index_head_dim + index_head_dim // 128 * 4) per layer (quant_block_size 128);
    current code divides by index_kpool (ceil)."""
    per = shape.index_head_dim + shape.index_head_dim // 128 * 4
    if kv_era(sglang_version) == "current":
        per = -(-per // shape.index_kpool)
    return per * layers


def _mla_cell(shape, layers, kv_name, elem, sglang_version, dsa_kv_layout):
    rank, rope = shape.kv_lora_rank, shape.qk_rope_head_dim
    dim = rank + rope
    if shape.attention == "nsa" and kv_name == "fp8_e4m3" and _since(sglang_version, _V_DSA_FP8_LAYOUT) \
            and dsa_kv_layout != "raw":
        # calculate_mla_kv_cache_dim: fp8 nope + per-128 fp32 scales + bf16 rope (CUDA, non-trtllm DSA backends)
        dim = rank + rank // 128 * 4 + rope * 2
    cell = dim * layers * elem
    if kv_name in _FP4:
        cell = cell // 2 + (rank + rope) // 16 * layers * elem  # + kv_scale_buffer, block 16
    return cell


def _validate_geometry(shape):
    if shape.attention == "mha" and not shape.num_kv_heads:
        raise KvModelError("config.json gives no number of KV heads (num_key_value_heads / num_attention_heads)")


def _base_cell(shape, attn_tp, kv_name, elem, sglang_version, dsa_kv_layout, swa_full_tokens_ratio, draft):
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
        if _since(sglang_version, _V_MXFP8_SCALE):
            raise KvModelError(
                "kv_cache_dtype %s on an MHA model is not supported for SGLang >= 0.5.16: its cell comes from the FP4 "
                "recipe (scale layouts and dequant workspace chosen by the attention backend)" % kv_name)
        if hybrid:
            raise KvModelError("kv_cache_dtype %s with a hybrid sliding-window model is not supported" % kv_name)
        base = full_b * L
        return base // 2 + (n * shape.head_dim * L * 2 * elem) // 16, None
    mx = kv_name == "mxfp8" and _since(sglang_version, _V_MXFP8_SCALE)
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
    if _release(sglang_version) < _V_SWA_CONFIGURATOR:
        return full_b * nf + swa_b * ns, swa
    swa["draft_layers"] = draft
    if nf == 0:
        return swa_b * ns + full_b * draft, swa
    return full_b * (nf + draft) + swa_full_tokens_ratio * swa_b * ns, swa


def _cell_and_plan(shape, tp_size=1, dp_size=1, enable_dp_attention=False, kv_cache_dtype="auto",
                   sglang_version=None, speculative_algorithm=None, draft_layers=None,
                   swa_full_tokens_ratio=0.8, dsa_kv_layout="auto"):
    shape = model_shape(shape)
    _validate_geometry(shape)
    if sglang_version is not None:
        parse_version(sglang_version)
    attn_tp = _attn_tp(tp_size, dp_size, enable_dp_attention)
    kv_name, elem = resolve_kv_cache_dtype(kv_cache_dtype, shape)
    alg = _check_speculative(speculative_algorithm)
    r = checks.number("swa_full_tokens_ratio", swa_full_tokens_ratio, KvModelError)
    if not 0 < r <= 1:
        raise KvModelError("swa_full_tokens_ratio must be in (0, 1], got %r" % (swa_full_tokens_ratio,))
    if dsa_kv_layout not in ("auto", "raw", "scaled"):
        raise KvModelError("dsa_kv_layout %r is not one of: auto, raw, scaled" % (dsa_kv_layout,))
    draft_in_cell = alg in _EAGLE_FAMILY and kv_era(sglang_version) == "current"
    D = draft_layer_count(shape, alg, draft_layers) if draft_in_cell else 0
    hybrid = _uses_hybrid_swa(shape, sglang_version)
    cell, swa = _base_cell(shape, attn_tp, kv_name, elem, sglang_version, dsa_kv_layout, r, D if hybrid else 0)
    target_cell = cell if swa is None else None
    L = shape.num_layers
    if D and not hybrid:
        # DefaultPoolConfigurator: EAGLE/STANDALONE drafts share the target's per-layer KV size.
        if shape.attention == "nsa" and _since(sglang_version, _V_DSA_SPEC_SPLIT):
            indexer = _nsa_indexer_bytes(shape, L, sglang_version)
            cell += int((cell - indexer) * D / L) + _nsa_indexer_bytes(shape, D, sglang_version)
        elif _since(sglang_version, _V_SPEC_ADDITIVE):
            cell += int(cell * D / L)
        else:
            cell = int(cell * (1 + D / L))
    return cell, {"shape": shape, "kv_cache_dtype": kv_name, "kv_element_bytes": elem, "attn_tp": attn_tp,
                  "speculative_algorithm": alg, "draft_layers_in_cell": D, "swa": swa, "target_cell": target_cell}


def cell_size_bytes(shape, *, tp_size=1, dp_size=1, enable_dp_attention=False, kv_cache_dtype="auto",
                    sglang_version=None, speculative_algorithm=None, draft_layers=None,
                    swa_full_tokens_ratio=0.8, dsa_kv_layout="auto"):
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
    return _cell_and_plan(shape, tp_size, dp_size, enable_dp_attention, kv_cache_dtype, sglang_version,
                          speculative_algorithm, draft_layers, swa_full_tokens_ratio, dsa_kv_layout)[0]


# --------------------------------------------------------------------------------------------------------------
# Budget and tokens
# --------------------------------------------------------------------------------------------------------------

def kv_budget_gib(pre_load_free_gib, post_load_free_gib, mem_fraction_static):
    """A - P * (1 - f): the GiB the KV pool gets (negative: SGLang refuses to start)."""
    p, a, f = check_memory(pre_load_free_gib, post_load_free_gib, mem_fraction_static)
    return a - p * (1 - f)


def reserved_gib(pre_load_free_gib, mem_fraction_static):
    """P * (1 - f): what is left for CUDA graphs, activations, (mixin: draft) and allocator slack."""
    p = checks.number("pre_load_free_gib", pre_load_free_gib, KvModelError, above=0)
    f = checks.fraction("mem_fraction_static", mem_fraction_static, KvModelError)
    return p * (1 - f)


def min_mem_fraction_static(pre_load_free_gib, post_load_free_gib):
    """1 - A / P: the f at which the budget is 0 (SGLang >= 0.5.14 prints it as 'minimum viable')."""
    p, a = check_memory(pre_load_free_gib, post_load_free_gib)[:2]
    return 1 - a / p


def speculative_params(architecture=None, speculative_algorithm="EAGLE", speculative_num_steps=None,
                       speculative_eagle_topk=None, speculative_num_draft_tokens=None):
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


def eagle_headroom_tokens(max_running_requests=None, architecture=None, speculative_algorithm="EAGLE",
                          speculative_num_steps=None, speculative_eagle_topk=None, speculative_num_draft_tokens=None):
    """Classic (< 0.5.7) init_memory_pool: R*steps*topk + R*draft_tokens + 100 tokens added to the profiled count,
    outside the budget. R = --max-running-requests, which speculative decoding defaults to 48."""
    r = checks.integer("max_running_requests", 48 if max_running_requests is None else max_running_requests,
                       KvModelError, minimum=1)
    steps, topk, draft = speculative_params(architecture, speculative_algorithm, speculative_num_steps,
                                            speculative_eagle_topk, speculative_num_draft_tokens)
    return r * steps * topk + r * draft + 100


def _page_floor(tokens, page_size):
    return tokens // page_size * page_size


def _pool_sizes(budget_gib, cell, page_size=1, max_total_tokens=None, sglang_version=None,
                speculative_algorithm=None, max_running_requests=None, speculative_num_steps=None,
                speculative_eagle_topk=None, speculative_num_draft_tokens=None, architecture=None, swa=None):
    """max_total_num_tokens (full-attention tokens for hybrid SWA), swa tokens and classic headroom."""
    checks.integer("page_size", page_size, KvModelError, minimum=1)
    checks.integer("max_total_tokens", max_total_tokens, KvModelError, minimum=1, allow_none=True)
    budget = checks.number("budget_gib", budget_gib, KvModelError)
    if not (checks.is_number(cell) and cell > 0):
        raise KvModelError("cell_size_bytes must be a positive number, got %r" % (cell,))
    era = kv_era(sglang_version)
    alg = _check_speculative(speculative_algorithm)
    headroom = 0
    out = {"max_total_num_tokens": 0, "swa_max_total_num_tokens": None, "eagle_headroom_tokens": 0}
    if era == "classic":
        tokens = int(budget * GIB // cell)   # profile_max_num_token: int(rest * (1 << 30) // cell_size)
        if alg in _EAGLE_FAMILY:
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
    if not hybrid or era == "classic" or _release(sglang_version) < _V_SWA_CONFIGURATOR:
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
                out["swa_max_total_num_tokens"] = _page_floor(int(tokens * r), page_size)
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


def max_total_num_tokens(budget_gib, cell_size_bytes, *, page_size=1, max_total_tokens=None, sglang_version=None,
                         speculative_algorithm=None, max_running_requests=None, speculative_num_steps=None,
                         speculative_eagle_topk=None, speculative_num_draft_tokens=None, architecture=None):
    """Tokens the pool gets for a budget (GiB) and a cell (bytes), as SGLang logs max_total_num_tokens.

    int(budget * 2**30) // cell (classic: int(budget * 2**30 // cell)); classic + EAGLE family: + the headroom
    (eagle_headroom_tokens) outside the budget; then min(., max_total_tokens) (the cap can only shrink the pool),
    then rounded down to a multiple of page_size. A budget <= 0 gives 0 (SGLang refuses to start: init_oom), except
    that classic SGLang adds its EAGLE headroom even to a negative count. Hybrid sliding-window models: use capacity().
    """
    return _pool_sizes(budget_gib, cell_size_bytes, page_size, max_total_tokens, sglang_version, speculative_algorithm,
                       max_running_requests, speculative_num_steps, speculative_eagle_topk,
                       speculative_num_draft_tokens, architecture)["max_total_num_tokens"]


def _smallest_fraction(tokens_at, target, lo, hi):
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


_F_MAX = 1 - 2 ** -40   # the largest f considered: SGLang needs f < 1


def _round_up(f, resolution, tokens_at, target):
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


def mem_fraction_for_tokens(target_tokens, cell_size_bytes, pre_load_free_gib, post_load_free_gib, *, page_size=1,
                            resolution=None):
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

    def tokens_at(f):
        return max_total_num_tokens(a - p * (1 - f), cell_size_bytes, page_size=page_size)

    lo = max(0.0, 1 - a / p)
    f = _smallest_fraction(tokens_at, target, lo, _F_MAX)
    if f is None:
        raise KvModelError("target_tokens %d is out of reach: even mem_fraction_static -> 1 gives %d tokens "
                           "(A = %.2f GiB / %s bytes per token)" % (target, tokens_at(_F_MAX), a, cell_size_bytes))
    return _round_up(f, resolution, tokens_at, target)


# --------------------------------------------------------------------------------------------------------------
# SGLang's default --mem-fraction-static
# --------------------------------------------------------------------------------------------------------------

def gpu_memory_defaults(gpu_memory_mib, tp_size=1, sglang_version=None):
    """(chunked_prefill_size, cuda_graph_max_bs) SGLang picks from the GPU memory (nvidia-smi memory.total MiB,
    MIN over GPUs) when they are not set (CUDA; NPU tiers not modelled)."""
    if gpu_memory_mib is None:
        return 4096, 160
    mem = checks.number("gpu_memory_mib", gpu_memory_mib, KvModelError)
    small = tp_size < 4
    if mem < 20 * 1024:
        return 2048, 8
    if mem < 35 * 1024:
        if _since(sglang_version, _V_TIER35_AND_095):
            return 4096, 48 if small else 160
        return 2048, 24 if small else 80
    if mem < 60 * 1024:
        return 4096, 32 if small else 160
    if mem < 160 * 1024:
        return 8192, 256 if small else 512
    return 16384, 512


def _prefill_graph_sizes(max_bs):
    sizes = (list(range(4, 33, 4)) + list(range(48, 257, 16)) + list(range(288, 513, 32))
             + list(range(576, 1025, 64)) + list(range(1280, 4097, 256)) + list(range(4608, max_bs + 1, 512)))
    return [s for s in sizes if s <= max_bs]


def default_mem_fraction_static(gpu_memory_mib, tp_size=1, *, pp_size=1, dp_size=1, enable_dp_attention=False,
                                chunked_prefill_size=None, max_prefill_tokens=16384, cuda_graph_max_bs=None,
                                cuda_graph_bs=None, speculative_algorithm=None, max_running_requests=None,
                                max_total_tokens=None, shape=None, sglang_version=None):
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
    alg = _check_speculative(speculative_algorithm)
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
        if _since(sglang_version, _V_MRR_CAPS_BS) and max_running_requests is not None and bs > max_running_requests:
            bs = max_running_requests
    if gpu_memory_mib is None:
        return 0.95 if _since(sglang_version, _V_TIER35_AND_095) else 0.88
    gpu = checks.number("gpu_memory_mib", gpu_memory_mib, KvModelError, above=0)
    reserved = 512 + (max(cpf, 2048) if cpf > 0 else max(max_prefill_tokens, 2048)) * 1.5
    graph = bs * 2
    if enable_dp_attention:
        graph += bs * dp_size * 3
        if bs > 300:
            graph += bs * dp_size * 1.5
    mla = shape is not None and model_shape(shape).attention in ("mla", "nsa")
    if _since(sglang_version, _V_GRAPH_RESERVE):
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
        if alg is not None and not _since(sglang_version, _V_NO_SPEC_RESERVE):
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


# --------------------------------------------------------------------------------------------------------------
# Everything at once (the kv_capacity module)
# --------------------------------------------------------------------------------------------------------------

def mm_reservation_gib(shape, sglang_version=None, mm_feature_transport=None):
    """GiB a multimodal model reserves out of the KV budget (>= 0.5.18: SGLANG_VLM_CACHE_SIZE_MB = 100, plus
    SGLANG_MM_FEATURE_CACHE_MB = 1024 with the cuda_ipc/cuda_vmm feature transport); env overrides not modelled."""
    if not shape.is_vlm or not _since(sglang_version, _V_VLM_RESERVATION):
        return 0.0
    mib = 100
    if mm_feature_transport in ("cuda_ipc", "cuda_vmm"):
        mib += 1024
    return mib / 1024


def _observed_tokens(observed):
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


def _idle_headroom(f, p, a, mm, sizes_at, observed, free_after_start_gib, safety_margin_gib, issues):
    out = {"free_after_start_gib": None, "headroom_mem_fraction": None, "headroom_kv_budget_gib": None,
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
    out["headroom_mem_fraction"] = fh
    out["headroom_kv_budget_gib"] = round(a - p * (1 - fh) - mm, 4)
    out["headroom_tokens"] = sizes_at(fh)["max_total_num_tokens"]
    return out


def _hicache(tokens, cell, page_size, ranks, hicache_ratio, hicache_size_gb):
    """HostKVCache (memory_pool_host.py): size = int(device tokens * ratio), or int(size_gb * 1e9 // bytes per token);
    then (size // page + 1) * page. Host bytes per token = the target's per-token KV (no draft)."""
    out = {"hicache_host_tokens": None, "hicache_host_gib_per_rank": None, "hicache_host_gib_total": None}
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


def capacity(shape, mem_fraction_static, pre_load_free_gib, post_load_free_gib, *, tp_size=1, dp_size=1,
             enable_dp_attention=False, kv_cache_dtype="auto", page_size=1, sglang_version=None,
             target_tokens=None, max_total_tokens=None, speculative_algorithm=None, draft_layers=None,
             speculative_num_steps=None, speculative_eagle_topk=None, speculative_num_draft_tokens=None,
             max_running_requests=None, swa_full_tokens_ratio=0.8, dsa_kv_layout="auto", mm_feature_transport=None,
             observed=None, free_after_start_gib=None, safety_margin_gib=2.0, hicache_ratio=None, hicache_size_gb=None):
    """The KV pool SGLang builds for one model, server arguments, P, A and f; what f a target needs; and, with
    observed startup facts (the sglang_startup_facts module's result), how far the prediction is from the log.

    `shape` is a ModelShape or a config.json dict. Returns a dict (GiB rounded to 4 decimals):
    cell_size_bytes, kv_budget_gib (A - P*(1-f)), reserved_gib (P*(1-f)), mm_reservation_gib,
    max_total_num_tokens, swa_max_total_num_tokens (hybrid sliding-window models, else None), eagle_headroom_tokens
    (classic EAGLE), kv_pool_gib, kv_pools (independent pools: dp_size), total_kv_tokens, min_mem_fraction_static,
    mem_fraction_for_target (None without target_tokens or when out of reach), sglang_era, attention,
    kv_cache_dtype, issues (why SGLang would not start, why the target is out of reach); and with observed facts
    observed_tokens, predicted_tokens, prediction_error_pct ((predicted - observed) / observed * 100).

    Idle headroom (DESIGN's first prediction step): with m = free_after_start_gib (else the observed facts'
    post_capture_free_gib, else available_gpu_mem_gib), headroom_mem_fraction = f + (m - safety_margin_gib) / P,
    with headroom_kv_budget_gib and headroom_tokens at that f; None without m (an upper estimate: activations
    under load need part of m). HiCache what-if (hicache_ratio, or hicache_size_gb in 1e9 bytes as SGLang reads
    --hicache-size): hicache_host_tokens = int(tokens * ratio) (or size // bytes per token) rounded up to a page
    plus one, hicache_host_gib_per_rank and hicache_host_gib_total (all ranks of the host); it never enlarges the
    GPU pool.
    """
    p, a, f = check_memory(pre_load_free_gib, post_load_free_gib, mem_fraction_static)
    checks.integer("page_size", page_size, KvModelError, minimum=1)
    checks.integer("max_total_tokens", max_total_tokens, KvModelError, minimum=1, allow_none=True)
    checks.integer("target_tokens", target_tokens, KvModelError, minimum=1, allow_none=True)
    checks.integer("max_running_requests", max_running_requests, KvModelError, minimum=1, allow_none=True)
    cell, plan = _cell_and_plan(shape, tp_size, dp_size, enable_dp_attention, kv_cache_dtype, sglang_version,
                                speculative_algorithm, draft_layers, swa_full_tokens_ratio, dsa_kv_layout)
    shape = plan["shape"]
    mm = mm_reservation_gib(shape, sglang_version, mm_feature_transport)
    swa = plan["swa"]
    issues = []
    pool_args = dict(page_size=page_size, max_total_tokens=max_total_tokens, sglang_version=sglang_version,
                     speculative_algorithm=plan["speculative_algorithm"], max_running_requests=max_running_requests,
                     speculative_num_steps=speculative_num_steps, speculative_eagle_topk=speculative_eagle_topk,
                     speculative_num_draft_tokens=speculative_num_draft_tokens, architecture=shape.architecture,
                     swa=swa)

    def sizes_at(frac):
        return _pool_sizes(a - p * (1 - frac) - mm, cell, **pool_args)

    budget = a - p * (1 - f)
    sizes = sizes_at(f)
    tokens = sizes["max_total_num_tokens"]
    if tokens == 0:
        issues.append("the KV budget at mem_fraction_static=%r is %.3f GiB: SGLang refuses to start (raise "
                      "mem_fraction_static above %.4f)" % (f, budget - mm, 1 - (a - mm) / p))
    if swa is None:
        pool_bytes = tokens * cell
    else:
        full_layers = swa["full_layers"] + swa["draft_layers"]
        swa_tokens = sizes["swa_max_total_num_tokens"] or 0
        pool_bytes = (tokens * swa["full_bytes"] * full_layers + swa_tokens * swa["swa_bytes"] * swa["swa_layers"]
                      if swa["full_layers"] else swa_tokens * swa["swa_bytes"] * swa["swa_layers"])
    pools = dp_size if checks.is_integer(dp_size) else 1

    for_target = None
    if target_tokens is not None:
        def tokens_at(frac):
            return sizes_at(frac)["max_total_num_tokens"]
        for_target = _smallest_fraction(tokens_at, target_tokens, max(0.0, 1 - (a - mm) / p), _F_MAX)
        if for_target is None:
            reach = tokens_at(_F_MAX)
            why = ("max_total_tokens=%d caps the pool" % max_total_tokens
                   if max_total_tokens is not None and max_total_tokens < target_tokens
                   else "even mem_fraction_static -> 1 gives %d tokens" % reach)
            issues.append("target_tokens %d is out of reach: %s" % (target_tokens, why))

    result = {
        "sglang_era": kv_era(sglang_version),
        "attention": shape.attention,
        "kv_cache_dtype": plan["kv_cache_dtype"],
        "cell_size_bytes": cell if isinstance(cell, int) else round(cell, 3),
        "kv_budget_gib": round(budget, 4),
        "reserved_gib": round(p * (1 - f), 4),
        "mm_reservation_gib": round(mm, 4),
        "max_total_num_tokens": tokens,
        "swa_max_total_num_tokens": sizes["swa_max_total_num_tokens"],
        "eagle_headroom_tokens": sizes["eagle_headroom_tokens"],
        "kv_pool_gib": round(pool_bytes / GIB, 4),
        "kv_pools": pools,
        "total_kv_tokens": tokens * pools,
        "min_mem_fraction_static": round(max(0.0, 1 - (a - mm) / p), 6),
        "mem_fraction_for_target": for_target,
        "issues": issues,
    }
    result["mem_fraction_static"] = f
    result.update(_idle_headroom(f, p, a, mm, sizes_at, observed, free_after_start_gib, safety_margin_gib, issues))
    ranks = (tp_size if enable_dp_attention else tp_size * pools)
    result.update(_hicache(tokens, plan["target_cell"], page_size, ranks, hicache_ratio, hicache_size_gb))
    if observed:
        seen = _observed_tokens(observed)
        result["observed_tokens"] = seen
        result["predicted_tokens"] = tokens
        result["prediction_error_pct"] = (round((tokens - seen) / seen * 100, 4) if seen else None)
    return result

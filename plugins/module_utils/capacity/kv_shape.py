# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The model as the KV cache sees it: ``model_shape`` reads a Hugging Face config.json (a dict) into a ModelShape.

It follows the text config of multimodal models, resolves the model dtype as SGLang does, counts full and
sliding-window layers and the KV heads, reads the recurrent state of hybrid linear-attention models (Qwen3-Next and
Qwen3.5 Gated DeltaNet, Nemotron-H and Falcon-H1 Mamba2: ``LinearState``), and refuses the architectures whose pools
the KV model does not size (other linear-attention kinds, DeepSeek-V4 compressed attention). Reading the file is
model_config's job.
"""
from __future__ import annotations

from collections import namedtuple
from typing import Any

from ansible_collections.llmserve.sglang.plugins.module_utils import checks
from ansible_collections.llmserve.sglang.plugins.module_utils.capacity.kv_base import KvModelError

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
    "linear_state",             # LinearState of a hybrid linear-attention model, else None
    "sliding_window",           # the text config's sliding_window (None when absent)
])

# The per-request recurrent state of a hybrid linear-attention model, as SGLang's Mamba2StateShape.create takes it
# (configs/mamba_utils.py): one conv state (conv_dim / tp, conv_kernel - 1) and one SSM state
# (num_heads / tp, head_dim, state_size) per linear layer. num_layers of the ModelShape counts only the
# full-attention layers (the ones with a KV cache).
LinearState = namedtuple("LinearState", [
    "kind",                     # 'gdn' (Qwen3-Next, Qwen3.5) or 'mamba2' (Nemotron-H, Falcon-H1)
    "layers",                   # linear (state) layers
    "intermediate_size", "n_groups", "num_heads", "head_dim", "state_size", "conv_kernel",
    "ssm_dtype",                # config.json's mamba_ssm_dtype (None: SGLang's default)
])

# get_hf_text_config (current): thinker_config > llm_config > language_config > text_config
_TEXT_CONFIG_KEYS = ("thinker_config", "llm_config", "language_config", "text_config")
_STR_TO_DTYPE = {"half": "float16", "float16": "float16", "fp16": "float16", "float": "float32",
                 "float32": "float32", "bfloat16": "bfloat16", "bf16": "bfloat16"}
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
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


def _text_config(config: dict[str, Any]) -> tuple[Any, str | None]:
    for key in _TEXT_CONFIG_KEYS:
        sub = config.get(key)
        if isinstance(sub, dict):
            if key == "thinker_config" and isinstance(sub.get("text_config"), dict):
                return sub["text_config"], key + ".text_config"
            return sub, key
    return config, None


def _get(cfg: dict[str, Any], key: str, default: Any = None) -> Any:
    value = cfg.get(key, default)
    return default if value is None else value


def _int_field(cfg: dict[str, Any], key: str, where: str, required: bool = True, minimum: int = 1) -> Any:
    value = cfg.get(key)
    if value is None:
        if required:
            raise KvModelError("config.json%s has no %s" % (where, key))
        return None
    if not checks.is_integer(value) or value < minimum:
        raise KvModelError("config.json%s %s must be an integer >= %d, got %r" % (where, key, minimum, value))
    return value


def _resolve_model_dtype(text: dict[str, Any], config: dict[str, Any], dtype: str) -> str:
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


def _layer_split(text: Any, architecture: str, num_layers: int, where: str) -> tuple[int, int]:
    """(full_layers, swa_layers) from layer_types / hybrid_layer_pattern / Llama 4 / Gemma 2-3 conventions."""
    layer_types = text.get("layer_types")
    if isinstance(layer_types, list) and layer_types:
        types = [str(t) for t in layer_types[:num_layers]]  # linear/Mamba kinds are _linear_state's
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


_GDN_TYPES = ("qwen3_next", "qwen3_5_text", "qwen3_5_moe_text", "qwen3_5", "qwen3_5_moe")
_SSM_DTYPES = ("float32", "bfloat16", "float16")


def _linear_state(text: dict[str, Any], where: str) -> tuple[Any, int] | None:
    """(LinearState, full-attention layers) of a hybrid linear-attention text config, None for any other model;
    KvModelError for a linear-attention kind whose state SGLang sizes in a way this model does not cover."""
    model_type = str(text.get("model_type") or "")
    ssm = text.get("mamba_ssm_dtype")
    if ssm is not None and str(ssm).replace("torch.", "") not in _SSM_DTYPES:
        raise KvModelError("config.json%s mamba_ssm_dtype %r is not one of %s" % (where, ssm, ", ".join(_SSM_DTYPES)))
    ssm = str(ssm).replace("torch.", "") if ssm is not None else None
    if model_type in _GDN_TYPES or (text.get("full_attention_interval") and text.get("linear_num_value_heads")):
        layers = _int_field(text, "num_hidden_layers", where)
        interval = _int_field(text, "full_attention_interval", where)
        full = sum(1 for i in range(layers) if (i + 1) % interval == 0)  # Qwen3NextConfig.layers_block_type
        value_heads = _int_field(text, "linear_num_value_heads", where)
        value_dim = _int_field(text, "linear_value_head_dim", where)
        state = LinearState("gdn", layers - full, value_dim * value_heads, _int_field(text, "linear_num_key_heads", where),
                            value_heads, value_dim, _int_field(text, "linear_key_head_dim", where),
                            _int_field(text, "linear_conv_kernel_dim", where), ssm)
        return state, full
    if model_type.startswith("nemotron_h") or text.get("hybrid_override_pattern"):
        pattern = text.get("hybrid_override_pattern")
        if not isinstance(pattern, str) or not pattern:
            raise KvModelError("config.json%s has no hybrid_override_pattern (Nemotron-H's M/*/-/E layer string)" % where)
        heads, head_dim = _int_field(text, "mamba_num_heads", where), _int_field(text, "mamba_head_dim", where)
        state = LinearState("mamba2", pattern.count("M"), heads * head_dim, _int_field(text, "n_groups", where), heads,
                            head_dim, _int_field(text, "ssm_state_size", where), _int_field(text, "conv_kernel", where),
                            ssm)
        return state, pattern.count("*")
    if model_type.startswith("falcon_h1"):
        layers = _int_field(text, "num_hidden_layers", where)
        intermediate = text.get("mamba_d_ssm") or _int_field(text, "mamba_expand", where) * _int_field(
            text, "hidden_size", where)
        state = LinearState("mamba2", layers, intermediate, _int_field(text, "mamba_n_groups", where),
                            _int_field(text, "mamba_n_heads", where), _int_field(text, "mamba_d_head", where),
                            _int_field(text, "mamba_d_state", where), _int_field(text, "mamba_d_conv", where), ssm)
        return state, layers  # every Falcon-H1 layer has both attention and a Mamba mixer
    layer_types = text.get("layer_types")
    kinds = sorted(set(str(t) for t in layer_types)) if isinstance(layer_types, list) else []
    if model_type.startswith(("mamba", "jamba", "lfm2", "granitemoehybrid", "kimi_linear", "minimax")) \
            or text.get("mamba_d_ssm") or any("linear" in k or "mamba" in k or "conv" in k for k in kinds):
        raise KvModelError("config.json%s describes a hybrid linear-attention/Mamba model (model_type %r%s) whose "
                           "state pool is not modelled here (Qwen3-Next, Qwen3.5, Nemotron-H and Falcon-H1 are)"
                           % (where, model_type, ", layer_types %s" % kinds if kinds else ""))
    return None


def _kv_heads(text: dict[str, Any], config: dict[str, Any], where: str) -> int:
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


def model_shape(config: Any, dtype: str = "auto") -> Any:
    """Read what the KV cache depends on from a Hugging Face config.json (a dict), following text_config,
    language_config, llm_config or thinker_config for multimodal models. `dtype` is SGLang's --dtype.

    One function on purpose (93 lines): it reads the config in one order (compressed attention, the linear state of
    hybrid models, MLA and its indexer, the head sizes, the vision tower, KV quantization), each step using what the
    earlier ones found; the details of each are the helpers it calls."""
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
    linear = _linear_state(text, where)
    if linear is None:
        num_layers = _int_field(text, "num_hidden_layers", where)
        full_layers, swa_layers = _layer_split(text, architecture, num_layers, where)
    else:
        linear, num_layers = linear
        full_layers, swa_layers = num_layers, 0
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
        linear_state=linear,
        sliding_window=text.get("sliding_window") if checks.is_integer(text.get("sliding_window")) else None,
    )

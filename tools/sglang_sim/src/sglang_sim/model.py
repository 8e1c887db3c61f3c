# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A model directory as SGLang reads it: Hugging Face ``config.json`` plus ``model.safetensors.index.json``.

No weights are needed: the index's ``metadata.total_size`` (bytes of all tensors) gives the weights, and the rule
for one GPU is ``total_size / (tp_size * pp_size)``: SGLang shards every large tensor over the TP ranks (linear
layers, vocab-parallel embedding and LM head, MoE experts) and splits layers over PP stages. The few replicated
tensors (norms, MLA's small down-projections, the MoE router) are a fraction of a percent and are not modelled.

Shapes follow SGLang's ModelConfig: nested ``text_config`` for multimodal checkpoints; MLA when the config has
``kv_lora_rank`` (DeepSeek-V2/V3/R1, Kimi-K2); otherwise MHA/GQA with ``num_key_value_heads`` and ``head_dim``
(default hidden_size / num_attention_heads).

Hybrid Gated-DeltaNet models (SGLang's ``hybrid_gdn_config``: Qwen3-Next ``qwen3_next``, Qwen3.5 ``qwen3_5`` /
``qwen3_5_text``, Qwen3.5-MoE ``qwen3_5_moe`` / ``qwen3_5_moe_text``, top level or as ``text_config``): only the
full-attention layers have a KV cache; every other layer keeps a fixed per-request state (conv window + SSM matrix,
SGLang's MambaPool). The split is SGLang's ``Qwen3NextConfig.layers_block_type``: layer ``l`` is full attention iff
``(l + 1) % full_attention_interval == 0`` (default 4; ``layer_types`` is not what SGLang reads, it must agree). Other
hybrids (sliding-window ``layer_types``, Mamba2 models such as Nemotron-H/Falcon-H1) are refused.
"""
from __future__ import annotations

import json
import os

from sglang_sim.hostspec import SimConfigError

_DTYPES = {"bfloat16": "bfloat16", "float16": "float16", "half": "float16", "float32": "float32",
           "float": "float32"}
# model_type of the top-level config or of text_config -> a hybrid GDN (linear attention + full attention) model.
HYBRID_GDN_TYPES = ("qwen3_next", "qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text")
# The Qwen3.5 family (Qwen3_5Config, Qwen3_5MoeConfig): SGLang runs it from 0.5.9 on; Qwen3-Next from 0.5.2.
QWEN3_5_TYPES = ("qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text")
# Mamba state dtypes (mamba2_state_dtype's dtype_map): bytes per element.
STATE_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
_LINEAR_FIELDS = ("linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim",
                  "linear_conv_kernel_dim")


def _read_json(path: str, what: str) -> dict:
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except OSError as exc:
        raise SimConfigError("%s: cannot read %s: %s" % (path, what, exc.strerror or exc))
    except ValueError as exc:
        raise SimConfigError("%s is not valid JSON: %s" % (path, exc))
    if not isinstance(data, dict):
        raise SimConfigError("%s: %s is not a JSON object" % (path, what))
    return data


class Model:
    """What the memory arithmetic needs from one model directory."""

    def __init__(self, path: str, config: dict, total_size: int):
        self.path = path
        self.config = config
        text = config.get("text_config") or config.get("llm_config") or config
        self.text = text
        self.architecture = (config.get("architectures") or text.get("architectures") or ["UnknownForCausalLM"])[0]
        self.model_type = config.get("model_type")
        self.is_multimodal = "vision_config" in config
        self.vision_config = config.get("vision_config") or {}
        where = os.path.join(path, "config.json")
        try:
            self.num_layers = int(text["num_hidden_layers"])
            heads = int(text["num_attention_heads"])
        except (KeyError, TypeError, ValueError):
            raise SimConfigError("%s: num_hidden_layers and num_attention_heads are required" % where)
        self.hybrid_gdn = (config.get("model_type") in HYBRID_GDN_TYPES
                           or text.get("model_type") in HYBRID_GDN_TYPES)
        self.qwen3_5 = config.get("model_type") in QWEN3_5_TYPES or text.get("model_type") in QWEN3_5_TYPES
        self.full_attention_layer_ids = list(range(self.num_layers))
        self.linear_layer_ids = []
        if self.hybrid_gdn:
            self._read_linear_attention(text, where)
        elif text.get("layer_types") and any(kind != "full_attention" for kind in text["layer_types"]):
            raise SimConfigError("%s: hybrid sliding-window/linear-attention models are not simulated (only the "
                                 "hybrid Gated-DeltaNet models %s are)" % (where, ", ".join(HYBRID_GDN_TYPES)))
        self.hidden_size = int(text.get("hidden_size") or 0)
        self.vocab_size = int(text.get("vocab_size") or config.get("vocab_size") or 32000)
        self.kv_lora_rank = text.get("kv_lora_rank")
        self.attention = "mla" if self.kv_lora_rank else "mha"
        self.qk_rope_head_dim = int(text.get("qk_rope_head_dim") or 0)
        self.index_head_dim = text.get("index_head_dim")
        self.num_kv_heads = int(text.get("num_key_value_heads") or heads)
        self.head_dim = int(text.get("head_dim") or (self.hidden_size // heads if self.hidden_size else 128))
        self.v_head_dim = self.head_dim
        self.num_nextn_predict_layers = text.get("num_nextn_predict_layers")
        self.context_len = int(text.get("max_position_embeddings") or config.get("max_position_embeddings") or 2048)
        dtype = str(text.get("torch_dtype") or text.get("dtype") or config.get("torch_dtype")
                    or config.get("dtype") or "bfloat16")
        # SGLang's "auto" keeps fp16/bf16 and runs fp32 checkpoints in bf16.
        self.dtype = {"float32": "bfloat16"}.get(_DTYPES.get(dtype, "bfloat16"), _DTYPES.get(dtype, "bfloat16"))
        quant = config.get("quantization_config") or text.get("quantization_config") or {}
        self.quantization = quant if isinstance(quant, dict) else {}
        algo = self.quantization.get("kv_cache_quant_algo")
        self.kv_cache_quant_algo = algo.upper() if isinstance(algo, str) else None
        self.total_size = total_size

    def _read_linear_attention(self, text: dict, where: str):
        """The linear-attention (GDN) geometry of a hybrid model (Qwen3NextConfig's fields)."""
        try:
            for name in _LINEAR_FIELDS:
                value = int(text[name])
                if value <= 0:
                    raise ValueError(name)
                setattr(self, name, value)
            interval = int(text.get("full_attention_interval") or 4)
        except (KeyError, TypeError, ValueError):
            raise SimConfigError("%s: a hybrid linear-attention model (model_type %s) needs positive integers %s"
                                 % (where, text.get("model_type") or self.model_type, ", ".join(_LINEAR_FIELDS)))
        if interval <= 0:
            raise SimConfigError("%s: full_attention_interval must be positive, got %r" % (where, interval))
        kinds = ["full_attention" if (layer + 1) % interval == 0 else "linear_attention"
                 for layer in range(self.num_layers)]
        given = text.get("layer_types")
        if given is not None and list(given) != kinds:
            unknown = sorted(set(given) - {"full_attention", "linear_attention"})
            raise SimConfigError("%s: layer_types %s SGLang's layout (every full_attention_interval=%d-th layer is "
                                 "full attention, of %d layers)"
                                 % (where, "holds %s, not" % unknown if unknown else "disagrees with", interval,
                                    self.num_layers))
        self.full_attention_interval = interval
        self.full_attention_layer_ids = [layer for layer, kind in enumerate(kinds) if kind == "full_attention"]
        self.linear_layer_ids = [layer for layer, kind in enumerate(kinds) if kind == "linear_attention"]
        dtype = text.get("mamba_ssm_dtype", self.config.get("mamba_ssm_dtype"))
        # mamba2_state_dtype: an unknown value in the config is warned about and float32 used.
        self.config_mamba_ssm_dtype = dtype if dtype in STATE_DTYPE_BYTES else None

    @property
    def num_full_attention_layers(self) -> int:
        """Layers with a KV cache (all of them unless hybrid)."""
        return len(self.full_attention_layer_ids)

    @property
    def num_linear_layers(self) -> int:
        """Linear-attention (GDN) layers, each with a per-request conv + SSM state (0 unless hybrid)."""
        return len(self.linear_layer_ids)

    def mamba_state_shapes(self, tp_size: int, pad_groups: bool = True) -> tuple:
        """(conv shape, ssm shape) of one linear layer's state for one request on one rank, as
        Mamba2StateShape.create makes them (SGLang >= 0.5.4; ``pad_groups=False``: 0.5.2-0.5.3's
        hybrid_gdn_params, without the group padding): conv ``(conv_dim / tp, conv_kernel - 1)`` with
        ``conv_dim = linear_value_head_dim * linear_num_value_heads + 2 * n_groups * linear_key_head_dim``
        (n_groups = linear_num_key_heads, raised to tp when not divisible by it), ssm
        ``(linear_num_value_heads / tp, linear_value_head_dim, linear_key_head_dim)``. Raises SimConfigError where
        SGLang's ``divide`` asserts."""
        if not self.hybrid_gdn:
            return None
        groups = self.linear_num_key_heads
        if pad_groups and groups % tp_size:
            groups += tp_size - groups
        conv_dim = self.linear_value_head_dim * self.linear_num_value_heads + 2 * groups * self.linear_key_head_dim
        if conv_dim % tp_size or self.linear_num_value_heads % tp_size:
            raise SimConfigError("%s: the linear-attention state does not split over %d ranks (conv_dim %d, "
                                 "linear_num_value_heads %d): SGLang's divide() asserts"
                                 % (self.path, tp_size, conv_dim, self.linear_num_value_heads))
        return ((conv_dim // tp_size, self.linear_conv_kernel_dim - 1),
                (self.linear_num_value_heads // tp_size, self.linear_value_head_dim, self.linear_key_head_dim))

    def mamba_state_bytes(self, tp_size: int, ssm_bytes: int = 4, conv_bytes: int = 2,
                          pad_groups: bool = True) -> tuple:
        """(conv bytes, ssm bytes) one request's state takes on one rank over all linear layers: SGLang's
        ``mamba_cache_per_req`` is their sum (conv bf16, ssm float32 unless --mamba-ssm-dtype / the config's
        mamba_ssm_dtype say otherwise)."""
        conv, ssm = self.mamba_state_shapes(tp_size, pad_groups)
        layers = self.num_linear_layers
        return (conv[0] * conv[1] * conv_bytes * layers, ssm[0] * ssm[1] * ssm[2] * ssm_bytes * layers)

    def mamba_bytes_per_request(self, tp_size: int, ssm_bytes: int = 4, conv_bytes: int = 2,
                                pad_groups: bool = True) -> int:
        """SGLang's ``mamba_cache_per_req`` on one rank of ``tp_size`` (attention-TP) ranks; 0 unless hybrid."""
        if not self.hybrid_gdn:
            return 0
        return sum(self.mamba_state_bytes(tp_size, ssm_bytes, conv_bytes, pad_groups))

    def weight_bytes_per_rank(self, tp_size: int, pp_size: int = 1) -> int:
        """Bytes of weights one GPU holds: total_size / (tp * pp), rounded up."""
        ranks = tp_size * pp_size
        return -(-self.total_size // ranks)

    def layers_per_stage(self, pp_size: int) -> list:
        """Layers of each PP stage, as SGLang's get_pp_indices splits them (the remainder goes to the last ones)."""
        base, extra = divmod(self.num_layers, pp_size)
        return [base + (1 if stage >= pp_size - extra else 0) for stage in range(pp_size)]

    def quant_log_str(self) -> str | None:
        """``quant=<method>[, fmt=...]`` as current SGLang prints it in the Load weight end line."""
        if not self.quantization:
            return None
        text = "quant=%s" % self.quantization.get("quant_method", "quantized")
        for key in ("bits", "quant_algo", "fmt", "requantization_method"):
            if key in self.quantization:
                text += ", %s=%s" % (key, self.quantization[key])
        return text


def load_model(path: str) -> Model:
    """Read a model directory; errors name the directory and the missing file."""
    if not os.path.isdir(path):
        raise SimConfigError("model path %s is not a directory (the simulator needs a local directory holding "
                             "config.json and model.safetensors.index.json)" % path)
    config = _read_json(os.path.join(path, "config.json"), "config.json")
    index_path = os.path.join(path, "model.safetensors.index.json")
    index = _read_json(index_path, "the safetensors index")
    total = (index.get("metadata") or {}).get("total_size")
    if isinstance(total, bool) or not isinstance(total, int) or total <= 0:
        raise SimConfigError("%s: metadata.total_size must be a positive integer (bytes of all weights), got %r"
                             % (index_path, total))
    return Model(path, config, total)

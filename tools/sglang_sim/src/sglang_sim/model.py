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
"""
from __future__ import annotations

import json
import os

from sglang_sim.hostspec import SimConfigError

_DTYPES = {"bfloat16": "bfloat16", "float16": "float16", "half": "float16", "float32": "float32",
           "float": "float32"}


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
        if text.get("layer_types") and any(kind != "full_attention" for kind in text["layer_types"]):
            raise SimConfigError("%s: hybrid sliding-window/linear-attention models are not simulated" % where)
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

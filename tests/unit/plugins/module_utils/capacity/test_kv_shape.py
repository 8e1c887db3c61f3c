# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""kv_shape: what the KV cache depends on, read from real and synthetic config.json files (tests/fixtures/configs,
sources in SOURCES.md), and the configs it refuses."""
from __future__ import annotations

import pytest

from ansible_collections.llmserve.sglang.plugins.module_utils.capacity.kv_base import KvModelError
from ansible_collections.llmserve.sglang.plugins.module_utils.capacity.kv_cell import cell_size_bytes
from ansible_collections.llmserve.sglang.plugins.module_utils.capacity.kv_shape import model_shape


def test_vlm_follows_text_config(kimi):
    shape = model_shape(kimi)
    assert shape.architecture == "KimiK25ForConditionalGeneration"
    assert (shape.attention, shape.num_layers, shape.kv_lora_rank, shape.qk_rope_head_dim) == ("mla", 61, 512, 64)
    assert shape.is_vlm and shape.dtype == "bfloat16" and shape.num_nextn_predict_layers == 0


def test_language_config_and_parent_dtype(llama8b):
    cfg = {"architectures": ["SomeVLForConditionalGeneration"], "torch_dtype": "float16",
           "vision_config": {"num_hidden_layers": 48, "hidden_size": 1536},
           "language_config": {k: v for k, v in llama8b.items() if k != "torch_dtype"}}
    shape = model_shape(cfg)
    assert shape.dtype == "float16" and shape.is_vlm and shape.vision_num_layers == 48
    assert cell_size_bytes(cfg) == 131072


def test_dtype_auto_float32_becomes_float16_and_gemma_bfloat16(llama8b):
    cfg = dict(llama8b, torch_dtype="float32")
    assert model_shape(cfg).dtype == "float16"
    assert model_shape(dict(cfg, model_type="gemma2")).dtype == "bfloat16"
    assert model_shape({k: v for k, v in llama8b.items() if k != "torch_dtype"}).dtype == "float16"
    assert model_shape(llama8b, dtype="float32").dtype == "float32"
    assert cell_size_bytes(model_shape(llama8b, dtype="float32")) == 262144


@pytest.mark.parametrize("cfg,message", [
    ({"architectures": ["LlamaForCausalLM"], "num_attention_heads": 32}, r"config.json has no num_hidden_layers"),
    ({"architectures": ["X"], "text_config": {"num_attention_heads": 8}}, r"config.json text_config has no "
                                                                          r"num_hidden_layers"),
    ({"num_hidden_layers": 4}, r"has no head_dim, and no hidden_size"),
    ({"num_hidden_layers": "32", "head_dim": 128}, r"num_hidden_layers must be an integer >= 1, got '32'"),
    ({"num_hidden_layers": 4, "kv_lora_rank": 512, "head_dim": 64}, r"config.json has no qk_rope_head_dim"),
    ({"model_type": "qwen3_next", "num_hidden_layers": 48}, r"config.json has no full_attention_interval"),
    ({"num_hidden_layers": 2, "head_dim": 64, "layer_types": ["full_attention", "linear_attention"]},
     r"hybrid linear-attention/Mamba model .*whose state pool is not modelled"),
    ({"model_type": "kimi_linear", "num_hidden_layers": 2}, r"model_type 'kimi_linear'.* not modelled here"),
    ({"model_type": "nemotron_h", "num_hidden_layers": 2}, r"has no hybrid_override_pattern"),
    ({"model_type": "qwen3_next", "num_hidden_layers": 4, "full_attention_interval": 4, "linear_num_value_heads": 2,
      "linear_value_head_dim": 8, "linear_num_key_heads": 1, "linear_key_head_dim": 8, "linear_conv_kernel_dim": 4,
      "mamba_ssm_dtype": "int8"}, r"mamba_ssm_dtype 'int8' is not one of"),
    ({"num_hidden_layers": 43, "compress_ratios": [0, 4]}, r"DeepSeek-V4"),
    (["not", "a", "dict"], r"model config must be a JSON object \(dict\), got list"),
])
def test_model_shape_rejects(cfg, message):
    with pytest.raises(KvModelError, match=message):
        model_shape(cfg)


def test_an_unknown_config_dtype_is_an_error_not_a_guess():
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 2,
              "num_attention_heads": 8, "num_key_value_heads": 8, "hidden_size": 1024, "torch_dtype": "float7"}
    with pytest.raises(KvModelError, match="'float7' is not a torch dtype"):
        model_shape(config)
    config["torch_dtype"] = "float32"   # a real dtype SGLang maps to float16
    assert model_shape(config).dtype == "float16"

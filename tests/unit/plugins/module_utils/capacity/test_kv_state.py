# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The state pool of hybrid linear-attention models, era by era (kv_state's docstring has SGLang's rules)."""
from __future__ import annotations

import pytest

from ansible_collections.llmserve.sglang.plugins.module_utils.capacity.kv_base import GIB, KvModelError
from ansible_collections.llmserve.sglang.plugins.module_utils.capacity.kv_shape import model_shape
from ansible_collections.llmserve.sglang.plugins.module_utils.capacity.kv_state import state_bytes_per_request, state_slots

PER = 25755648  # Qwen3.5-9B at TP2 (test_real_log_predictions checks it against a real boot)
REST = 9.4940    # GiB: A - P * (1 - f) of that boot


@pytest.mark.parametrize("version, kwargs, slots, pad", [
    # 0.5.2 - 0.5.3: radix cache forced off: --max-mamba-cache-size, else --max-running-requests, else 512
    ("0.5.2", {}, 512, 0),
    ("0.5.3", {"max_running_requests": 64, "dp_size": 2}, 32, 0),
    # 0.5.4 - 0.5.6: the ratio path, which ignores --max-mamba-cache-size
    ("0.5.5", {}, int(REST * 0.9 / 1.9 * GIB // PER), 0),
    ("0.5.5", {"max_mamba_cache_size": 40}, int(REST * 0.9 / 1.9 * GIB // PER), 0),
    ("0.5.5", {"disable_radix_cache": True}, 512, 0),
    # Nemotron-H / Falcon-H1 turn radix cache off themselves before 0.5.7
    ("0.5.6", {"radix_forced_off": True, "max_running_requests": 100}, 100, 0),
    ("0.5.7", {"radix_forced_off": True}, int(REST * 0.9 / 1.9 * GIB // PER), 0),
    # 0.5.7 - 0.5.8: an explicit size is honoured
    ("0.5.8", {"max_mamba_cache_size": 40}, 40, 0),
    # 0.5.9 on: radix off without --max-running-requests takes the ratio path too
    ("0.5.9", {"disable_radix_cache": True}, int(REST * 0.9 / 1.9 * GIB // PER), 0),
    ("0.5.9", {"disable_radix_cache": True, "max_running_requests": 48}, 48, 0),
    ("0.5.12", {"ratio": 0.5}, int(REST * 0.5 / 1.5 * GIB // PER), 0),
    # 0.5.17 on: one padding slot
    ("0.5.17", {}, 186, 1),
    ("0.5.23", {"max_mamba_cache_size": 40}, 40, 1),
])
def test_state_slots_by_era(version, kwargs, slots, pad):
    got, gib = state_slots(REST, PER, version, **kwargs)
    assert got == slots
    assert gib == pytest.approx((slots + pad) * PER / GIB)


def test_a_budget_too_small_for_one_slot():
    slots, _gib = state_slots(0.01, PER, "0.5.17")
    assert slots <= 0


@pytest.mark.parametrize("cfg, tp, kind, layers, full, per_request", [
    # Nemotron-H: M = Mamba2 layer, * = attention; n_groups 8, 128 heads x 64, state 128, conv 4
    ({"model_type": "nemotron_h", "hybrid_override_pattern": "M-M*-M-M*-", "mamba_num_heads": 128,
      "mamba_head_dim": 64, "n_groups": 8, "ssm_state_size": 128, "conv_kernel": 4, "num_attention_heads": 40,
      "num_key_value_heads": 8, "head_dim": 128, "num_hidden_layers": 10},
     2, "mamba2", 4, 2, 4 * ((128 * 64 + 2 * 8 * 128) // 2 * 3 * 2 + 64 * 64 * 128 * 4)),
    # Falcon-H1: every layer has both; mamba_d_ssm absent: expand x hidden; 1 group raised to tp 2
    ({"model_type": "falcon_h1", "num_hidden_layers": 4, "hidden_size": 1024, "mamba_expand": 2, "mamba_n_groups": 1,
      "mamba_n_heads": 16, "mamba_d_head": 128, "mamba_d_state": 64, "mamba_d_conv": 4, "num_attention_heads": 8,
      "num_key_value_heads": 2, "head_dim": 128},
     2, "mamba2", 4, 4, 4 * ((2048 + 2 * 2 * 64) // 2 * 3 * 2 + 8 * 128 * 64 * 4)),
])
def test_mamba2_models(cfg, tp, kind, layers, full, per_request):
    shape = model_shape(cfg)
    assert shape.linear_state.kind == kind and shape.linear_state.layers == layers
    assert shape.num_layers == shape.full_attention_layers == full
    assert state_bytes_per_request(shape.linear_state, tp, "0.5.17") == per_request


def test_ssm_dtype_from_the_config_from_0_5_9_and_the_flag_first(qwen35):
    text = dict(qwen35["text_config"], mamba_ssm_dtype="bfloat16")
    state = model_shape({"architectures": ["Qwen3_5ForCausalLM"], "text_config": text}).linear_state
    fp32 = state_bytes_per_request(state, 2, "0.5.8")
    bf16 = state_bytes_per_request(state, 2, "0.5.9")
    assert fp32 - bf16 == 24 * 16 * 128 * 128 * 2
    assert state_bytes_per_request(state, 2, "0.5.9", mamba_ssm_dtype="float32") == fp32


def test_heads_that_tp_does_not_divide_are_refused(qwen35):
    state = model_shape(qwen35).linear_state
    with pytest.raises(KvModelError, match="not divisible by the attention TP size 3"):
        state_bytes_per_request(state, 3, "0.5.17")

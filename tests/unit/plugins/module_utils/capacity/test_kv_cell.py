# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""kv_cell: bytes per token on real configs (tests/fixtures/configs, sources in SOURCES.md) over KV cache dtypes,
attention kinds, TP/DP and speculative drafts."""
from __future__ import annotations

import copy

import pytest

from ansible_collections.llmserve.sglang.plugins.module_utils.capacity.kv_base import KvModelError
from ansible_collections.llmserve.sglang.plugins.module_utils.capacity.kv_cell import cell_size_bytes, resolve_kv_cache_dtype
from ansible_collections.llmserve.sglang.plugins.module_utils.capacity.kv_shape import model_shape


def deepseek_v32(deepseek):
    """DeepSeek-V3.2 = the V3 config plus the DSA indexer keys of its config.json (index_head_dim 128,
    index_n_heads 64, index_topk 2048) and its architecture name."""
    cfg = copy.deepcopy(deepseek)
    cfg.update(architectures=["DeepseekV32ForCausalLM"], model_type="deepseek_v32", index_head_dim=128,
               index_n_heads=64, index_topk=2048)
    return cfg


# ------------------------------------------------------------------------------------------------------------------
# Cell sizes
# ------------------------------------------------------------------------------------------------------------------

def test_llama_8b_bf16_tp1(llama8b):
    assert cell_size_bytes(llama8b) == 131072 == 8 * 256 * 32 * 2


def test_llama_70b_tp8(llama70b):
    assert cell_size_bytes(llama70b, tp_size=8) == 40960 == 1 * 256 * 80 * 2


@pytest.mark.parametrize("fp8", ["fp8_e4m3", "fp8_e5m2"])
def test_fp8_halves(llama8b, llama70b, deepseek, fp8):
    assert cell_size_bytes(llama8b, kv_cache_dtype=fp8) == 65536
    assert cell_size_bytes(llama70b, tp_size=8, kv_cache_dtype=fp8) == 20480
    assert cell_size_bytes(deepseek, tp_size=8, kv_cache_dtype=fp8) == 35136


def test_kv_heads_below_tp_are_replicated(llama70b):
    assert cell_size_bytes(llama70b, tp_size=16) == cell_size_bytes(llama70b, tp_size=8)


def test_dp_attention_divides_heads_over_tp_over_dp(llama70b):
    assert cell_size_bytes(llama70b, tp_size=8, dp_size=8, enable_dp_attention=True) == 8 * 256 * 80 * 2
    assert cell_size_bytes(llama70b, tp_size=8, dp_size=2, enable_dp_attention=True) == 2 * 256 * 80 * 2
    assert cell_size_bytes(llama70b, tp_size=8, dp_size=2) == 40960   # plain DP: replicas of TP8


def test_mla_is_not_divided_by_tp(deepseek):
    assert cell_size_bytes(deepseek, tp_size=1) == cell_size_bytes(deepseek, tp_size=8) == 70272


def test_kv_cache_quant_algo_fp8_makes_auto_fp8(llama8b):
    cfg = dict(llama8b, quantization_config={"quant_method": "modelopt", "kv_cache_quant_algo": "FP8"})
    assert resolve_kv_cache_dtype("auto", model_shape(cfg)) == ("fp8_e4m3", 1)
    assert cell_size_bytes(cfg) == 65536
    assert cell_size_bytes(cfg, kv_cache_dtype="bf16") == 131072


# init_memory_pool reads quant_config.kv_cache_quant_algo for "auto" from 0.5.3rc2 on; 0.5.3rc0 and 0.5.2 use the
# model dtype whatever the checkpoint says (grep kv_cache_quant_algo sglang/srt/model_executor/model_runner.py in the
# PyPI wheels 0.4.6.post5, 0.5.2, 0.5.3rc0: absent; 0.5.3rc2, 0.5.3 ... 0.5.14, 0.5.23 kv_cache_dtype.py: present;
# the branch executed from the wheels: tests/functional/test_sglang_wheel_sizing.py).
@pytest.mark.parametrize("version,expected", [
    ("0.4.6.post5", ("bfloat16", 2)), ("0.5.2", ("bfloat16", 2)), ("0.5.3rc0", ("bfloat16", 2)),
    ("0.5.3rc2", ("fp8_e4m3", 1)), ("0.5.3", ("fp8_e4m3", 1)), ("0.5.5.post3", ("fp8_e4m3", 1)),
    ("0.5.23", ("fp8_e4m3", 1)), (None, ("fp8_e4m3", 1)),
])
def test_checkpoint_fp8_kv_scales_follow_the_release(llama8b, version, expected):
    cfg = dict(llama8b, quantization_config={"quant_method": "modelopt", "kv_cache_quant_algo": "FP8"})
    assert resolve_kv_cache_dtype("auto", model_shape(cfg), version) == expected
    assert cell_size_bytes(cfg, sglang_version=version) == 8 * 128 * 2 * 32 * expected[1]


def test_classic_mha_ignores_v_head_dim(llama8b):
    cfg = dict(llama8b, head_dim=128, v_head_dim=64)
    assert cell_size_bytes(cfg, sglang_version="0.5.5.post3") == 8 * 128 * 2 * 32 * 2
    assert cell_size_bytes(cfg, sglang_version="0.5.7") == 8 * (128 + 64) * 32 * 2


def test_nsa_indexer_and_fp8_layout(deepseek):
    v32 = deepseek_v32(deepseek)
    indexer = (128 + 128 // 128 * 4) * 61
    assert model_shape(v32).attention == "nsa"
    assert cell_size_bytes(v32, tp_size=8, sglang_version="0.5.5.post3") == 70272 + indexer
    assert cell_size_bytes(v32, tp_size=8, kv_cache_dtype="fp8_e4m3", sglang_version="0.5.5.post3") == \
        576 * 61 + indexer
    # >= 0.5.17, fp8_e4m3: 512 fp8 + 512 // 128 * 4 scale bytes + 64 * 2 bf16 rope = 656 bytes per layer
    assert cell_size_bytes(v32, tp_size=8, kv_cache_dtype="fp8_e4m3", sglang_version="0.5.23") == \
        656 * 61 + indexer
    assert cell_size_bytes(v32, kv_cache_dtype="fp8_e4m3", dsa_kv_layout="raw") == 576 * 61 + indexer


def test_fp4(deepseek, llama8b):
    assert cell_size_bytes(deepseek, kv_cache_dtype="fp4_e2m1") == (576 * 61) // 2 + 576 // 16 * 61
    assert cell_size_bytes(deepseek, kv_cache_dtype="nvfp4") == 19764
    assert cell_size_bytes(llama8b, kv_cache_dtype="fp4_e2m1", sglang_version="0.5.5") == 65536 // 2 + 65536 // 16
    with pytest.raises(KvModelError, match="fp4_e2m1 on an MHA model is not supported for SGLang >= 0.5.16"):
        cell_size_bytes(llama8b, kv_cache_dtype="fp4_e2m1")


def test_mxfp8_scales_from_0_5_16(llama8b):
    assert cell_size_bytes(llama8b, kv_cache_dtype="mxfp8", sglang_version="0.5.12") == 65536
    assert cell_size_bytes(llama8b, kv_cache_dtype="mxfp8") == 65536 + 8 * 256 * 32 // 32


# ------------------------------------------------------------------------------------------------------------------
# Speculative decoding
# ------------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("version,cell", [
    ("0.5.5.post3", 70272),   # classic: headroom tokens instead
    ("0.5.9", 70272),         # mixin: the draft pool sits outside the budget
    ("0.5.16", 71424),        # int(cell * (1 + D / L))
    ("0.5.23", 71424),        # cell + int(cell * D / L)
])
def test_nextn_draft_layer_in_cell(deepseek, version, cell):
    assert cell_size_bytes(deepseek, tp_size=8, speculative_algorithm="NEXTN", sglang_version=version) == cell


def test_spec_cell_integer_arithmetic(llama8b, llama70b):
    assert cell_size_bytes(llama8b, speculative_algorithm="EAGLE3") == 131072 + 131072 // 32
    assert cell_size_bytes(llama70b, tp_size=8, speculative_algorithm="EAGLE", draft_layers=2) == \
        40960 + int(40960 * 2 / 80)
    assert cell_size_bytes(llama8b, speculative_algorithm="NGRAM") == 131072


def test_dsa_draft_from_0_5_18(deepseek):
    v32 = deepseek_v32(deepseek)
    got = cell_size_bytes(v32, tp_size=8, speculative_algorithm="NEXTN")
    assert got == 70272 + 132 * 61 + int(70272 * 1 / 61) + 132   # target + indexer + draft KV + draft indexer


# ------------------------------------------------------------------------------------------------------------------
# Bad inputs
# ------------------------------------------------------------------------------------------------------------------

def test_nextn_needs_mtp_layers(kimi):
    with pytest.raises(KvModelError, match="NEXTN needs num_nextn_predict_layers > 0"):
        cell_size_bytes(kimi, tp_size=8, speculative_algorithm="NEXTN")

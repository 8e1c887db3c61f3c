# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""kv_memory: SGLang's KV-cache arithmetic on real configs (tests/fixtures/configs, sources in SOURCES.md), the field
case from the DESIGN brief, the classic default-fraction table from reference/sglang-memory.md, and bad inputs."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from ansible_collections.llmserve.sglang.plugins.module_utils import kv_memory as kv

KvModelError = kv.KvModelError
CONFIGS = Path(__file__).resolve().parents[3] / "fixtures" / "configs"
GIB = 2 ** 30


def config(name):
    return json.loads((CONFIGS / name).read_text())


@pytest.fixture(scope="module")
def deepseek():
    return config("deepseek-v3.json")


@pytest.fixture(scope="module")
def kimi():
    return config("kimi-k2.5-int4.json")


@pytest.fixture(scope="module")
def llama8b():
    return config("llama-3.1-8b.json")


@pytest.fixture(scope="module")
def llama70b():
    return config("llama-3.1-70b.json")


def deepseek_v32(deepseek):
    """DeepSeek-V3.2 = the V3 config plus the DSA indexer keys of its config.json (index_head_dim 128,
    index_n_heads 64, index_topk 2048) and its architecture name."""
    cfg = copy.deepcopy(deepseek)
    cfg.update(architectures=["DeepseekV32ForCausalLM"], model_type="deepseek_v32", index_head_dim=128,
               index_n_heads=64, index_topk=2048)
    return cfg


# A synthetic hybrid sliding-window model shaped like gpt-oss-120b (36 layers alternating sliding/full, 8 KV heads of
# 64); only the fields the KV model reads.
GPT_OSS_LIKE = {"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "num_hidden_layers": 36,
                "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64, "hidden_size": 2880,
                "sliding_window": 128, "layer_types": ["sliding_attention", "full_attention"] * 18,
                "torch_dtype": "bfloat16"}

# ------------------------------------------------------------------------------------------------------------------
# The field case: Kimi-K2.5 INT4 (DeepSeek-V3 architecture), TP8, bf16 KV, f=0.88, P=94.04, A=21.71, EAGLE-3
# "KV Cache is allocated. #tokens: 159277, KV size: 10.42 GB"
# ------------------------------------------------------------------------------------------------------------------

FIELD = dict(mem_fraction_static=0.88, pre_load_free_gib=94.04, post_load_free_gib=21.71, tp_size=8,
             speculative_algorithm="EAGLE3", speculative_num_steps=3, speculative_eagle_topk=1,
             speculative_num_draft_tokens=4)
FIELD_LOGGED_TOKENS = 159277


def test_field_case_cell_and_budget(kimi, deepseek):
    assert kv.cell_size_bytes(kimi, tp_size=8) == 70272 == (512 + 64) * 61 * 2
    assert kv.cell_size_bytes(deepseek, tp_size=8) == 70272          # the same text model
    assert kv.kv_budget_gib(94.04, 21.71, 0.88) == pytest.approx(10.4252, abs=1e-9)
    assert kv.reserved_gib(94.04, 0.88) == pytest.approx(11.2848, abs=1e-9)


def test_field_case_reproduces_logged_tokens_on_the_mixin_path(kimi):
    """The path: SGLang 0.5.7 - 0.5.13 (the field server ran model_runner_kv_cache_mixin.py, whose
    profile_max_num_token starts at line 116 as in 0.5.9): no EAGLE headroom, the EAGLE-3 draft's KV outside the
    budget. Predicted 159294 against the logged 159277: +17 tokens, +0.0107 % (P and A are logged to 0.01 GB)."""
    r = kv.capacity(kimi, sglang_version="0.5.9", observed={"kv_tokens": FIELD_LOGGED_TOKENS}, **FIELD)
    assert r["sglang_era"] == "mixin"
    assert r["cell_size_bytes"] == 70272
    assert r["eagle_headroom_tokens"] == 0
    assert r["max_total_num_tokens"] == 159294
    assert r["observed_tokens"] == FIELD_LOGGED_TOKENS
    assert r["prediction_error_pct"] == pytest.approx(0.0107, abs=1e-4)
    assert abs(r["prediction_error_pct"]) < 0.1
    # SGLang logs the allocated size of (tokens + 1 page) rows: 10.42 GB
    assert round((FIELD_LOGGED_TOKENS + 1) * 70272 / GIB, 2) == 10.42
    assert r["kv_pool_gib"] == pytest.approx(10.4251, abs=1e-4)


def test_field_case_classic_path_adds_eagle_headroom_outside_the_budget(kimi):
    """Classic (< 0.5.7) would have logged profiled + R*steps*topk + R*draft + 100 = 159294 + 48*3 + 48*4 + 100."""
    r = kv.capacity(kimi, sglang_version="0.5.5.post3", observed={"kv_tokens": FIELD_LOGGED_TOKENS}, **FIELD)
    assert r["sglang_era"] == "classic"
    assert r["eagle_headroom_tokens"] == 436
    assert r["max_total_num_tokens"] == 159294 + 436
    assert r["prediction_error_pct"] == pytest.approx(0.2844, abs=1e-4)


def test_field_case_current_path_counts_the_draft_and_the_vlm_reservation(kimi):
    """0.5.23: cell + int(cell * 1 / 61) = 71424 and 100 MiB reserved for the VLM: 155257, -2.5 % off the log,
    which shows the field server was not running current code."""
    r = kv.capacity(kimi, sglang_version="0.5.23", observed={"kv_tokens": FIELD_LOGGED_TOKENS}, **FIELD)
    assert r["cell_size_bytes"] == 71424
    assert r["mm_reservation_gib"] == pytest.approx(100 / 1024, abs=1e-4)
    assert r["max_total_num_tokens"] == (int((10.4252 - 100 / 1024) * GIB)) // 71424 == 155257
    assert r["prediction_error_pct"] < -2


def test_field_case_inverse(kimi):
    """What f gives 250000 tokens on the field host (mixin path), and it round-trips."""
    r = kv.capacity(kimi, sglang_version="0.5.9", target_tokens=250000, **FIELD)
    f = r["mem_fraction_for_target"]
    assert 0.943 < f < 0.9432
    args = dict(FIELD, sglang_version="0.5.9")
    args["mem_fraction_static"] = f
    assert kv.capacity(kimi, **args)["max_total_num_tokens"] >= 250000
    args["mem_fraction_static"] = f - 1e-9
    assert kv.capacity(kimi, **args)["max_total_num_tokens"] < 250000


# ------------------------------------------------------------------------------------------------------------------
# Cell sizes
# ------------------------------------------------------------------------------------------------------------------

def test_llama_8b_bf16_tp1(llama8b):
    assert kv.cell_size_bytes(llama8b) == 131072 == 8 * 256 * 32 * 2


def test_llama_70b_tp8(llama70b):
    assert kv.cell_size_bytes(llama70b, tp_size=8) == 40960 == 1 * 256 * 80 * 2


@pytest.mark.parametrize("fp8", ["fp8_e4m3", "fp8_e5m2"])
def test_fp8_halves(llama8b, llama70b, deepseek, fp8):
    assert kv.cell_size_bytes(llama8b, kv_cache_dtype=fp8) == 65536
    assert kv.cell_size_bytes(llama70b, tp_size=8, kv_cache_dtype=fp8) == 20480
    assert kv.cell_size_bytes(deepseek, tp_size=8, kv_cache_dtype=fp8) == 35136


def test_kv_heads_below_tp_are_replicated(llama70b):
    assert kv.cell_size_bytes(llama70b, tp_size=16) == kv.cell_size_bytes(llama70b, tp_size=8)


def test_dp_attention_divides_heads_over_tp_over_dp(llama70b):
    assert kv.cell_size_bytes(llama70b, tp_size=8, dp_size=8, enable_dp_attention=True) == 8 * 256 * 80 * 2
    assert kv.cell_size_bytes(llama70b, tp_size=8, dp_size=2, enable_dp_attention=True) == 2 * 256 * 80 * 2
    assert kv.cell_size_bytes(llama70b, tp_size=8, dp_size=2) == 40960   # plain DP: replicas of TP8


def test_mla_is_not_divided_by_tp(deepseek):
    assert kv.cell_size_bytes(deepseek, tp_size=1) == kv.cell_size_bytes(deepseek, tp_size=8) == 70272


def test_vlm_follows_text_config(kimi):
    shape = kv.model_shape(kimi)
    assert shape.architecture == "KimiK25ForConditionalGeneration"
    assert (shape.attention, shape.num_layers, shape.kv_lora_rank, shape.qk_rope_head_dim) == ("mla", 61, 512, 64)
    assert shape.is_vlm and shape.dtype == "bfloat16" and shape.num_nextn_predict_layers == 0


def test_language_config_and_parent_dtype(llama8b):
    cfg = {"architectures": ["SomeVLForConditionalGeneration"], "torch_dtype": "float16",
           "vision_config": {"num_hidden_layers": 48, "hidden_size": 1536},
           "language_config": {k: v for k, v in llama8b.items() if k != "torch_dtype"}}
    shape = kv.model_shape(cfg)
    assert shape.dtype == "float16" and shape.is_vlm and shape.vision_num_layers == 48
    assert kv.cell_size_bytes(cfg) == 131072


def test_dtype_auto_float32_becomes_float16_and_gemma_bfloat16(llama8b):
    cfg = dict(llama8b, torch_dtype="float32")
    assert kv.model_shape(cfg).dtype == "float16"
    assert kv.model_shape(dict(cfg, model_type="gemma2")).dtype == "bfloat16"
    assert kv.model_shape({k: v for k, v in llama8b.items() if k != "torch_dtype"}).dtype == "float16"
    assert kv.model_shape(llama8b, dtype="float32").dtype == "float32"
    assert kv.cell_size_bytes(kv.model_shape(llama8b, dtype="float32")) == 262144


def test_kv_cache_quant_algo_fp8_makes_auto_fp8(llama8b):
    cfg = dict(llama8b, quantization_config={"quant_method": "modelopt", "kv_cache_quant_algo": "FP8"})
    assert kv.resolve_kv_cache_dtype("auto", kv.model_shape(cfg)) == ("fp8_e4m3", 1)
    assert kv.cell_size_bytes(cfg) == 65536
    assert kv.cell_size_bytes(cfg, kv_cache_dtype="bf16") == 131072


def test_classic_mha_ignores_v_head_dim(llama8b):
    cfg = dict(llama8b, head_dim=128, v_head_dim=64)
    assert kv.cell_size_bytes(cfg, sglang_version="0.5.5.post3") == 8 * 128 * 2 * 32 * 2
    assert kv.cell_size_bytes(cfg, sglang_version="0.5.7") == 8 * (128 + 64) * 32 * 2


def test_nsa_indexer_and_fp8_layout(deepseek):
    v32 = deepseek_v32(deepseek)
    indexer = (128 + 128 // 128 * 4) * 61
    assert kv.model_shape(v32).attention == "nsa"
    assert kv.cell_size_bytes(v32, tp_size=8, sglang_version="0.5.5.post3") == 70272 + indexer
    assert kv.cell_size_bytes(v32, tp_size=8, kv_cache_dtype="fp8_e4m3", sglang_version="0.5.5.post3") == \
        576 * 61 + indexer
    # >= 0.5.17, fp8_e4m3: 512 fp8 + 512 // 128 * 4 scale bytes + 64 * 2 bf16 rope = 656 bytes per layer
    assert kv.cell_size_bytes(v32, tp_size=8, kv_cache_dtype="fp8_e4m3", sglang_version="0.5.23") == \
        656 * 61 + indexer
    assert kv.cell_size_bytes(v32, kv_cache_dtype="fp8_e4m3", dsa_kv_layout="raw") == 576 * 61 + indexer


def test_fp4(deepseek, llama8b):
    assert kv.cell_size_bytes(deepseek, kv_cache_dtype="fp4_e2m1") == (576 * 61) // 2 + 576 // 16 * 61
    assert kv.cell_size_bytes(deepseek, kv_cache_dtype="nvfp4") == 19764
    assert kv.cell_size_bytes(llama8b, kv_cache_dtype="fp4_e2m1", sglang_version="0.5.5") == 65536 // 2 + 65536 // 16
    with pytest.raises(KvModelError, match="fp4_e2m1 on an MHA model is not supported for SGLang >= 0.5.16"):
        kv.cell_size_bytes(llama8b, kv_cache_dtype="fp4_e2m1")


def test_mxfp8_scales_from_0_5_16(llama8b):
    assert kv.cell_size_bytes(llama8b, kv_cache_dtype="mxfp8", sglang_version="0.5.12") == 65536
    assert kv.cell_size_bytes(llama8b, kv_cache_dtype="mxfp8") == 65536 + 8 * 256 * 32 // 32


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
    assert kv.cell_size_bytes(deepseek, tp_size=8, speculative_algorithm="NEXTN", sglang_version=version) == cell


def test_spec_cell_integer_arithmetic(llama8b, llama70b):
    assert kv.cell_size_bytes(llama8b, speculative_algorithm="EAGLE3") == 131072 + 131072 // 32
    assert kv.cell_size_bytes(llama70b, tp_size=8, speculative_algorithm="EAGLE", draft_layers=2) == \
        40960 + int(40960 * 2 / 80)
    assert kv.cell_size_bytes(llama8b, speculative_algorithm="NGRAM") == 131072


def test_dsa_draft_from_0_5_18(deepseek):
    v32 = deepseek_v32(deepseek)
    got = kv.cell_size_bytes(v32, tp_size=8, speculative_algorithm="NEXTN")
    assert got == 70272 + 132 * 61 + int(70272 * 1 / 61) + 132   # target + indexer + draft KV + draft indexer


def test_classic_eagle_headroom_defaults():
    # STANDALONE and DeepSeek: (3, 1, 4); others (5, 4, 8); R defaults to 48
    assert kv.eagle_headroom_tokens(architecture="DeepseekV3ForCausalLM") == 48 * 3 + 48 * 4 + 100
    assert kv.eagle_headroom_tokens(architecture="LlamaForCausalLM") == 48 * 5 * 4 + 48 * 8 + 100
    assert kv.eagle_headroom_tokens(max_running_requests=64, speculative_num_steps=2, speculative_eagle_topk=1,
                                    speculative_num_draft_tokens=9) == 64 * 2 + 64 * 3 + 100  # topk 1: draft=steps+1


# ------------------------------------------------------------------------------------------------------------------
# Tokens, cap, pages, the inverse
# ------------------------------------------------------------------------------------------------------------------

def test_tokens_formula():
    budget = kv.kv_budget_gib(94.04, 21.71, 0.88)
    assert kv.max_total_num_tokens(budget, 70272) == int(budget * GIB) // 70272 == 159294


def test_cap_only_shrinks_and_page_rounding():
    budget = kv.kv_budget_gib(94.04, 21.71, 0.88)
    assert kv.max_total_num_tokens(budget, 70272, max_total_tokens=100000) == 100000
    assert kv.max_total_num_tokens(budget, 70272, max_total_tokens=10 ** 9) == 159294
    assert kv.max_total_num_tokens(budget, 70272, page_size=64) == 159294 // 64 * 64 == 159232
    assert kv.max_total_num_tokens(budget, 70272, page_size=64, max_total_tokens=100001) == 99968


@pytest.mark.parametrize("budget", [0.0, -0.5, -30.0])
def test_no_budget_gives_zero_tokens(budget):
    assert kv.max_total_num_tokens(budget, 70272) == 0
    assert kv.max_total_num_tokens(budget, 70272, sglang_version="0.5.5") == 0


def test_zero_budget_in_capacity_warns(deepseek):
    r = kv.capacity(deepseek, 0.5, 94.04, 21.71, tp_size=8)
    assert r["max_total_num_tokens"] == 0 and r["kv_budget_gib"] < 0
    assert "refuses to start" in r["issues"][0]


def test_min_mem_fraction_static():
    f = kv.min_mem_fraction_static(94.04, 21.71)
    assert f == pytest.approx(1 - 21.71 / 94.04)
    assert kv.kv_budget_gib(94.04, 21.71, f) == pytest.approx(0, abs=1e-12)
    assert kv.max_total_num_tokens(kv.kv_budget_gib(94.04, 21.71, f - 1e-6), 70272) == 0
    assert kv.max_total_num_tokens(kv.kv_budget_gib(94.04, 21.71, f + 1e-3), 70272) > 0


@pytest.mark.parametrize("target", [1, 1000, 159277, 250000, 480000])
@pytest.mark.parametrize("page", [1, 16, 64])
@pytest.mark.parametrize("cell", [70272, 40960, 131072])
def test_inverse_round_trips_to_the_token(target, page, cell):
    p, a = 140.0, 60.0
    f = kv.mem_fraction_for_tokens(target, cell, p, a, page_size=page)
    got = kv.max_total_num_tokens(kv.kv_budget_gib(p, a, f), cell, page_size=page)
    assert got >= target
    assert got - target < page + max(1, int(p * 2e-15 * GIB / cell) + 1)   # within one page (and float ulp)
    lower = kv.max_total_num_tokens(kv.kv_budget_gib(p, a, f - 1e-12), cell, page_size=page)
    assert lower < target


def test_inverse_resolution_rounds_up():
    f = kv.mem_fraction_for_tokens(159277, 70272, 94.04, 21.71, resolution=0.001)
    assert f == 0.88
    assert kv.mem_fraction_for_tokens(159295, 70272, 94.04, 21.71, resolution=0.001) == 0.881


def test_inverse_out_of_reach():
    with pytest.raises(KvModelError, match="out of reach"):
        kv.mem_fraction_for_tokens(10 ** 7, 70272, 94.04, 21.71)


def test_capacity_target_blocked_by_cap(deepseek):
    r = kv.capacity(deepseek, 0.88, 94.04, 21.71, tp_size=8, target_tokens=200000, max_total_tokens=150000)
    assert r["mem_fraction_for_target"] is None
    assert "max_total_tokens=150000 caps the pool" in r["issues"][0]


# ------------------------------------------------------------------------------------------------------------------
# Hybrid sliding-window models
# ------------------------------------------------------------------------------------------------------------------

def test_hybrid_swa_current():
    budget = kv.kv_budget_gib(78.9, 66.0, 0.85)
    F = S = 8 * 128 * 2            # bytes per token per layer
    cell = F * 18 + 0.8 * S * 18   # HybridSWAPoolConfigurator
    assert kv.cell_size_bytes(GPT_OSS_LIKE) == pytest.approx(cell)
    r = kv.capacity(GPT_OSS_LIKE, 0.85, 78.9, 66.0, page_size=16)
    full = int(int(budget * GIB) // cell) // 16 * 16
    assert r["max_total_num_tokens"] == full
    assert r["swa_max_total_num_tokens"] == int(full * 0.8) // 16 * 16
    assert r["kv_pool_gib"] == pytest.approx((full * F * 18 + r["swa_max_total_num_tokens"] * S * 18) / GIB, abs=1e-4)


def test_hybrid_swa_classic_and_mixin():
    budget = kv.kv_budget_gib(78.9, 66.0, 0.85)
    plain = 8 * 64 * 2 * 2 * 36
    profiled = int(budget * GIB // plain)
    classic = kv.capacity(GPT_OSS_LIKE, 0.85, 78.9, 66.0, sglang_version="0.5.5")
    assert classic["cell_size_bytes"] == plain
    assert classic["max_total_num_tokens"] == int(profiled * 36 / (0.8 * 18 + 18))
    mixin = kv.capacity(GPT_OSS_LIKE, 0.85, 78.9, 66.0, sglang_version="0.5.9")
    assert mixin["max_total_num_tokens"] == int(profiled * plain / (2048 * 18 + 0.8 * 2048 * 18))


def test_gemma3_is_hybrid_only_for_classic():
    gemma3 = {"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "num_hidden_layers": 12,
              "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "sliding_window": 512,
              "sliding_window_pattern": 6, "torch_dtype": "bfloat16"}
    shape = kv.model_shape(gemma3)
    assert (shape.full_attention_layers, shape.swa_layers) == (2, 10)
    assert shape.hybrid_swa_classic and not shape.hybrid_swa
    assert kv.capacity(gemma3, 0.8, 20.0, 15.0)["swa_max_total_num_tokens"] is None
    assert kv.capacity(gemma3, 0.8, 20.0, 15.0, sglang_version="0.5.5")["swa_max_total_num_tokens"] > 0


# ------------------------------------------------------------------------------------------------------------------
# Versions
# ------------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("version,classic,era", [
    ("0.4.10", True, "classic"), ("0.5.5", True, "classic"), ("0.5.5.post3", True, "classic"),
    ("0.5.6rc1", True, "classic"), ("0.5.6.post2", True, "classic"),   # 0.5.6.x still adds the EAGLE headroom
    ("0.5.7", False, "mixin"), ("0.5.7rc1", False, "mixin"), ("v0.5.9", False, "mixin"),
    ("0.5.10.dev0+gabc123", False, "mixin"), ("0.5.14", False, "current"), ("0.5.23", False, "current"),
    ("0.6.0", False, "current"), (None, False, "current"),
])
def test_eras(version, classic, era):
    assert kv.is_classic(version) is classic
    assert kv.kv_era(version) == era


def test_version_order():
    ordered = ["0.4.10", "0.5.5", "0.5.5.post3", "0.5.6rc1", "0.5.6", "0.5.6.post1", "0.5.7.dev0", "0.5.7",
               "0.5.10", "0.5.23"]
    for lo, hi in zip(ordered, ordered[1:]):
        assert kv.compare_versions(lo, hi) == -1, (lo, hi)
        assert kv.compare_versions(hi, lo) == 1
    assert kv.compare_versions("0.5.9", "v0.5.9") == 0


@pytest.mark.parametrize("bad", ["banana", "", "0.5.x", "latest"])
def test_bad_version(bad):
    with pytest.raises(KvModelError, match="sglang_version"):
        kv.kv_era(bad)


# ------------------------------------------------------------------------------------------------------------------
# SGLang's default --mem-fraction-static
# ------------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("gpu_mib,tp,eagle,expected", [   # reference/sglang-memory.md section 2 (classic)
    (23034, 1, False, 0.837), (23034, 8, False, 0.793), (23034, 1, True, 0.748), (23034, 8, True, 0.704),
    (40960, 1, False, 0.833), (40960, 8, False, 0.805), (40960, 1, True, 0.783), (40960, 8, True, 0.755),
    (81559, 1, False, 0.835), (81559, 8, False, 0.818), (81559, 1, True, 0.810), (81559, 8, True, 0.793),
    (143771, 1, False, 0.907), (143771, 8, False, 0.897), (143771, 1, True, 0.892), (143771, 8, True, 0.882),
])
def test_default_mem_fraction_classic_table(gpu_mib, tp, eagle, expected):
    got = kv.default_mem_fraction_static(gpu_mib, tp, speculative_algorithm="EAGLE" if eagle else None,
                                         sglang_version="0.5.5.post3")
    assert got == expected


def test_default_mem_fraction_other_rules(llama8b, kimi):
    # no nvidia-smi: 0.88, 0.95 from 0.5.20
    assert kv.default_mem_fraction_static(None, sglang_version="0.5.5") == 0.88
    assert kv.default_mem_fraction_static(None) == 0.95
    # 0.5.14 dropped the speculative reserve
    assert kv.default_mem_fraction_static(81559, 1, speculative_algorithm="EAGLE", sglang_version="0.5.14") == 0.835
    # current H100 TP1, Llama: 512 + 8192*1.5 + 128 + 256*2 + 58 prefill graph sizes * 8 = 13904 MiB
    assert kv.default_mem_fraction_static(81559, 1, shape=llama8b) == round((81559 - 13904) / 81559, 3) == 0.83
    # VLM factor 0.95 * clamp(...): Kimi's vision_config has vt_* keys, so 24 layers x 1024 -> ratio 1
    assert kv.default_mem_fraction_static(143771, 8, speculative_algorithm="EAGLE3", shape=kimi,
                                          sglang_version="0.5.9") == pytest.approx(0.882 * 0.95)


# ------------------------------------------------------------------------------------------------------------------
# Bad inputs
# ------------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs,message", [
    (dict(kv_cache_dtype="fp9"), r"kv_cache_dtype 'fp9' is not one of: auto, bf16, bfloat16, fp8_e4m3"),
    (dict(kv_cache_dtype="fp16"), r"SGLang has no float16 KV choice"),
    (dict(mem_fraction_static=1.2), r"mem_fraction_static must be in \(0, 1\), got 1.2"),
    (dict(mem_fraction_static=0), r"mem_fraction_static must be in \(0, 1\), got 0"),
    (dict(mem_fraction_static="0.9"), r"mem_fraction_static must be a finite number, got '0.9'"),
    (dict(pre_load_free_gib=0), r"pre_load_free_gib must be > 0, got 0"),
    (dict(post_load_free_gib=-1), r"post_load_free_gib must be > 0, got -1"),
    (dict(post_load_free_gib=95.0), r"post_load_free_gib \(95.0\) is larger than pre_load_free_gib \(94.04\)"),
    (dict(tp_size=0), r"tp_size must be >= 1, got 0"),
    (dict(tp_size=True), r"tp_size must be an integer, got True"),
    (dict(dp_size=3, enable_dp_attention=True), r"tp_size \(8\) must be a multiple of dp_size \(3\)"),
    (dict(page_size=0), r"page_size must be >= 1, got 0"),
    (dict(sglang_version="banana"), r"sglang_version 'banana' is not a version number"),
    (dict(speculative_algorithm="MEDUSA"), r"speculative_algorithm 'MEDUSA' is not one of: EAGLE, EAGLE3"),
    (dict(speculative_algorithm="STANDALONE"), r"STANDALONE needs draft_layers"),
    (dict(target_tokens=0), r"target_tokens must be >= 1, got 0"),
])
def test_capacity_rejects(deepseek, kwargs, message):
    args = dict(mem_fraction_static=0.88, pre_load_free_gib=94.04, post_load_free_gib=21.71, tp_size=8)
    args.update(kwargs)
    with pytest.raises(KvModelError, match=message):
        kv.capacity(deepseek, **args)


def test_nextn_needs_mtp_layers(kimi):
    with pytest.raises(KvModelError, match="NEXTN needs num_nextn_predict_layers > 0"):
        kv.cell_size_bytes(kimi, tp_size=8, speculative_algorithm="NEXTN")


@pytest.mark.parametrize("cfg,message", [
    ({"architectures": ["LlamaForCausalLM"], "num_attention_heads": 32}, r"config.json has no num_hidden_layers"),
    ({"architectures": ["X"], "text_config": {"num_attention_heads": 8}}, r"config.json text_config has no "
                                                                          r"num_hidden_layers"),
    ({"num_hidden_layers": 4}, r"has no head_dim, and no hidden_size"),
    ({"num_hidden_layers": "32", "head_dim": 128}, r"num_hidden_layers must be an integer >= 1, got '32'"),
    ({"num_hidden_layers": 4, "kv_lora_rank": 512, "head_dim": 64}, r"config.json has no qk_rope_head_dim"),
    ({"model_type": "qwen3_next", "num_hidden_layers": 48}, r"hybrid Mamba/linear-attention model"),
    ({"num_hidden_layers": 2, "head_dim": 64, "layer_types": ["full_attention", "linear_attention"]},
     r"linear-attention/Mamba layers"),
    ({"num_hidden_layers": 43, "compress_ratios": [0, 4]}, r"DeepSeek-V4"),
    (["not", "a", "dict"], r"model config must be a JSON object \(dict\), got list"),
])
def test_model_shape_rejects(cfg, message):
    with pytest.raises(KvModelError, match=message):
        kv.model_shape(cfg)


def test_errors_are_value_errors():
    assert issubclass(KvModelError, ValueError)


# ------------------------------------------------------------------------------------------------------------------
# Idle headroom and the hierarchical-cache what-if
# ------------------------------------------------------------------------------------------------------------------

def test_idle_headroom_from_observed_facts(kimi):
    """The field host kept 7.43 GB free after the draft and the graphs: f1 = f0 + (m - safety) / P."""
    facts = {"kv_tokens": 159277, "post_capture_free_gib": 7.43, "available_gpu_mem_gib": 7.5}
    r = kv.capacity(kimi, sglang_version="0.5.9", observed=facts, safety_margin_gib=2.0, **FIELD)
    assert r["free_after_start_gib"] == 7.43
    assert r["headroom_mem_fraction"] == pytest.approx(0.88 + (7.43 - 2.0) / 94.04)
    assert r["headroom_kv_budget_gib"] == pytest.approx(10.4252 + 5.43, abs=1e-4)
    assert r["headroom_tokens"] == int((21.71 - 94.04 * (1 - r["headroom_mem_fraction"])) * GIB) // 70272
    explicit = kv.capacity(kimi, sglang_version="0.5.9", observed=facts, free_after_start_gib=3.0, **FIELD)
    assert explicit["headroom_mem_fraction"] == pytest.approx(0.88 + 1.0 / 94.04)
    none = kv.capacity(kimi, sglang_version="0.5.9", **FIELD)
    assert none["headroom_mem_fraction"] is None and none["headroom_tokens"] is None


def test_idle_headroom_out_of_range_is_an_issue(kimi):
    r = kv.capacity(kimi, sglang_version="0.5.9", free_after_start_gib=50.0, safety_margin_gib=0.0, **FIELD)
    assert r["headroom_mem_fraction"] is None
    assert "outside (0, 1)" in r["issues"][0]


def test_hicache_what_if(kimi, llama70b):
    r = kv.capacity(kimi, sglang_version="0.5.9", hicache_ratio=2.0, **FIELD)
    assert r["hicache_host_tokens"] == 159294 * 2 + 1             # int(size * ratio), then (size // page + 1) * page
    assert r["hicache_host_gib_per_rank"] == pytest.approx(318589 * 70272 / GIB, abs=1e-4)
    assert r["hicache_host_gib_total"] == pytest.approx(8 * 318589 * 70272 / GIB, abs=1e-3)
    assert r["max_total_num_tokens"] == 159294                    # the GPU pool does not grow
    sized = kv.capacity(llama70b, 0.85, 78.9, 60.0, tp_size=8, dp_size=2, page_size=64, hicache_size_gb=100)
    assert sized["hicache_host_tokens"] == (int(100e9 // 40960) // 64 + 1) * 64
    assert sized["hicache_host_gib_total"] == pytest.approx(16 * sized["hicache_host_gib_per_rank"], abs=1e-3)
    current = kv.capacity(kimi, hicache_ratio=2.0, **FIELD)       # 0.5.23: host bytes/token exclude the draft
    assert current["hicache_host_gib_per_rank"] == pytest.approx(current["hicache_host_tokens"] * 70272 / GIB, abs=1e-4)


def test_an_unknown_config_dtype_is_an_error_not_a_guess():
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 2,
              "num_attention_heads": 8, "num_key_value_heads": 8, "hidden_size": 1024, "torch_dtype": "float7"}
    with pytest.raises(kv.KvModelError, match="'float7' is not a torch dtype"):
        kv.model_shape(config)
    config["torch_dtype"] = "float32"   # a real dtype SGLang maps to float16
    assert kv.model_shape(config).dtype == "float16"

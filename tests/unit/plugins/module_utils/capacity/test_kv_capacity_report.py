# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""kv_capacity_report: the field case from the DESIGN brief end to end, hybrid sliding-window pools, the what-ifs
and bad inputs."""
from __future__ import annotations

import pytest

from ansible_collections.llmserve.sglang.plugins.module_utils.capacity.kv_base import KvModelError
from ansible_collections.llmserve.sglang.plugins.module_utils.capacity import kv_search
from ansible_collections.llmserve.sglang.plugins.module_utils.capacity.kv_capacity_report import capacity, mm_reservation_gib
from ansible_collections.llmserve.sglang.plugins.module_utils.capacity.kv_cell import cell_size_bytes
from ansible_collections.llmserve.sglang.plugins.module_utils.capacity.kv_pool import kv_budget_gib
from ansible_collections.llmserve.sglang.plugins.module_utils.capacity.kv_shape import model_shape

GIB = 2 ** 30

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


def test_field_case_reproduces_logged_tokens_on_the_mixin_path(kimi):
    """The path: SGLang 0.5.7 - 0.5.13 (the field server ran model_runner_kv_cache_mixin.py, whose
    profile_max_num_token starts at line 116 as in 0.5.9): no EAGLE headroom, the EAGLE-3 draft's KV outside the
    budget. Predicted 159294 against the logged 159277: +17 tokens, +0.0107 % (P and A are logged to 0.01 GB)."""
    r = capacity(kimi, sglang_version="0.5.9", observed={"kv_tokens": FIELD_LOGGED_TOKENS}, **FIELD)
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
    r = capacity(kimi, sglang_version="0.5.5.post3", observed={"kv_tokens": FIELD_LOGGED_TOKENS}, **FIELD)
    assert r["sglang_era"] == "classic"
    assert r["eagle_headroom_tokens"] == 436
    assert r["max_total_num_tokens"] == 159294 + 436
    assert r["prediction_error_pct"] == pytest.approx(0.2844, abs=1e-4)


def test_field_case_current_path_counts_the_draft_and_the_vlm_reservation(kimi):
    """0.5.23: cell + int(cell * 1 / 61) = 71424 and 100 MiB reserved for the VLM: 155257, -2.5 % off the log,
    which shows the field server was not running current code."""
    r = capacity(kimi, sglang_version="0.5.23", observed={"kv_tokens": FIELD_LOGGED_TOKENS}, **FIELD)
    assert r["cell_size_bytes"] == 71424
    assert r["mm_reservation_gib"] == pytest.approx(100 / 1024, abs=1e-4)
    assert r["max_total_num_tokens"] == (int((10.4252 - 100 / 1024) * GIB)) // 71424 == 155257
    assert r["prediction_error_pct"] < -2


def test_field_case_inverse(kimi):
    """What f gives 250000 tokens on the field host (mixin path), and it round-trips."""
    r = capacity(kimi, sglang_version="0.5.9", target_tokens=250000, **FIELD)
    f = r["mem_fraction_for_target"]
    assert 0.943 < f < 0.9432
    args = dict(FIELD, sglang_version="0.5.9")
    args["mem_fraction_static"] = f
    assert capacity(kimi, **args)["max_total_num_tokens"] >= 250000
    args["mem_fraction_static"] = f - 1e-9
    assert capacity(kimi, **args)["max_total_num_tokens"] < 250000


# ------------------------------------------------------------------------------------------------------------------
# Tokens, cap, pages, the inverse
# ------------------------------------------------------------------------------------------------------------------

def test_zero_budget_in_capacity_warns(deepseek):
    r = capacity(deepseek, 0.5, 94.04, 21.71, tp_size=8)
    assert r["max_total_num_tokens"] == 0 and r["kv_budget_gib"] < 0
    assert "refuses to start" in r["issues"][0]


def test_capacity_target_blocked_by_cap(deepseek):
    r = capacity(deepseek, 0.88, 94.04, 21.71, tp_size=8, target_tokens=200000, max_total_tokens=150000)
    assert r["mem_fraction_for_target"] is None
    assert "max_total_tokens=150000 caps the pool" in r["issues"][0]


# ------------------------------------------------------------------------------------------------------------------
# Hybrid sliding-window models
# ------------------------------------------------------------------------------------------------------------------

def test_hybrid_swa_current():
    budget = kv_budget_gib(78.9, 66.0, 0.85)
    F = S = 8 * 128 * 2            # bytes per token per layer
    cell = F * 18 + 0.8 * S * 18   # HybridSWAPoolConfigurator
    assert cell_size_bytes(GPT_OSS_LIKE) == pytest.approx(cell)
    r = capacity(GPT_OSS_LIKE, 0.85, 78.9, 66.0, page_size=16)
    full = int(int(budget * GIB) // cell) // 16 * 16
    assert r["max_total_num_tokens"] == full
    assert r["swa_max_total_num_tokens"] == int(full * 0.8) // 16 * 16
    assert r["kv_pool_gib"] == pytest.approx((full * F * 18 + r["swa_max_total_num_tokens"] * S * 18) / GIB, abs=1e-4)


def test_hybrid_swa_classic_and_mixin():
    budget = kv_budget_gib(78.9, 66.0, 0.85)
    plain = 8 * 64 * 2 * 2 * 36
    profiled = int(budget * GIB // plain)
    classic = capacity(GPT_OSS_LIKE, 0.85, 78.9, 66.0, sglang_version="0.5.5")
    assert classic["cell_size_bytes"] == plain
    assert classic["max_total_num_tokens"] == int(profiled * 36 / (0.8 * 18 + 18))
    mixin = capacity(GPT_OSS_LIKE, 0.85, 78.9, 66.0, sglang_version="0.5.9")
    assert mixin["max_total_num_tokens"] == int(profiled * plain / (2048 * 18 + 0.8 * 2048 * 18))


# Figures from SGLang's own code, executed from the PyPI wheels with P and A stubbed (tests/functional/
# test_sglang_wheel_sizing.py: `.venv/bin/pytest tests/functional/test_sglang_wheel_sizing.py`); 0.5.8 and 0.5.9 take
# the SWA count from the unaligned full count (set_num_tokens_hybrid_swa), 0.5.10 and later from the aligned one.
@pytest.mark.parametrize("version,full,swa", [
    ("0.5.8", 852992, 682432), ("0.5.9", 852992, 682432), ("0.5.10", 852992, 682368), ("0.5.14", 853056, 682432),
    ("0.5.23", 853056, 682432),
])
def test_hybrid_swa_page_alignment_follows_the_release(version, full, swa):
    r = capacity(GPT_OSS_LIKE, 0.8317, 78.9, 66.0, page_size=64, sglang_version=version)
    assert (r["max_total_num_tokens"], r["swa_max_total_num_tokens"]) == (full, swa)


# model_runner's paged allocator: `assert not self.is_hybrid` (PyPI wheels 0.5.0rc2 ... 0.5.6.post2; 0.5.0rc1 has
# none); executed for 0.5.2 and 0.5.5.post3 in tests/functional/test_sglang_wheel_sizing.py.
@pytest.mark.parametrize("version", ["0.5.0rc2", "0.5.2", "0.5.5.post3", "0.5.6.post2"])
def test_paged_hybrid_swa_is_refused_where_sglang_asserts(version):
    with pytest.raises(KvModelError, match=r"^SGLang %s does not start with this: .*page_size 64" % version):
        capacity(GPT_OSS_LIKE, 0.85, 78.9, 66.0, page_size=64, sglang_version=version)
    assert capacity(GPT_OSS_LIKE, 0.85, 78.9, 66.0, page_size=1, sglang_version=version)["max_total_num_tokens"]


@pytest.mark.parametrize("version", ["0.5.0rc1", "0.5.8", "0.5.9", None])
def test_paged_hybrid_swa_is_sized_where_sglang_starts(version):
    assert capacity(GPT_OSS_LIKE, 0.85, 78.9, 66.0, page_size=64, sglang_version=version)["max_total_num_tokens"]


@pytest.mark.parametrize("config,version,warned", [
    (GPT_OSS_LIKE, "0.4.6.post5", True), (GPT_OSS_LIKE, "0.5.2rc2", False), ("qwen35", "0.4.6.post5", True),
    ("qwen35", "0.5.8.post1", True), ("qwen35", "0.5.9", False), ("qwen35", None, False),
])
def test_a_model_class_the_release_lacks_is_warned(config, version, warned, request):
    cfg = request.getfixturevalue(config) if isinstance(config, str) else config
    arch = cfg["architectures"][0]
    issues = capacity(cfg, 0.85, 78.9, 66.0, sglang_version=version)["issues"]
    said = [i for i in issues if "has no model class %s" % arch in i]
    assert bool(said) is warned, issues
    if warned:
        assert said[0].startswith("SGLang %s has no model class %s" % (version, arch))


# --disable-radix-cache --max-running-requests N: from 0.5.14 the SWA pool is sized from a request cap
# (SWAChunkCapPoolConfigurator, SWARequestCapPoolConfigurator in 0.5.22), the full pool gets the rest. Figures from
# SGLang's code executed from the wheels 0.5.13, 0.5.14, 0.5.22, 0.5.23 (tests/functional/test_sglang_wheel_sizing.py),
# gpt-oss window 127, chunked_prefill_size 8192, P 78.9, A 66.0, f 0.85.
@pytest.mark.parametrize("version,page,n,full,swa", [
    ("0.5.13", 1, 32, 876483, 701186), ("0.5.14", 1, 32, 1553060, 24609), ("0.5.14", 64, 256, 1463168, 114496),
    ("0.5.22", 1, 256, 1495492, 82177), ("0.5.23", 1, 32, 1553060, 24609), ("0.5.23", 64, 32, 1548928, 28736),
    ("0.5.23", 64, 256, 1463168, 114496),
])
def test_swa_request_cap_with_the_radix_cache_off(version, page, n, full, swa):
    r = capacity(GPT_OSS_LIKE, 0.85, 78.9, 66.0, page_size=page, sglang_version=version, max_running_requests=n,
                 disable_radix_cache=True, chunked_prefill_size=8192)
    assert (r["max_total_num_tokens"], r["swa_max_total_num_tokens"]) == (full, swa)


def test_swa_request_cap_rules():
    cap = dict(page_size=1, max_running_requests=32, disable_radix_cache=True, chunked_prefill_size=8192)
    one_chunk = capacity(GPT_OSS_LIKE, 0.85, 78.9, 66.0, disable_overlap_schedule=True, **cap)
    assert one_chunk["swa_max_total_num_tokens"] == 24609 - 8192   # one prefill chunk in flight without overlap
    capped = capacity(GPT_OSS_LIKE, 0.85, 78.9, 66.0, max_total_tokens=20000, **cap)
    assert (capped["max_total_num_tokens"], capped["swa_max_total_num_tokens"]) == (20000, 20000)
    no_chunk = dict(cap)
    no_chunk["chunked_prefill_size"] = None
    with pytest.raises(KvModelError, match="chunked_prefill_size"):
        capacity(GPT_OSS_LIKE, 0.85, 78.9, 66.0, **no_chunk)
    # not given: SGLang picks it from the GPU's memory (8192 on an 80 GiB H100, as given above; 16384 from 160 GiB;
    # divided among the DP ranks with DP attention), as its server_args do before the pool is sized (issue 32)
    on_h100 = capacity(GPT_OSS_LIKE, 0.85, 78.9, 66.0, gpu_memory_mib=81559, **no_chunk)
    assert on_h100["swa_max_total_num_tokens"] == 24609
    on_b200 = capacity(GPT_OSS_LIKE, 0.85, 78.9, 66.0, gpu_memory_mib=183359, **no_chunk)
    assert on_b200["swa_max_total_num_tokens"] == 24609 + 2 * (16384 - 8192)
    two_replicas = dict(no_chunk)
    two_replicas["max_running_requests"] = 64
    dp_attention = capacity(GPT_OSS_LIKE, 0.85, 78.9, 66.0, gpu_memory_mib=183359, tp_size=2, dp_size=2,
                            enable_dp_attention=True, **two_replicas)
    assert dp_attention["swa_max_total_num_tokens"] == 24609
    crowded = dict(cap)
    crowded["max_running_requests"] = 10 ** 6
    full = capacity(GPT_OSS_LIKE, 0.85, 78.9, 66.0, sglang_version="0.5.23", **crowded)
    assert full["max_total_num_tokens"] == 0
    assert full["issues"][0].startswith("SGLang 0.5.23 does not start with this: the sliding-window pool's request cap")
    with pytest.raises(KvModelError, match="speculative"):
        capacity(GPT_OSS_LIKE, 0.85, 78.9, 66.0, speculative_algorithm="EAGLE3", **cap)


# SGLANG_ENABLE_POST_CAPTURE_KV_SIZING (environ.py from 0.5.16, EnvBool: true/1/yes/y, false/0/no/n): the pool is
# sized after CUDA-graph capture for models without MLA (post_capture_kv_sizing_planned, 0.5.20+ overrides.py);
# 0.5.23 turns it on for Muse Spark (muse_spark_hook.py MUSE_SPARK_ENV_DEFAULTS) unless the environment says.
@pytest.mark.parametrize("version,env,arch,refused", [
    ("0.5.23", {"SGLANG_ENABLE_POST_CAPTURE_KV_SIZING": "1"}, None, True),
    ("0.5.16", {"SGLANG_ENABLE_POST_CAPTURE_KV_SIZING": "True"}, None, True),
    ("0.5.15", {"SGLANG_ENABLE_POST_CAPTURE_KV_SIZING": "1"}, None, False),
    ("0.5.23", {"SGLANG_ENABLE_POST_CAPTURE_KV_SIZING": "no"}, None, False),
    ("0.5.23", None, None, False),
    ("0.5.23", None, "MuseSparkForConditionalGeneration", True),
    ("0.5.22", None, "MuseSparkForConditionalGeneration", False),
    ("0.5.23", {"SGLANG_ENABLE_POST_CAPTURE_KV_SIZING": "0"}, "MuseSparkForConditionalGeneration", False),
])
def test_post_capture_kv_sizing_is_not_predicted(llama8b, version, env, arch, refused):
    cfg = dict(llama8b, architectures=[arch]) if arch else llama8b
    if not refused:
        assert capacity(cfg, 0.85, 78.9, 66.0, sglang_version=version, environment=env)["max_total_num_tokens"]
        return
    with pytest.raises(KvModelError, match=r"^SGLang %s sizes the KV pool after CUDA-graph capture" % version):
        capacity(cfg, 0.85, 78.9, 66.0, sglang_version=version, environment=env)


def test_post_capture_kv_sizing_rules(deepseek, llama8b):
    env = {"SGLANG_ENABLE_POST_CAPTURE_KV_SIZING": "1"}
    assert capacity(deepseek, 0.88, 94.04, 21.71, tp_size=8, sglang_version="0.5.23", environment=env)[
        "max_total_num_tokens"]   # MLA: sized before capture, as always
    with pytest.raises(KvModelError, match="SGLang 0.5.23 does not start with this: .*not a valid boolean"):
        capacity(llama8b, 0.85, 78.9, 66.0, sglang_version="0.5.23",
                 environment={"SGLANG_ENABLE_POST_CAPTURE_KV_SIZING": "maybe"})


# Releases without sliding-window pools for the model (executed from the wheels, tests/functional/
# test_sglang_wheel_sizing.py): before 0.4.10 no model gets them (0.4.9: Llama 4 only), 0.5.7 only MiMo-V2-Flash
# (is_hybrid_model); a gpt-oss-shaped model is then one pool over every layer.
@pytest.mark.parametrize("version,tokens", [("0.4.6.post5", 788834), ("0.5.7", 788834)])
def test_no_swa_pool_where_the_release_builds_none(version, tokens):
    r = capacity(GPT_OSS_LIKE, 0.85, 78.9, 66.0, sglang_version=version)
    assert (r["max_total_num_tokens"], r["swa_max_total_num_tokens"]) == (tokens, None)


# From 0.5.16 the configurator refuses an SWA pool of no more than window + page tokens ("SWA pool (128 tokens)
# cannot hold even one request"), executed from the wheels 0.5.15, 0.5.16, 0.5.23 (tests/functional/
# test_sglang_wheel_sizing.py): a budget of `full` tokens of the F*18 + 0.8*S*18 cell, gpt-oss window 127, page 1.
@pytest.mark.parametrize("version,full,expected", [
    ("0.5.15", 160, (160, 128)), ("0.5.16", 160, (0, 0)), ("0.5.23", 150, (0, 0)), ("0.5.23", 170, (170, 136)),
])
def test_an_swa_pool_below_one_request_does_not_start(version, full, expected):
    f = 1 - (66.0 - full * (2048 * 18 + 0.8 * 2048 * 18) / GIB) / 78.9
    r = capacity(GPT_OSS_LIKE, f, 78.9, 66.0, sglang_version=version)
    assert (r["max_total_num_tokens"], r["swa_max_total_num_tokens"]) == expected
    if expected[0] == 0:
        assert r["issues"][0].startswith("SGLang %s does not start with this at mem_fraction_static=" % version)
        assert "cannot hold one request" in r["issues"][0]


def test_gemma3_is_hybrid_only_for_classic():
    gemma3 = {"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "num_hidden_layers": 12,
              "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "sliding_window": 512,
              "sliding_window_pattern": 6, "torch_dtype": "bfloat16"}
    shape = model_shape(gemma3)
    assert (shape.full_attention_layers, shape.swa_layers) == (2, 10)
    assert shape.hybrid_swa_classic and not shape.hybrid_swa
    assert capacity(gemma3, 0.8, 20.0, 15.0)["swa_max_total_num_tokens"] is None
    assert capacity(gemma3, 0.8, 20.0, 15.0, sglang_version="0.5.5")["swa_max_total_num_tokens"] > 0
    assert capacity(gemma3, 0.8, 20.0, 15.0, sglang_version="0.4.10")["swa_max_total_num_tokens"] > 0
    for older in ("0.4.6.post5", "0.4.9"):   # no is_hybrid in model_runner before 0.4.9, Llama 4 only in 0.4.9
        assert capacity(gemma3, 0.8, 20.0, 15.0, sglang_version=older)["swa_max_total_num_tokens"] is None


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
        capacity(deepseek, **args)


def test_errors_are_value_errors():
    assert issubclass(KvModelError, ValueError)


# ------------------------------------------------------------------------------------------------------------------
# Idle headroom and the hierarchical-cache what-if
# ------------------------------------------------------------------------------------------------------------------

def test_idle_headroom_from_observed_facts(kimi):
    """The field host kept 7.43 GB free after the draft and the graphs: f1 = f0 + (m - safety) / P."""
    facts = {"kv_tokens": 159277, "post_capture_free_gib": 7.43, "available_gpu_mem_gib": 7.5}
    r = capacity(kimi, sglang_version="0.5.9", observed=facts, safety_margin_gib=2.0, **FIELD)
    assert r["free_after_start_gib"] == 7.43
    assert r["headroom_mem_fraction"] == pytest.approx(0.88 + (7.43 - 2.0) / 94.04)
    assert r["headroom_kv_budget_gib"] == pytest.approx(10.4252 + 5.43, abs=1e-4)
    assert r["headroom_tokens"] == int((21.71 - 94.04 * (1 - r["headroom_mem_fraction"])) * GIB) // 70272
    explicit = capacity(kimi, sglang_version="0.5.9", observed=facts, free_after_start_gib=3.0, **FIELD)
    assert explicit["headroom_mem_fraction"] == pytest.approx(0.88 + 1.0 / 94.04)
    none = capacity(kimi, sglang_version="0.5.9", **FIELD)
    assert none["headroom_mem_fraction"] is None and none["headroom_tokens"] is None


def test_idle_headroom_out_of_range_is_an_issue(kimi):
    r = capacity(kimi, sglang_version="0.5.9", free_after_start_gib=50.0, safety_margin_gib=0.0, **FIELD)
    assert r["headroom_mem_fraction"] is None
    assert "outside (0, 1)" in r["issues"][0]


def test_hicache_what_if(kimi, llama70b):
    r = capacity(kimi, sglang_version="0.5.9", hicache_ratio=2.0, **FIELD)
    assert r["hicache_host_tokens"] == 159294 * 2 + 1             # int(size * ratio), then (size // page + 1) * page
    assert r["hicache_host_gib_per_rank"] == pytest.approx(318589 * 70272 / GIB, abs=1e-4)
    assert r["hicache_host_gib_total"] == pytest.approx(8 * 318589 * 70272 / GIB, abs=1e-3)
    assert r["max_total_num_tokens"] == 159294                    # the GPU pool does not grow
    sized = capacity(llama70b, 0.85, 78.9, 60.0, tp_size=8, dp_size=2, page_size=64, hicache_size_gb=100)
    assert sized["hicache_host_tokens"] == (int(100e9 // 40960) // 64 + 1) * 64
    assert sized["hicache_host_gib_total"] == pytest.approx(16 * sized["hicache_host_gib_per_rank"], abs=1e-3)
    current = capacity(kimi, hicache_ratio=2.0, **FIELD)       # 0.5.23: host bytes/token exclude the draft
    assert current["hicache_host_gib_per_rank"] == pytest.approx(current["hicache_host_tokens"] * 70272 / GIB, abs=1e-4)


# ------------------------------------------------------------------------------------------------------------------
# One lowest f: the report's min_mem_fraction_static and mem_fraction_for_target are the tuner's lower bound
# ------------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("model,version,tp,page,transport,p,a,target,mm_mib", [
    ("llama8b", "0.5.23", 1, 1, None, 78.9, 63.0, 300000, 0),           # text model: no reservation
    ("llama70b", "0.5.9", 8, 64, None, 78.9, 60.0, 1000000, 0),         # mixin
    ("kimi", "0.5.9", 8, 1, None, 94.04, 21.71, 250000, 0),             # a VLM before 0.5.18 reserves nothing
    ("kimi", "0.5.23", 8, 1, None, 94.04, 21.71, 250000, 100),          # SGLANG_VLM_CACHE_SIZE_MB
    ("kimi", "0.5.23", 8, 16, "cuda_ipc", 94.04, 21.71, 200000, 1124),  # + SGLANG_MM_FEATURE_CACHE_MB
])
def test_the_report_and_the_search_agree_on_the_lowest_fraction(request, model, version, tp, page, transport, p, a,
                                                                target, mm_mib):
    cfg = request.getfixturevalue(model)
    r = capacity(cfg, 0.88, p, a, tp_size=tp, page_size=page, sglang_version=version, target_tokens=target,
                 mm_feature_transport=transport)
    mm = mm_reservation_gib(model_shape(cfg), version, transport)
    assert mm == mm_mib / 1024
    low = kv_search.lower_bound(p, a, mm_reservation_gib=mm)
    assert round(low, 6) == r["min_mem_fraction_static"]
    assert low == pytest.approx(1 - (a - mm) / p)
    for_target = kv_search.lower_bound(p, a, target, r["cell_size_bytes"], page, mm_reservation_gib=mm)
    assert for_target == r["mem_fraction_for_target"]
    if mm:
        # without the reservation the search would start below what the report calls viable
        assert kv_search.lower_bound(p, a) < low
        assert kv_search.lower_bound(p, a, target, r["cell_size_bytes"], page) < for_target

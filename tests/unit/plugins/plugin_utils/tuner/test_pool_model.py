# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""pool_model.pool_residual_gib on real startup logs, and boot_trust.pool_findings: a pool off SGLang's formula at
its own P, A and f by other than the run's first start's was sized while memory moved."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from ansible_collections.llmserve.sglang.plugins.module_utils.service import server_args as sa
from ansible_collections.llmserve.sglang.plugins.module_utils.startup.boot_trust import pool_findings
from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner import pool_model, run_settings
from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner.pool_model import pool_residual_gib
from ansible_collections.llmserve.sglang.plugins.module_utils.startup.startup_log import parse_startup_log

FIXTURES = Path(__file__).resolve().parents[4] / "fixtures"


def _boot(log):
    return parse_startup_log((FIXTURES / "logs" / log).read_text())


def _config(name):
    return json.loads((FIXTURES / "configs" / name).read_text())


@pytest.mark.parametrize("log, config, version, most", [
    # the formula's error on these real boots (test_real_log_predictions), as memory: at most a few hundredths of a GiB
    ("v058_tp8_kimi_k25_mi355x_capture_crash.log", "kimi-k2.5-int4.json", "0.5.8", 0.01),
    ("classic_tp8_grok2_fp8_h100_ready.log", "grok-2-attention.json", "0.5.2", 0.05),
    ("field_kimi_k25_rtx6000_tp8_eagle3.log", "kimi-k2.5-int4.json", "0.5.9", 0.01),
])
def test_real_boots_are_within_hundredths_of_a_gib_of_the_formula(log, config, version, most):
    boot = _boot(log)
    residual = pool_residual_gib(_config(config), sa.memory_args(boot["server_args"]), version, {}, boot)
    assert residual is not None and abs(residual) <= most, residual


def test_memory_taken_while_the_pool_is_sized_moves_the_figure_by_as_much():
    # The field boot again, as if 2 GiB had gone from every GPU after "Load weight end" was printed: the log's P and A
    # are the same, the pool 2 GiB smaller (70272 bytes per token).
    boot = _boot("field_kimi_k25_rtx6000_tp8_eagle3.log")
    args, config = sa.memory_args(boot["server_args"]), _config("kimi-k2.5-int4.json")
    clean = pool_residual_gib(config, args, "0.5.9", {}, boot)
    short = dict(boot, max_total_num_tokens=boot["max_total_num_tokens"] - 2 * 2 ** 30 // 70272)
    moved = pool_residual_gib(config, args, "0.5.9", {}, short)
    assert moved - clean == pytest.approx(2.0, abs=0.01)
    found = pool_findings(moved, clean)
    assert len(found) == 1 and found[0].startswith("the pool SGLang logged is 2.00 GiB smaller than its formula gives")
    assert pool_findings(clean + 0.2, clean) == [] and pool_findings(None, clean) == [] and pool_findings(clean, None) == []


@pytest.mark.parametrize("change", [
    {"max_total_num_tokens": None, "kv_tokens": None}, {"pre_load_free_gib": None}, {"post_load_free_gib": None},
    {"mem_fraction_static_source": "multimodal_reduction"},
])
def test_a_boot_the_formula_cannot_judge_gives_none(change):
    boot = dict(_boot("field_kimi_k25_rtx6000_tp8_eagle3.log"), **change)
    assert pool_residual_gib(_config("kimi-k2.5-int4.json"), sa.memory_args(boot["server_args"]), "0.5.9", {},
                             boot) is None
    assert pool_residual_gib(None, {}, "0.5.9", {}, _boot("field_kimi_k25_rtx6000_tp8_eagle3.log")) is None


def test_a_pool_at_its_cap_tells_of_no_budget():
    # A start that ran a --max-total-tokens (the pin's, kv_tune_pin_tokens) at or below what the budget gives: its
    # pool is the cap, whatever memory it had, so it neither is the run's reference nor is judged against one.
    boot = _boot("field_kimi_k25_rtx6000_tp8_eagle3.log")
    tokens, config = boot["max_total_num_tokens"], _config("kimi-k2.5-int4.json")
    capped = dict(boot, server_args=dict(boot["server_args"], max_total_tokens=tokens))
    assert pool_residual_gib(config, sa.memory_args(boot["server_args"]), "0.5.9", {}, capped) is None
    # a cap above the pool did not bind: the budget is judged as without it
    loose = dict(boot, server_args=dict(boot["server_args"], max_total_tokens=tokens + 1))
    assert pool_residual_gib(config, sa.memory_args(boot["server_args"]), "0.5.9", {}, loose) == pytest.approx(
        pool_residual_gib(config, sa.memory_args(boot["server_args"]), "0.5.9", {}, boot))


BOOT = {"pre_load_free_gib": 94.04, "post_load_free_gib": 21.71, "max_total_num_tokens": 159282}


def test_split_pool_from_the_logs_or_the_config():
    configs = Path(__file__).parents[4] / "fixtures" / "configs"
    llama = json.loads((configs / "llama-3.1-70b.json").read_text())
    linear = json.loads((configs / "qwen3.5-9b.json").read_text())
    swa = {"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "num_hidden_layers": 36,
           "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64, "hidden_size": 2880,
           "sliding_window": 128, "layer_types": ["sliding_attention", "full_attention"] * 18, "torch_dtype": "bfloat16"}
    assert pool_model.split_pool(llama, [{}]) is False
    assert pool_model.split_pool(linear, []) is True and pool_model.split_pool(swa, []) is True
    assert pool_model.split_pool(llama, [{"swa_tokens": 1368, "full_tokens": 1710}]) is True
    assert pool_model.split_pool(None, [{"max_total_num_tokens": 5, "mamba_cache_size": 186}]) is True
    assert pool_model.split_pool(None, [{"max_total_num_tokens": 5}]) is False
    assert pool_model.split_pool(None, [{}]) is None
    assert pool_model.split_pool({"architectures": ["Nothing"]}, []) is None


def test_the_multimodal_reduction_in_terms_of_the_command_line_value():
    boot = {"pre_load_free_gib": 62.92, "post_load_free_gib": 47.22, "mem_fraction_static": 0.787,
            "mem_fraction_static_logged": 0.874, "mem_fraction_static_source": "multimodal_reduction"}
    p, a = pool_model.effective_memory(boot)
    for f in (0.874, 0.6, 0.95):
        # SGLang's budget at s * f equals the formula's at f with P' and A'
        assert a - p * (1 - f) == pytest.approx(47.22 - 62.92 * (1 - f * 0.787 / 0.874))
    assert pool_model.lower_bound(boot, None) == pytest.approx((1 - 47.22 / 62.92) / (0.787 / 0.874))


def test_a_token_floor_is_refused_for_hybrid_models():
    model = {"cell_size_bytes": 16384, "page_size": 1, "mm_reservation_gib": 0.0, "hybrid_state": True}
    with pytest.raises(run_settings.TuneError, match="kv_tune_min_tokens is not supported for hybrid"):
        pool_model.lower_bound(BOOT, model, 100000)
    assert pool_model.lower_bound(BOOT, model) == pytest.approx(1 - 21.71 / 94.04)

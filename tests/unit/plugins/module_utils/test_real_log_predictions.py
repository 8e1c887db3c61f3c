# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Two halves of the engine against SGLang itself: the facts that startup_log reads from a real startup log, fed
to the KV model's formula (kv_capacity_report.capacity) with the model's config.json, must give the #tokens that
SGLang logged.

Each case states the prediction error measured when it was written; the bound is a little above it, so a change
in either half that moves a prediction shows up here. Sources of the logs: tests/fixtures/logs/SOURCES.md; of the
configs: tests/fixtures/configs/SOURCES.md.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from ansible_collections.llmserve.sglang.plugins.module_utils.capacity.kv_capacity_report import capacity
from ansible_collections.llmserve.sglang.plugins.module_utils.startup.startup_log import parse_startup_log

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"

# log, config, SGLang version that wrote the log, logged #tokens, measured error (%), bound (%)
CASES = [
    # MLA (Kimi-K2.5, DeepSeek-V3 attention), TP8, bf16 KV, v0.5.8 on 8x MI355X: a real log, complete up to the pool.
    ("v058_tp8_kimi_k25_mi355x_capture_crash.log", "kimi-k2.5-int4.json", "0.5.8", 2454421, 0.0034, 0.01),
    # GQA (Grok-2: 8 KV heads, head_dim 128, 64 layers), TP8, bf16 KV, fp8 weights, v0.5.2rc2 on 8x H100: real, ready.
    ("classic_tp8_grok2_fp8_h100_ready.log", "grok-2-attention.json", "0.5.2", 903439, 0.1216, 0.2),
    # The field case (reconstructed from the stated numbers; EAGLE-3, mixin-era 0.5.9 arithmetic), TP8 MLA.
    ("field_kimi_k25_rtx6000_tp8_eagle3.log", "kimi-k2.5-int4.json", "0.5.9", 159277, 0.0107, 0.1),
    # GQA (QwQ-32B), TP4 on 4x L4, v0.4.3.post4: real, ready, every rank prints the same P and A.
    ("classic_tp4_qwq32b_l4_ready.log", "qwq-32b.json", "0.4.3", 46611, 0.0193, 0.05),
    # GQA (DeepSeek-R1-Distill-Qwen-7B), TP1 on an RTX 3090, Feb 2025: the pool only in max_total_num_tokens.
    ("classic_tp1_r1_distill_qwen7b_rtx3090_docker.log", "deepseek-r1-distill-qwen-7b.json", "0.4.2", 105531, 0.0502,
     0.1),
    # GQA at TP1 on SGLang's docs CI before it capped the pool (Jan 2025 and Nov 2024 builds).
    ("classic_tp1_llama31_8b_docs_ci_uncapped.log", "llama-3.1-8b.json", "0.4.1", 444500, 0.0045, 0.01),
    ("classic_tp1_llama32_1b_docs_ci_uncapped.log", "llama-3.2-1b-instruct.json", "0.3.5", 2170757, 0.0044, 0.01),
    # GQA at TP1 with an EAGLE-3 draft (SGLang's docs notebook), capped by --max-total-tokens 20480: the cap wins.
    ("classic_tp1_llama31_8b_eagle3_h100.log", "llama-3.1-8b.json", "0.5.5", 20480, 0.0, 0.0),
]


def _predict(log: str, config: str, version: str) -> dict:
    facts = parse_startup_log((FIXTURES / "logs" / log).read_text())
    args = facts["server_args"]
    return capacity(
        json.loads((FIXTURES / "configs" / config).read_text()),
        args["mem_fraction_static"], facts["pre_load_free_gib"], facts["post_load_free_gib"],
        tp_size=args.get("tp_size") or 1, dp_size=args.get("dp_size") or 1,
        kv_cache_dtype=args.get("kv_cache_dtype") or "auto", page_size=args.get("page_size") or 1,
        max_total_tokens=args.get("max_total_tokens"), speculative_algorithm=args.get("speculative_algorithm"),
        sglang_version=version, observed=facts)


@pytest.mark.parametrize("log,config,version,logged,measured,bound", CASES, ids=[c[0] for c in CASES])
def test_formula_predicts_the_logged_pool(log, config, version, logged, measured, bound):
    result = _predict(log, config, version)
    assert result["observed_tokens"] == logged
    assert abs(result["prediction_error_pct"]) <= bound, result
    assert result["prediction_error_pct"] == pytest.approx(measured, abs=0.0001)


def test_field_case_cell_and_budget():
    result = _predict("field_kimi_k25_rtx6000_tp8_eagle3.log", "kimi-k2.5-int4.json", "0.5.9")
    assert result["cell_size_bytes"] == 70272  # (512 + 64) x 61 layers x 2 B, not divided by TP
    assert result["kv_budget_gib"] == pytest.approx(21.71 - 94.04 * 0.12, abs=1e-4)


def test_hybrid_gdn_state_pool_and_kv_pool_from_a_real_boot():
    # Qwen3.5-9B (24 Gated DeltaNet + 8 full-attention layers), TP2 on 2x RTX 4090, f 0.8 from the command line (the
    # excerpt has no server_args). The build (April 2026, between 0.5.10 and 0.5.11 by its log formats and date) runs
    # the 0.5.10 arithmetic: K = int(budget * 0.9 / 1.9 // per_request).
    facts = parse_startup_log((FIXTURES / "logs" / "hybrid_gdn_qwen35_9b_tp2_rtx4090.log").read_text())
    result = capacity(json.loads((FIXTURES / "configs" / "qwen3.5-9b.json").read_text()), 0.8,
                      facts["pre_load_free_gib"], facts["post_load_free_gib"], tp_size=2, sglang_version="0.5.10",
                      observed=facts)
    # per request: 24 layers x (8192 / 2 x 3 x 2 B conv + 16 x 128 x 128 x 4 B ssm)
    assert result["state_bytes_per_request"] == 24 * (4096 * 3 * 2 + 16 * 128 * 128 * 4)
    # one slot more than the log's 186: about 40 MiB less was free when SGLang profiled than "Load weight end" says
    # (P and A are printed to 0.01 GB; a 187th slot needs 35-45 MiB more than the boot had)
    assert (result["mamba_cache_size"], facts["mamba_cache_size"]) == (187, 186)
    # conv 0.1027 + ssm 4.3828 GiB, which the log prints rounded each: 0.10 + 4.38
    assert result["mamba_state_gib"] == pytest.approx(facts["mamba_size_gib"], abs=0.01)
    assert result["cell_size_bytes"] == 8 * 2 * 256 * 2 * 2  # only the 8 full-attention layers hold KV
    assert result["observed_tokens"] == 327310
    # measured +0.2823 %: the same ~40 MiB, 0.8 % of the 5 GiB KV pool at most, plus the log's rounding of P and A
    assert abs(result["prediction_error_pct"]) <= 0.5
    assert result["prediction_error_pct"] == pytest.approx(0.2823, abs=0.0001)

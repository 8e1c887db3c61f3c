# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The kv filters (kv_cell_size, kv_tokens, mem_fraction_for_tokens) on real configs, and their errors."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.llmserve.sglang.plugins.filter import kv_cell_size as cell_filter
from ansible_collections.llmserve.sglang.plugins.filter import kv_tokens as tokens_filter
from ansible_collections.llmserve.sglang.plugins.filter import mem_fraction_for_tokens as fraction_filter

REPO = Path(__file__).resolve().parents[4]
CONFIGS = REPO / "tests" / "fixtures" / "configs"
kv_cell_size = cell_filter.FilterModule().filters()["kv_cell_size"]
kv_tokens = tokens_filter.FilterModule().filters()["kv_tokens"]
mem_fraction_for_tokens = fraction_filter.FilterModule().filters()["mem_fraction_for_tokens"]


def config(name):
    return json.loads((CONFIGS / name).read_text())


def test_kv_cell_size():
    assert kv_cell_size(config("llama-3.1-8b.json")) == 131072
    assert kv_cell_size(config("llama-3.1-70b.json"), tp_size=8) == 40960
    assert kv_cell_size(config("llama-3.1-70b.json"), 8, kv_cache_dtype="fp8_e4m3") == 20480
    assert kv_cell_size(config("kimi-k2.5-int4.json"), tp_size=8) == 70272
    assert kv_cell_size(config("deepseek-v3.json"), tp_size=8, speculative_algorithm="NEXTN") == 71424
    assert kv_cell_size(config("deepseek-v3.json"), tp_size=8, speculative_algorithm="NEXTN",
                        sglang_version="0.5.9") == 70272


def test_kv_tokens_field_case():
    assert kv_tokens(70272, 94.04, 21.71, 0.88) == 159294
    assert kv_tokens(70272, 94.04, 21.71, 0.88, page_size=64) == 159232
    assert kv_tokens(70272, 94.04, 21.71, 0.88, max_total_tokens=100000) == 100000
    assert kv_tokens(70272, 94.04, 21.71, 0.5) == 0
    # classic + EAGLE-3 adds the headroom outside the budget
    assert kv_tokens(70272, 94.04, 21.71, 0.88, sglang_version="0.5.5.post3", speculative_algorithm="EAGLE3",
                     speculative_num_steps=3, speculative_eagle_topk=1, speculative_num_draft_tokens=4) == 159730


def test_mem_fraction_for_tokens_round_trip():
    f = mem_fraction_for_tokens(250000, 70272, 94.04, 21.71)
    assert kv_tokens(70272, 94.04, 21.71, f) >= 250000
    assert kv_tokens(70272, 94.04, 21.71, f - 1e-12) < 250000
    assert mem_fraction_for_tokens(159277, 70272, 94.04, 21.71, resolution=0.001) == 0.88


@pytest.mark.parametrize("call,message", [
    (lambda: kv_cell_size(["not", "a", "dict"]), "kv_cell_size expects a config.json dictionary"),
    (lambda: kv_cell_size(config("llama-3.1-8b.json"), kv_cache_dtype="fp9"), "kv_cache_dtype 'fp9' is not one of"),
    (lambda: kv_cell_size({"num_attention_heads": 8}), "config.json has no num_hidden_layers"),
    (lambda: kv_tokens(70272, 94.04, 21.71, 1.2), r"mem_fraction_static must be in \(0, 1\), got 1.2"),
    (lambda: kv_tokens(70272, 21.71, 94.04, 0.88), "is larger than pre_load_free_gib"),
    (lambda: kv_tokens(0, 94.04, 21.71, 0.88), "cell_size_bytes must be a positive number, got 0"),
    (lambda: mem_fraction_for_tokens(10 ** 8, 70272, 94.04, 21.71), "out of reach"),
])
def test_errors_are_filter_errors(call, message):
    with pytest.raises(AnsibleFilterError, match=message):
        call()

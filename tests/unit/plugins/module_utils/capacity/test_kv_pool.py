# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""kv_pool: the budget, the tokens it holds, the inverse, on the field case from the DESIGN brief."""
from __future__ import annotations

import pytest

from ansible_collections.llmserve.sglang.plugins.module_utils.capacity.kv_base import KvModelError
from ansible_collections.llmserve.sglang.plugins.module_utils.capacity.kv_cell import cell_size_bytes
from ansible_collections.llmserve.sglang.plugins.module_utils.capacity.kv_pool import (
    eagle_headroom_tokens,
    kv_budget_gib,
    lowest_viable_fraction,
    max_total_num_tokens,
    mem_fraction_for_tokens,
    min_mem_fraction_static,
    reserved_gib,
)

GIB = 2 ** 30


# ------------------------------------------------------------------------------------------------------------------
# The field case: Kimi-K2.5 INT4 (DeepSeek-V3 architecture), TP8, bf16 KV, f=0.88, P=94.04, A=21.71, EAGLE-3
# "KV Cache is allocated. #tokens: 159277, KV size: 10.42 GB"
# ------------------------------------------------------------------------------------------------------------------

def test_field_case_cell_and_budget(kimi, deepseek):
    assert cell_size_bytes(kimi, tp_size=8) == 70272 == (512 + 64) * 61 * 2
    assert cell_size_bytes(deepseek, tp_size=8) == 70272          # the same text model
    assert kv_budget_gib(94.04, 21.71, 0.88) == pytest.approx(10.4252, abs=1e-9)
    assert reserved_gib(94.04, 0.88) == pytest.approx(11.2848, abs=1e-9)


# ------------------------------------------------------------------------------------------------------------------
# Speculative decoding
# ------------------------------------------------------------------------------------------------------------------

def test_classic_eagle_headroom_defaults():
    # STANDALONE and DeepSeek: (3, 1, 4); others (5, 4, 8); R defaults to 48
    assert eagle_headroom_tokens(architecture="DeepseekV3ForCausalLM") == 48 * 3 + 48 * 4 + 100
    assert eagle_headroom_tokens(architecture="LlamaForCausalLM") == 48 * 5 * 4 + 48 * 8 + 100
    assert eagle_headroom_tokens(max_running_requests=64, speculative_num_steps=2, speculative_eagle_topk=1,
                                 speculative_num_draft_tokens=9) == 64 * 2 + 64 * 3 + 100  # topk 1: draft=steps+1


# ------------------------------------------------------------------------------------------------------------------
# Tokens, cap, pages, the inverse
# ------------------------------------------------------------------------------------------------------------------

def test_tokens_formula():
    budget = kv_budget_gib(94.04, 21.71, 0.88)
    assert max_total_num_tokens(budget, 70272) == int(budget * GIB) // 70272 == 159294


def test_cap_only_shrinks_and_page_rounding():
    budget = kv_budget_gib(94.04, 21.71, 0.88)
    assert max_total_num_tokens(budget, 70272, max_total_tokens=100000) == 100000
    assert max_total_num_tokens(budget, 70272, max_total_tokens=10 ** 9) == 159294
    assert max_total_num_tokens(budget, 70272, page_size=64) == 159294 // 64 * 64 == 159232
    assert max_total_num_tokens(budget, 70272, page_size=64, max_total_tokens=100001) == 99968


@pytest.mark.parametrize("budget", [0.0, -0.5, -30.0])
def test_no_budget_gives_zero_tokens(budget):
    assert max_total_num_tokens(budget, 70272) == 0
    assert max_total_num_tokens(budget, 70272, sglang_version="0.5.5") == 0


def test_min_mem_fraction_static():
    f = min_mem_fraction_static(94.04, 21.71)
    assert f == pytest.approx(1 - 21.71 / 94.04)
    assert kv_budget_gib(94.04, 21.71, f) == pytest.approx(0, abs=1e-12)
    assert max_total_num_tokens(kv_budget_gib(94.04, 21.71, f - 1e-6), 70272) == 0
    assert max_total_num_tokens(kv_budget_gib(94.04, 21.71, f + 1e-3), 70272) > 0


@pytest.mark.parametrize("target", [1, 1000, 159277, 250000, 480000])
@pytest.mark.parametrize("page", [1, 16, 64])
@pytest.mark.parametrize("cell", [70272, 40960, 131072])
def test_inverse_round_trips_to_the_token(target, page, cell):
    p, a = 140.0, 60.0
    f = mem_fraction_for_tokens(target, cell, p, a, page_size=page)
    got = max_total_num_tokens(kv_budget_gib(p, a, f), cell, page_size=page)
    assert got >= target
    assert got - target < page + max(1, int(p * 2e-15 * GIB / cell) + 1)   # within one page (and float ulp)
    lower = max_total_num_tokens(kv_budget_gib(p, a, f - 1e-12), cell, page_size=page)
    assert lower < target


def test_inverse_resolution_rounds_up():
    f = mem_fraction_for_tokens(159277, 70272, 94.04, 21.71, resolution=0.001)
    assert f == 0.88
    assert mem_fraction_for_tokens(159295, 70272, 94.04, 21.71, resolution=0.001) == 0.881


def test_inverse_out_of_reach():
    with pytest.raises(KvModelError, match="out of reach"):
        mem_fraction_for_tokens(10 ** 7, 70272, 94.04, 21.71)


# ------------------------------------------------------------------------------------------------------------------
# The lowest viable fraction (the capacity report's and the search's; test_kv_capacity_report shows they agree)
# ------------------------------------------------------------------------------------------------------------------

def test_lowest_viable_fraction_without_a_reservation():
    assert lowest_viable_fraction(94.04, 21.71) == min_mem_fraction_static(94.04, 21.71) == 1 - 21.71 / 94.04
    assert lowest_viable_fraction(94.04, 21.71, target_tokens=250000, cell_size_bytes=70272, page_size=64) == \
        mem_fraction_for_tokens(250000, 70272, 94.04, 21.71, page_size=64)
    # a target the zero-budget f already holds does not lower it
    assert lowest_viable_fraction(94.04, 21.71, target_tokens=1, cell_size_bytes=70272) > 1 - 21.71 / 94.04


def test_the_multimodal_reservation_raises_the_lowest_fraction():
    mm = 100 / 1024     # SGLANG_VLM_CACHE_SIZE_MB
    low = lowest_viable_fraction(94.04, 21.71, mm_reservation_gib=mm)
    assert low == pytest.approx(1 - (21.71 - mm) / 94.04) and low > lowest_viable_fraction(94.04, 21.71)
    f = lowest_viable_fraction(94.04, 21.71, mm_reservation_gib=mm, target_tokens=250000, cell_size_bytes=70272)
    assert f > mem_fraction_for_tokens(250000, 70272, 94.04, 21.71)
    assert max_total_num_tokens(kv_budget_gib(94.04, 21.71, f) - mm, 70272) >= 250000
    assert max_total_num_tokens(kv_budget_gib(94.04, 21.71, f - 1e-12) - mm, 70272) < 250000


@pytest.mark.parametrize("kwargs,message", [
    (dict(mm_reservation_gib=-0.1), r"mm_reservation_gib must be >= 0"),
    (dict(mm_reservation_gib="0.1"), r"mm_reservation_gib must be a finite number, got '0.1'"),
    (dict(target_tokens=0, cell_size_bytes=70272), r"target_tokens must be >= 1, got 0"),
    (dict(target_tokens=1000), r"cell_size_bytes must be a positive number, got None"),
    (dict(target_tokens=10 ** 6, cell_size_bytes=70272, mm_reservation_gib=1.0),
     r"out of reach: .*\(A = 21.71 GiB - 1.00 GiB multimodal reservation / 70272 bytes per token\)"),
])
def test_lowest_viable_fraction_rejects(kwargs, message):
    with pytest.raises(KvModelError, match=message):
        lowest_viable_fraction(94.04, 21.71, **kwargs)

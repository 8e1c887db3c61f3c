# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""kv_defaults: SGLang's default --mem-fraction-static, the classic table from reference/sglang-memory.md."""
from __future__ import annotations

import pytest

from ansible_collections.llmserve.sglang.plugins.module_utils.capacity.kv_defaults import (
    default_for_server_args,
    default_mem_fraction_static,
)


@pytest.mark.parametrize("gpu_mib,tp,eagle,expected", [   # reference/sglang-memory.md section 2 (classic)
    (23034, 1, False, 0.837), (23034, 8, False, 0.793), (23034, 1, True, 0.748), (23034, 8, True, 0.704),
    (40960, 1, False, 0.833), (40960, 8, False, 0.805), (40960, 1, True, 0.783), (40960, 8, True, 0.755),
    (81559, 1, False, 0.835), (81559, 8, False, 0.818), (81559, 1, True, 0.810), (81559, 8, True, 0.793),
    (143771, 1, False, 0.907), (143771, 8, False, 0.897), (143771, 1, True, 0.892), (143771, 8, True, 0.882),
])
def test_default_mem_fraction_classic_table(gpu_mib, tp, eagle, expected):
    got = default_mem_fraction_static(gpu_mib, tp, speculative_algorithm="EAGLE" if eagle else None,
                                      sglang_version="0.5.5.post3")
    assert got == expected


def test_default_mem_fraction_other_rules(llama8b, kimi):
    # no nvidia-smi: 0.88, 0.95 from 0.5.20
    assert default_mem_fraction_static(None, sglang_version="0.5.5") == 0.88
    assert default_mem_fraction_static(None) == 0.95
    # 0.5.14 dropped the speculative reserve
    assert default_mem_fraction_static(81559, 1, speculative_algorithm="EAGLE", sglang_version="0.5.14") == 0.835
    # current H100 TP1, Llama: 512 + 8192*1.5 + 128 + 256*2 + 58 prefill graph sizes * 8 = 13904 MiB
    assert default_mem_fraction_static(81559, 1, shape=llama8b) == round((81559 - 13904) / 81559, 3) == 0.83
    # VLM factor 0.95 * clamp(...): Kimi's vision_config has vt_* keys, so 24 layers x 1024 -> ratio 1
    assert default_mem_fraction_static(143771, 8, speculative_algorithm="EAGLE3", shape=kimi,
                                       sglang_version="0.5.9") == pytest.approx(0.882 * 0.95)


def test_default_for_server_args_maps_the_field_names():
    args = {"tp_size": 8, "dp_size": 2, "enable_dp_attention": True, "chunked_prefill_size": 4096,
            "cuda_graph_max_bs": 128, "max_running_requests": 256}
    assert default_for_server_args(97887, args, sglang_version="0.5.9") == \
        default_mem_fraction_static(97887, 8, dp_size=2, enable_dp_attention=True, chunked_prefill_size=4096,
                                    cuda_graph_max_bs=128, max_running_requests=256, sglang_version="0.5.9")

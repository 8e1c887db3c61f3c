# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filter kv_tokens: Tokens SGLang's KV pool gets for a cell size, the free memory and --mem-fraction-static."""
from __future__ import annotations

DOCUMENTATION = r"""
name: kv_tokens
short_description: Tokens SGLang's KV pool gets for a cell size, the free memory and --mem-fraction-static
version_added: 1.0.0
author:
  - llmserve.sglang contributors (@llmserve)
description:
  - Computes SGLang's C(max_total_num_tokens) per GPU from the cell size (bytes per token, see
    P(llmserve.sglang.kv_cell_size#filter)), the free GPU memory before (P) and after (A) the weights load, in
    GiB (bytes / 2**30), and C(--mem-fraction-static) (f).
  - The budget is A - P * (1 - f) GiB; the tokens are int(budget * 2**30) // cell, capped by
    O(max_total_tokens) and rounded down to a multiple of O(page_size). A budget of 0 or less gives 0 (SGLang
    refuses to start).
  - For SGLang before 0.5.7 with EAGLE, EAGLE3, NEXTN or STANDALONE, the headroom SGLang adds outside the budget
    (R * steps * topk + R * draft_tokens + 100, R = max_running_requests, default 48) is included.
  - Hybrid sliding-window models need the whole model; use M(llmserve.sglang.kv_capacity) for them.
options:
  _input:
    description: The cell size in bytes.
    type: raw
    required: true
  pre_load_free_gib:
    description: Free GPU memory before the weights load, GiB (P), the minimum over ranks.
    type: float
    required: true
  post_load_free_gib:
    description: Free GPU memory after the weights load, GiB (A), the minimum over ranks.
    type: float
    required: true
  mem_fraction_static:
    description: C(--mem-fraction-static), in (0, 1).
    type: float
    required: true
  page_size:
    description: C(--page-size).
    type: int
    default: 1
  max_total_tokens:
    description: C(--max-total-tokens), an upper bound.
    type: int
  sglang_version:
    description: The SGLang release; omitted means the newest release checked (0.5.23).
    type: str
  speculative_algorithm:
    description: C(--speculative-algorithm) (only changes the result for SGLang before 0.5.7).
    type: str
  max_running_requests:
    description: C(--max-running-requests) (classic EAGLE headroom).
    type: int
  speculative_num_steps:
    description: C(--speculative-num-steps) (classic EAGLE headroom).
    type: int
  speculative_eagle_topk:
    description: C(--speculative-eagle-topk) (classic EAGLE headroom).
    type: int
  speculative_num_draft_tokens:
    description: C(--speculative-num-draft-tokens) (classic EAGLE headroom).
    type: int
"""

EXAMPLES = r"""
- name: Kimi-K2.5 on TP8 at 0.88 (159294 tokens)
  ansible.builtin.debug:
    msg: "{{ 70272 | llmserve.sglang.kv_tokens(94.04, 21.71, 0.88) }}"

- name: The same with 64-token pages and a cap
  ansible.builtin.debug:
    msg: "{{ 70272 | llmserve.sglang.kv_tokens(94.04, 21.71, 0.88, page_size=64, max_total_tokens=150000) }}"
"""

RETURN = r"""
_value:
  description: The token count (0 when SGLang would refuse to start).
  type: int
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.llmserve.sglang.plugins.plugin_utils.plain import plain
from ansible_collections.llmserve.sglang.plugins.module_utils.capacity.kv_base import KvModelError
from ansible_collections.llmserve.sglang.plugins.module_utils.capacity.kv_pool import kv_budget_gib, max_total_num_tokens


def kv_tokens(cell, pre_load_free_gib, post_load_free_gib, mem_fraction_static, page_size=1, max_total_tokens=None,
              sglang_version=None, speculative_algorithm=None, max_running_requests=None, speculative_num_steps=None,
              speculative_eagle_topk=None, speculative_num_draft_tokens=None):
    """max_total_num_tokens for a cell size (bytes) and P, A (GiB) and f."""
    try:
        budget = kv_budget_gib(plain(pre_load_free_gib), plain(post_load_free_gib), plain(mem_fraction_static))
        return max_total_num_tokens(budget, plain(cell), page_size=plain(page_size),
                                    max_total_tokens=plain(max_total_tokens), sglang_version=plain(sglang_version),
                                    speculative_algorithm=plain(speculative_algorithm),
                                    max_running_requests=plain(max_running_requests),
                                    speculative_num_steps=plain(speculative_num_steps),
                                    speculative_eagle_topk=plain(speculative_eagle_topk),
                                    speculative_num_draft_tokens=plain(speculative_num_draft_tokens))
    except KvModelError as exc:
        raise AnsibleFilterError("kv_tokens: %s" % exc)


class FilterModule:
    def filters(self):
        return {"kv_tokens": kv_tokens}

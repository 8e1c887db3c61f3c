# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filter mem_fraction_for_tokens: The smallest --mem-fraction-static that gives SGLang's KV pool a number of
tokens."""
from __future__ import annotations

DOCUMENTATION = r"""
name: mem_fraction_for_tokens
short_description: The smallest --mem-fraction-static that gives SGLang's KV pool a number of tokens
version_added: 1.0.0
author:
  - llmserve.sglang contributors (@llmserve)
description:
  - The inverse of P(llmserve.sglang.kv_tokens#filter) (SGLang 0.5.7 and later, no speculative headroom). With T
    the target rounded up to O(page_size), f = 1 - (A - T * cell / 2**30) / P.
  - The value is the smallest float f for which the token count is at least the target, found over SGLang's own
    float arithmetic, so it is exact to the token. Pass it unrounded (its repr round-trips) or round it up,
    never down; or give O(resolution) to get it rounded up to that grid.
  - Fails when even f -> 1 does not reach the target.
options:
  _input:
    description: The target token count.
    type: int
    required: true
  cell_size_bytes:
    description: Bytes per token (P(llmserve.sglang.kv_cell_size#filter)).
    type: raw
    required: true
  pre_load_free_gib:
    description: Free GPU memory before the weights load, GiB (P).
    type: float
    required: true
  post_load_free_gib:
    description: Free GPU memory after the weights load, GiB (A).
    type: float
    required: true
  page_size:
    description: C(--page-size).
    type: int
    default: 1
  resolution:
    description: Round the result up to a multiple of this, such as V(0.001).
    type: float
"""

EXAMPLES = r"""
- name: The fraction that gives Kimi-K2.5 on TP8 250000 tokens
  ansible.builtin.debug:
    msg: "{{ 250000 | llmserve.sglang.mem_fraction_for_tokens(70272, 94.04, 21.71) }}"

- name: The same, rounded up to 0.001
  ansible.builtin.debug:
    msg: "{{ 250000 | llmserve.sglang.mem_fraction_for_tokens(70272, 94.04, 21.71, resolution=0.001) }}"
"""

RETURN = r"""
_value:
  description: The smallest C(--mem-fraction-static) giving at least the target.
  type: float
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.llmserve.sglang.plugins.plugin_utils.plain import plain
from ansible_collections.llmserve.sglang.plugins.module_utils.capacity.kv_base import KvModelError
from ansible_collections.llmserve.sglang.plugins.module_utils.capacity.kv_pool import mem_fraction_for_tokens


def kv_mem_fraction_for_tokens(target_tokens, cell, pre_load_free_gib, post_load_free_gib, page_size=1,
                               resolution=None):
    """The smallest --mem-fraction-static that gives at least target_tokens."""
    try:
        return mem_fraction_for_tokens(plain(target_tokens), plain(cell), plain(pre_load_free_gib),
                                       plain(post_load_free_gib), page_size=plain(page_size),
                                       resolution=plain(resolution))
    except KvModelError as exc:
        raise AnsibleFilterError("mem_fraction_for_tokens: %s" % exc)


class FilterModule:
    def filters(self):
        return {"mem_fraction_for_tokens": kv_mem_fraction_for_tokens}

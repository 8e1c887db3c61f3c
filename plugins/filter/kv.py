# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""SGLang's KV-cache arithmetic as Jinja filters: kv_cell_size, kv_tokens, mem_fraction_for_tokens.

Documentation: kv_cell_size.yml, kv_tokens.yml and mem_fraction_for_tokens.yml beside this file.
"""
from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.llmserve.sglang.plugins.plugin_utils.plain import plain

from ansible_collections.llmserve.sglang.plugins.module_utils.kv_base import KvModelError
from ansible_collections.llmserve.sglang.plugins.module_utils.kv_cell import cell_size_bytes
from ansible_collections.llmserve.sglang.plugins.module_utils.kv_pool import (
    kv_budget_gib,
    max_total_num_tokens,
    mem_fraction_for_tokens,
)
from ansible_collections.llmserve.sglang.plugins.module_utils.kv_shape import model_shape


def kv_cell_size(config, tp_size=1, dp_size=1, enable_dp_attention=False, kv_cache_dtype="auto",
                 sglang_version=None, speculative_algorithm=None, draft_layers=None, dtype="auto",
                 swa_full_tokens_ratio=0.8):
    """Bytes one KV token takes per GPU for a config.json dict."""
    if not isinstance(config, dict):
        raise AnsibleFilterError("kv_cell_size expects a config.json dictionary (e.g. from from_json), got %s"
                                 % type(config).__name__)
    try:
        shape = model_shape(config, dtype=plain(dtype))
        return cell_size_bytes(shape, tp_size=plain(tp_size), dp_size=plain(dp_size),
                               enable_dp_attention=bool(enable_dp_attention), kv_cache_dtype=plain(kv_cache_dtype),
                               sglang_version=plain(sglang_version), speculative_algorithm=plain(speculative_algorithm),
                               draft_layers=plain(draft_layers), swa_full_tokens_ratio=plain(swa_full_tokens_ratio))
    except KvModelError as exc:
        raise AnsibleFilterError("kv_cell_size: %s" % exc)


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


def kv_mem_fraction_for_tokens(target_tokens, cell, pre_load_free_gib, post_load_free_gib, page_size=1,
                               resolution=None):
    """The smallest --mem-fraction-static that gives at least target_tokens."""
    try:
        return mem_fraction_for_tokens(plain(target_tokens), plain(cell), plain(pre_load_free_gib),
                                       plain(post_load_free_gib), page_size=plain(page_size),
                                       resolution=plain(resolution))
    except KvModelError as exc:
        raise AnsibleFilterError("mem_fraction_for_tokens: %s" % exc)


class FilterModule(object):
    def filters(self):
        return {
            "kv_cell_size": kv_cell_size,
            "kv_tokens": kv_tokens,
            "mem_fraction_for_tokens": kv_mem_fraction_for_tokens,
        }

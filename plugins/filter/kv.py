# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""SGLang's KV-cache arithmetic as Jinja filters: kv_cell_size, kv_tokens, mem_fraction_for_tokens.

Documentation: kv_cell_size.yml, kv_tokens.yml and mem_fraction_for_tokens.yml beside this file.
"""
from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.llmserve.sglang.plugins.module_utils.kv_memory import (
    KvModelError,
    cell_size_bytes,
    kv_budget_gib,
    max_total_num_tokens,
    mem_fraction_for_tokens,
    model_shape,
)


def _plain(value):
    """Jinja hands over its own int/float/str subclasses (and AnsibleUnsafe text); the library wants plain ones."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    return value


def kv_cell_size(config, tp_size=1, dp_size=1, enable_dp_attention=False, kv_cache_dtype="auto",
                 sglang_version=None, speculative_algorithm=None, draft_layers=None, dtype="auto",
                 swa_full_tokens_ratio=0.8):
    """Bytes one KV token takes per GPU for a config.json dict."""
    if not isinstance(config, dict):
        raise AnsibleFilterError("kv_cell_size expects a config.json dictionary (e.g. from from_json), got %s"
                                 % type(config).__name__)
    try:
        shape = model_shape(config, dtype=_plain(dtype))
        return cell_size_bytes(shape, tp_size=_plain(tp_size), dp_size=_plain(dp_size),
                               enable_dp_attention=bool(enable_dp_attention), kv_cache_dtype=_plain(kv_cache_dtype),
                               sglang_version=_plain(sglang_version), speculative_algorithm=_plain(speculative_algorithm),
                               draft_layers=_plain(draft_layers), swa_full_tokens_ratio=_plain(swa_full_tokens_ratio))
    except KvModelError as exc:
        raise AnsibleFilterError("kv_cell_size: %s" % exc)


def kv_tokens(cell, pre_load_free_gib, post_load_free_gib, mem_fraction_static, page_size=1, max_total_tokens=None,
              sglang_version=None, speculative_algorithm=None, max_running_requests=None, speculative_num_steps=None,
              speculative_eagle_topk=None, speculative_num_draft_tokens=None):
    """max_total_num_tokens for a cell size (bytes) and P, A (GiB) and f."""
    try:
        budget = kv_budget_gib(_plain(pre_load_free_gib), _plain(post_load_free_gib), _plain(mem_fraction_static))
        return max_total_num_tokens(budget, _plain(cell), page_size=_plain(page_size),
                                    max_total_tokens=_plain(max_total_tokens), sglang_version=_plain(sglang_version),
                                    speculative_algorithm=_plain(speculative_algorithm),
                                    max_running_requests=_plain(max_running_requests),
                                    speculative_num_steps=_plain(speculative_num_steps),
                                    speculative_eagle_topk=_plain(speculative_eagle_topk),
                                    speculative_num_draft_tokens=_plain(speculative_num_draft_tokens))
    except KvModelError as exc:
        raise AnsibleFilterError("kv_tokens: %s" % exc)


def kv_mem_fraction_for_tokens(target_tokens, cell, pre_load_free_gib, post_load_free_gib, page_size=1,
                               resolution=None):
    """The smallest --mem-fraction-static that gives at least target_tokens."""
    try:
        return mem_fraction_for_tokens(_plain(target_tokens), _plain(cell), _plain(pre_load_free_gib),
                                       _plain(post_load_free_gib), page_size=_plain(page_size),
                                       resolution=_plain(resolution))
    except KvModelError as exc:
        raise AnsibleFilterError("mem_fraction_for_tokens: %s" % exc)


class FilterModule(object):
    def filters(self):
        return {
            "kv_cell_size": kv_cell_size,
            "kv_tokens": kv_tokens,
            "mem_fraction_for_tokens": kv_mem_fraction_for_tokens,
        }

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filter kv_cell_size: Bytes one KV-cache token takes per GPU in SGLang, for a model's config.json."""
from __future__ import annotations

DOCUMENTATION = r"""
name: kv_cell_size
short_description: Bytes one KV-cache token takes per GPU in SGLang, for a model's config.json
version_added: 1.0.0
author:
  - llmserve.sglang contributors (@llmserve)
description:
  - Computes SGLang's per-token KV cell (bytes per token per GPU) from a Hugging Face C(config.json) dictionary,
    the way the given SGLang release divides its KV budget by it.
  - MHA/GQA is max(1, kv_heads // tp) * (head_dim + v_head_dim) * layers * dtype bytes (before 0.5.7,
    head_dim * 2); MLA (DeepSeek-V3, Kimi-K2) is (kv_lora_rank + qk_rope_head_dim) * layers * dtype bytes and
    is not divided by TP; the DeepSeek-V3.2 indexer, hybrid sliding-window pools and (0.5.14 and later)
    EAGLE-family drafts are added as SGLang adds them.
  - Multimodal configs are followed into C(text_config), C(language_config), C(llm_config) or C(thinker_config).
options:
  _input:
    description: The model's C(config.json) as a dictionary (for example C(lookup('file', path\) | from_json)).
    type: dict
    required: true
  tp_size:
    description: Tensor-parallel size.
    type: int
    default: 1
  dp_size:
    description: Data-parallel size (only matters with O(enable_dp_attention)).
    type: int
    default: 1
  enable_dp_attention:
    description: SGLang's C(--enable-dp-attention); KV heads are then split over O(tp_size) // O(dp_size).
    type: bool
    default: false
  kv_cache_dtype:
    description: SGLang's C(--kv-cache-dtype); V(auto) is the model dtype (or fp8_e4m3 for checkpoints that ask for it).
    type: str
    default: auto
    choices: [auto, bf16, bfloat16, fp8_e4m3, fp8_e5m2, mxfp8, fp4_e2m1, nvfp4, fp4_mx_block16]
  sglang_version:
    description: The SGLang release, such as V(0.5.9); omitted means the newest release checked (0.5.23).
    type: str
  speculative_algorithm:
    description: SGLang's C(--speculative-algorithm); from 0.5.14 the draft's KV layers are part of the cell.
    type: str
    choices: [EAGLE, EAGLE3, NEXTN, STANDALONE, NGRAM]
  draft_layers:
    description: KV layers of the draft (default NEXTN the model's C(num_nextn_predict_layers), EAGLE/EAGLE3 1).
    type: int
  dtype:
    description: SGLang's C(--dtype), the model dtype.
    type: str
    default: auto
  swa_full_tokens_ratio:
    description: SGLang's C(--swa-full-tokens-ratio) (hybrid sliding-window models only).
    type: float
    default: 0.8
"""

EXAMPLES = r"""
- name: Cell of Llama-3.1-8B in bf16 on one GPU (131072)
  ansible.builtin.debug:
    msg: "{{ lookup('ansible.builtin.file', '/models/Llama-3.1-8B/config.json') | from_json | llmserve.sglang.kv_cell_size }}"

- name: Cell of DeepSeek-V3 on TP8 with an fp8 KV cache (35136)
  ansible.builtin.set_fact:
    cell: "{{ deepseek_config | llmserve.sglang.kv_cell_size(tp_size=8, kv_cache_dtype='fp8_e4m3') }}"
"""

RETURN = r"""
_value:
  description:
    - Bytes per token per GPU; an integer, except for hybrid sliding-window models on SGLang 0.5.11 and later,
      whose cell carries the float O(swa_full_tokens_ratio).
  type: raw
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.llmserve.sglang.plugins.plugin_utils.plain import plain
from ansible_collections.llmserve.sglang.plugins.module_utils.capacity.kv_base import KvModelError
from ansible_collections.llmserve.sglang.plugins.module_utils.capacity.kv_cell import cell_size_bytes
from ansible_collections.llmserve.sglang.plugins.module_utils.capacity.kv_shape import model_shape


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


class FilterModule:
    def filters(self):
        return {"kv_cell_size": kv_cell_size}

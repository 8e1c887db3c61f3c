#!/usr/bin/python
# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

DOCUMENTATION = r"""
module: kv_capacity
short_description: Predict SGLang's KV-cache pool for a model and --mem-fraction-static, and the fraction a target needs
version_added: 1.0.0
author:
  - llmserve.sglang contributors (@llmserve)
description:
  - Computes, with SGLang's own arithmetic, the KV-cache pool SGLang builds per GPU for a model (its Hugging Face
    C(config.json)), the server arguments, the free GPU memory before the weights load (O(pre_load_free_gib), P)
    and after (O(post_load_free_gib), A), and O(mem_fraction_static) (f).
  - "The budget is A - P * (1 - f) GiB (GiB = bytes / 2**30, SGLang's \"GB\"); the pool gets
    int(budget * 2**30) // cell tokens, capped by O(max_total_tokens) and rounded down to O(page_size)."
  - "The cell (bytes per token per GPU) is SGLang's: MHA/GQA max(1, kv_heads // tp) * (head_dim + v_head_dim) *
    layers * dtype bytes; MLA (DeepSeek-V3, Kimi-K2) (kv_lora_rank + qk_rope_head_dim) * layers * dtype bytes,
    not divided by TP; plus the DeepSeek-V3.2 indexer, hybrid sliding-window pools and speculative drafts as the
    given O(sglang_version) does them."
  - The arithmetic follows the SGLang release given in O(sglang_version) (RV(sglang_era)). Releases before 0.5.7
    (V(classic)) add EAGLE headroom tokens outside the budget; 0.5.7 to 0.5.13 (V(mixin)) keep the draft's KV
    outside the budget; 0.5.14 and later (V(current)) count the draft's KV in the cell and, for multimodal
    models, reserve 100 MiB of the budget (from 0.5.18).
  - With O(target_tokens), also returns the smallest O(mem_fraction_static) that gives at least that many tokens
    (RV(mem_fraction_for_target)). With O(startup_facts) (the result of M(llmserve.sglang.sglang_startup_facts)),
    P, A and the server arguments come from the startup log, and the prediction is compared with the logged
    token count (RV(prediction_error_pct)).
  - The module only reads O(model_config) and computes; it never changes anything.
attributes:
  check_mode:
    support: full
    details: This module only reads and computes; it behaves the same in check mode.
extends_documentation_fragment:
  - llmserve.sglang.attributes
options:
  model_config:
    description:
      - The model's Hugging Face configuration, as the path of a C(config.json), the path of a model directory
        that holds one (a Hugging Face cache directory C(models--org--name) with a single snapshot works too), or
        the configuration itself as a dictionary.
      - Multimodal models are followed into C(text_config), C(language_config), C(llm_config) or C(thinker_config).
      - Paths are read on the managed host, and only a regular file of at most 16 MiB is read. A FIFO or a device is
        refused without blocking, and the kernel follows no symlink (each one is resolved a component at a time).
        With O(unit), only what that unit's C(User=) could read (docs/DESIGN.md, "Trust").
    type: raw
    required: true
  unit:
    description:
      - The systemd unit whose server uses the model. Its files (C(config.json), the safetensors index) are then read
        only where the unit's C(User=) could read them, so that a symlink that user planted to a root-only file is
        refused. Give it whenever the path comes from that server (its startup log, a directory it downloaded into).
    type: str
  startup_facts:
    description:
      - The result of M(llmserve.sglang.sglang_startup_facts) for a server started with this model.
      - Supplies O(pre_load_free_gib), O(post_load_free_gib) and, from its C(server_args), O(mem_fraction_static),
        O(tp_size), O(dp_size), O(enable_dp_attention), O(kv_cache_dtype), O(page_size), O(max_total_tokens),
        O(speculative_algorithm) and the speculative settings when the log had them. Options given explicitly win.
      - Its C(max_total_num_tokens) (else C(kv_tokens)) is compared with the prediction.
    type: dict
  mem_fraction_static:
    description:
      - "SGLang's C(--mem-fraction-static), in (0, 1): the value the pool is sized with."
      - Default from O(startup_facts), its C(mem_fraction_static) (with SGLang 0.4.x and a multimodal model, the
        value the log's C(Automatically reduce --mem-fraction-static to X) line names, not the server_args one).
      - When neither gives it, SGLang's own default for these GPUs, arguments and version is inferred (see
        O(gpu_memory_total_mib)) and RV(mem_fraction_static_source) says V(inferred_default).
    type: float
  gpu_memory_total_mib:
    description:
      - Total memory of one GPU in MiB (M(llmserve.sglang.gpu_info)'s C(memory_total_mib)), to infer SGLang's
        default O(mem_fraction_static) when it is not known.
      - Without it the inference takes the free memory before the weights load (P) as the GPU's size, which is
        a little smaller; the warning says so.
    type: int
  checkpoint_bytes:
    description:
      - The checkpoint's size in bytes (C(metadata.total_size) of C(model.safetensors.index.json)), to check the
        weights memory the log reports against it.
      - Default from the C(model.safetensors.index.json) beside O(model_config) when that is a path.
    type: int
  disable_radix_cache:
    description:
      - C(--disable-radix-cache); changes how a hybrid linear-attention model's state pool is sized.
      - With O(max_running_requests), SGLang 0.5.14 and later size a gpt-oss sliding-window pool from a request cap
        (window + 128 + 2 x page tokens a request, plus 2 prefill chunks, 1 without the overlap schedule, plus a
        page) and give the rest to the full pool; O(chunked_prefill_size) is then needed.
    type: bool
  environment:
    description:
      - The server's environment variables; only those that change the sizing are read. Default, with O(unit), what
        the unit's C(Environment=) and root-controlled C(EnvironmentFile=) set (only those variables are read).
      - With C(SGLANG_ENABLE_POST_CAPTURE_KV_SIZING) on (SGLang 0.5.16 and later; on by default for Muse Spark in
        0.5.23), SGLang sizes the pool of a model without MLA after CUDA-graph capture, and the module fails
        saying so instead of predicting.
    type: dict
  chunked_prefill_size:
    description:
      - C(--chunked-prefill-size) (the sliding-window request cap only). Default from the startup log, else what
        SGLang picks from O(gpu_memory_total_mib) (divided among the DP ranks with DP attention), as it does when the
        flag is not given.
    type: int
  disable_overlap_schedule:
    description: C(--disable-overlap-schedule) (the sliding-window request cap only). Default from the startup log.
    type: bool
  max_mamba_cache_size:
    description: C(--max-mamba-cache-size), the request slots of a hybrid linear-attention model's state pool.
    type: int
  mamba_full_memory_ratio:
    description: C(--mamba-full-memory-ratio), state pool to KV pool memory (SGLang's default 0.9).
    type: float
  mamba_ssm_dtype:
    description: C(--mamba-ssm-dtype), the SSM state's dtype (default the config's C(mamba_ssm_dtype) from SGLang 0.5.9, else float32).
    type: str
    choices: [float32, bfloat16, float16]
  pre_load_free_gib:
    description:
      - Free GPU memory before the weights load, in GiB, the minimum over the ranks (P).
      - SGLang's C(Load weight begin. avail mem=...) value. Required unless O(startup_facts) has it.
    type: float
  post_load_free_gib:
    description:
      - Free GPU memory after the weights load, in GiB, the minimum over the ranks (A).
      - SGLang's C(Load weight end. ... avail mem=...) value. Required unless O(startup_facts) has it.
    type: float
  tp_size:
    description: Tensor-parallel size (C(--tp-size)). Default 1.
    type: int
  dp_size:
    description: Data-parallel size (C(--dp-size)); each replica or attention-DP rank has its own pool. Default 1.
    type: int
  enable_dp_attention:
    description: C(--enable-dp-attention); KV heads are then split over O(tp_size) // O(dp_size) ranks. Default false.
    type: bool
  kv_cache_dtype:
    description:
      - C(--kv-cache-dtype). V(auto) is the model's dtype, or fp8_e4m3 when the checkpoint's quantization config
        says C(kv_cache_quant_algo=FP8) and the release reads it (from 0.5.3rc2). Default V(auto).
      - FP4 on MHA models is supported only for SGLang before 0.5.16 (later, the attention backend decides the
        cell).
    type: str
    choices: [auto, bf16, bfloat16, fp8_e4m3, fp8_e5m2, mxfp8, fp4_e2m1, nvfp4, fp4_mx_block16]
  dtype:
    description: SGLang's C(--dtype) (the model dtype V(auto) resolves the KV cache to).
    type: str
    choices: [auto, bfloat16, float16, half, float32, float]
    default: auto
  page_size:
    description: C(--page-size); the token count is rounded down to a multiple of it. Default 1.
    type: int
  max_total_tokens:
    description: C(--max-total-tokens), an upper bound on the pool (it can only shrink it).
    type: int
  sglang_version:
    description:
      - The SGLang release the server runs, such as V(0.5.9) or V(0.5.5.post3).
      - When not given (and not in O(startup_facts)), the newest release this collection was checked against
        (0.5.23) is assumed.
    type: str
  speculative_algorithm:
    description: C(--speculative-algorithm).
    type: str
    choices: [EAGLE, EAGLE3, NEXTN, STANDALONE, NGRAM]
  speculative_draft_layers:
    description:
      - KV layers of the draft model (its C(num_nextn_predict_layers), else its C(num_hidden_layers)), which SGLang
        0.5.14 and later add to the cell.
      - Default for V(NEXTN) the model's C(num_nextn_predict_layers), for V(EAGLE) and V(EAGLE3) 1; V(STANDALONE)
        needs it.
    type: int
  speculative_num_steps:
    description: C(--speculative-num-steps) (classic EAGLE headroom only).
    type: int
  speculative_eagle_topk:
    description: C(--speculative-eagle-topk) (classic EAGLE headroom only).
    type: int
  speculative_num_draft_tokens:
    description: C(--speculative-num-draft-tokens) (classic EAGLE headroom only).
    type: int
  max_running_requests:
    description: C(--max-running-requests) (classic EAGLE headroom, where speculative decoding defaults it to 48).
    type: int
  swa_full_tokens_ratio:
    description: C(--swa-full-tokens-ratio), sliding-window to full-attention tokens for hybrid sliding-window models.
    type: float
    default: 0.8
  target_tokens:
    description: A token count to size for; RV(mem_fraction_for_target) is the smallest fraction that gives it.
    type: int
  free_after_start_gib:
    description:
      - Free GPU memory per GPU once the server is up (after CUDA-graph capture), MIN over ranks, for the idle
        headroom estimate (RV(headroom_mem_fraction)).
      - Default from O(startup_facts), its C(post_capture_free_gib), else its C(available_gpu_mem_gib).
    type: float
  safety_margin_gib:
    description: GiB per GPU kept free in the idle headroom estimate.
    type: float
    default: 2.0
  hicache_ratio:
    description:
      - What-if for C(--enable-hierarchical-cache) with C(--hicache-ratio) (SGLang's default is 2.0); the host pool
        is this many times the GPU pool (RV(hicache_host_tokens)). Omit for no what-if.
    type: float
  hicache_size_gb:
    description: What-if for C(--hicache-size) (GB of 1e9 bytes per rank); when set and above 0 it wins over O(hicache_ratio).
    type: float
notes:
  - Everything is per GPU (per rank); with O(dp_size) > 1 each replica or attention-DP rank has a pool of
    RV(max_total_num_tokens) tokens (RV(total_kv_tokens) in all).
  - Hybrid linear-attention models (Qwen3-Next, Qwen3.5, Nemotron-H, Falcon-H1) get their state pool first
    (RV(mamba_cache_size), RV(mamba_state_gib)); the KV pool gets the rest, with only the full-attention layers in
    the cell.
  - When the weights memory the log reports does not fit the checkpoint, or ranks of one stage report different
    weights, another process allocated on the GPUs while SGLang loaded. The module then warns, lists why in
    RV(untrusted), and returns V(null) for every figure computed from the log's memory (tokens, budgets, fractions)
    instead of a confident wrong answer.
  - A configuration the stated SGLang release does not start with fails with "SGLang <version> does not start with
    this" and the reason (a hybrid sliding-window model with a page size > 1 on 0.5.0rc2 - 0.5.6.post2); a model
    class the release does not have (gpt-oss or Qwen3.5 on 0.4.6) is said in RV(issues).
  - Not modelled, and failing with a message that says so, are other linear-attention kinds (Kimi-Linear, LFM2,
    Granite-4.0-H, Jamba), speculative decoding with a hybrid linear-attention model, DeepSeek-V4 compressed
    attention, pipeline parallelism (MIN over stages), DFLASH drafts, post-capture KV sizing (see O(environment))
    and environment overrides of the multimodal reservation.
seealso:
  - name: SGLang server arguments
    description: C(--mem-fraction-static), C(--max-total-tokens), C(--kv-cache-dtype) and the others.
    link: https://docs.sglang.ai/advanced_features/server_arguments.html
"""

EXAMPLES = r"""
- name: Predict the KV pool of Kimi-K2.5 on TP8 at 0.88
  llmserve.sglang.kv_capacity:
    model_config: /models/Kimi-K2.5
    tp_size: 8
    mem_fraction_static: 0.88
    pre_load_free_gib: 94.04
    post_load_free_gib: 21.71
    sglang_version: 0.5.9
    target_tokens: 250000
  register: kv

- name: Show the fraction 250k tokens need
  ansible.builtin.debug:
    msg: "{{ kv.max_total_num_tokens }} tokens now; {{ kv.mem_fraction_for_target }} gives 250000"

- name: Read the startup log, then check the prediction against it
  llmserve.sglang.sglang_startup_facts:
    unit: sglang.service
  register: facts

- name: Compare with the log
  llmserve.sglang.kv_capacity:
    model_config: /models/Kimi-K2.5/config.json
    startup_facts: "{{ facts }}"
    sglang_version: 0.5.9
  register: kv_check

- name: Fail when the model is more than 1% off
  ansible.builtin.assert:
    that: kv_check.prediction_error_pct | abs < 1
"""

RETURN = r"""
sglang_era:
  description: V(classic) (before 0.5.7), V(mixin) (0.5.7 to 0.5.13) or V(current) (0.5.14 and later).
  returned: success
  type: str
  sample: mixin
attention:
  description: V(mha), V(mla) or V(nsa) (MLA with the DeepSeek-V3.2 indexer).
  returned: success
  type: str
  sample: mla
kv_cache_dtype:
  description: The KV cache dtype O(kv_cache_dtype) resolved to.
  returned: success
  type: str
  sample: bfloat16
cell_size_bytes:
  description:
    - Bytes one token takes in the pool per GPU, as SGLang divides the budget by it (the draft's layers included
      from 0.5.14). A float for hybrid sliding-window models on SGLang 0.5.11 and later.
  returned: success
  type: raw
  sample: 70272
kv_budget_gib:
  description: A - P * (1 - f), in GiB. Zero or less means SGLang refuses to start.
  returned: success
  type: float
  sample: 10.4252
reserved_gib:
  description: P * (1 - f), in GiB, left for CUDA graphs, activations and allocator slack.
  returned: success
  type: float
  sample: 11.2848
mm_reservation_gib:
  description: GiB a multimodal model reserves out of the budget (SGLang 0.5.18 and later), else 0.
  returned: success
  type: float
  sample: 0.0
max_total_num_tokens:
  description: The tokens SGLang's pool gets (its C(max_total_num_tokens)); 0 when SGLang would refuse to start.
  returned: success
  type: int
  sample: 159294
swa_max_total_num_tokens:
  description: Tokens of the sliding-window pool of a hybrid sliding-window model, else V(null).
  returned: success
  type: int
  sample: null
eagle_headroom_tokens:
  description: EAGLE headroom tokens classic SGLang adds outside the budget (included in RV(max_total_num_tokens)).
  returned: success
  type: int
  sample: 0
mem_fraction_static:
  description: The O(mem_fraction_static) the computation used (given, from O(startup_facts), or inferred).
  returned: success
  type: float
  sample: 0.88
mem_fraction_static_source:
  description:
    - Where RV(mem_fraction_static) came from. V(option), V(startup_log) (the log's server_args),
      V(multimodal_reduction) (the log's C(Automatically reduce) line), or V(inferred_default) (SGLang's default
      for these GPUs and this version, inferred).
  returned: success
  type: str
  sample: startup_log
mem_fraction_static_logged:
  description: The value the log's server_args printed, when it differs from RV(mem_fraction_static), else V(null).
  returned: success
  type: float
  sample: null
untrusted:
  description: Why the startup log's memory numbers cannot be trusted (empty when they can); see the notes.
  returned: success
  type: list
  elements: str
  sample: []
state_bytes_per_request:
  description: Bytes of one request's state per GPU of a hybrid linear-attention model, else V(null).
  returned: success
  type: int
  sample: 25755648
mamba_cache_size:
  description: Request slots of a hybrid linear-attention model's state pool (SGLang's max_mamba_cache_size), else V(null).
  returned: success
  type: int
  sample: 186
mamba_state_gib:
  description: GiB per GPU the state pool takes out of the budget, else V(null).
  returned: success
  type: float
  sample: 4.4855
free_after_start_gib:
  description: The free memory after start the idle headroom estimate used, or V(null) when none was known.
  returned: success
  type: float
  sample: 7.43
headroom_mem_fraction:
  description:
    - Upper estimate of how far the fraction could rise from the idle headroom, f + (free after start - safety) / P;
      V(null) without the free memory after start. Activations under load need part of that memory, so the
      C(kv_tune) role verifies it under load.
  returned: success
  type: float
  sample: 0.93
headroom_kv_budget_gib:
  description: The KV budget at RV(headroom_mem_fraction), or V(null).
  returned: success
  type: float
  sample: 15.13
headroom_tokens:
  description: The tokens at RV(headroom_mem_fraction), or V(null).
  returned: success
  type: int
  sample: 231254
hicache_host_tokens:
  description: Tokens of the hierarchical-cache host pool per rank for O(hicache_ratio) or O(hicache_size_gb), else V(null).
  returned: success
  type: int
  sample: 318589
hicache_host_gib_per_rank:
  description: Host RAM that pool takes per rank, GiB, else V(null).
  returned: success
  type: float
  sample: 20.85
hicache_host_gib_total:
  description: Host RAM for every rank of the host (O(tp_size), times O(dp_size) without DP attention), GiB, else V(null).
  returned: success
  type: float
  sample: 166.8
kv_pool_gib:
  description: GiB the pool takes per GPU (tokens times cell; the draft's KV included from 0.5.14).
  returned: success
  type: float
  sample: 10.4251
kv_pools:
  description: Independent pools (O(dp_size)).
  returned: success
  type: int
  sample: 1
total_kv_tokens:
  description: RV(max_total_num_tokens) times RV(kv_pools).
  returned: success
  type: int
  sample: 159294
min_mem_fraction_static:
  description: The fraction at which the budget is 0, 1 - A / P (the multimodal reservation included).
  returned: success
  type: float
  sample: 0.769141
mem_fraction_for_target:
  description:
    - The smallest O(mem_fraction_static) giving at least O(target_tokens), exact to the token; V(null) without
      O(target_tokens) or when no fraction below 1 reaches it (see RV(issues)). Round it up, never down.
  returned: success
  type: float
  sample: 0.943124999902645
issues:
  description: Why the server would not start, why the target is out of reach, or that the release has no class for
    the model; each is also issued as a warning.
  returned: success
  type: list
  elements: str
  sample: []
observed_tokens:
  description: The token count in O(startup_facts).
  returned: when O(startup_facts) is given
  type: int
  sample: 159277
predicted_tokens:
  description: RV(max_total_num_tokens), for comparison with RV(observed_tokens).
  returned: when O(startup_facts) is given
  type: int
  sample: 159294
prediction_error_pct:
  description: (predicted - observed) / observed * 100; V(null) without an observed count.
  returned: when O(startup_facts) is given
  type: float
  sample: 0.0107
inputs:
  description: The values the computation used, after merging O(startup_facts) with the options.
  returned: success
  type: dict
  sample: {"tp_size": 8, "mem_fraction_static": 0.88, "pre_load_free_gib": 94.04, "post_load_free_gib": 21.71}
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmserve.sglang.plugins.module_utils.host import host_files
from ansible_collections.llmserve.sglang.plugins.module_utils.startup.boot_trust import findings
from ansible_collections.llmserve.sglang.plugins.module_utils.checks import parse_bool, parse_number
from ansible_collections.llmserve.sglang.plugins.module_utils.capacity.kv_base import KvModelError
from ansible_collections.llmserve.sglang.plugins.module_utils.capacity.kv_capacity_report import capacity
from ansible_collections.llmserve.sglang.plugins.module_utils.service.server_args import SIZING_VARIABLES
from ansible_collections.llmserve.sglang.plugins.module_utils.capacity.kv_defaults import default_for_server_args
from ansible_collections.llmserve.sglang.plugins.module_utils.capacity.kv_shape import model_shape
from ansible_collections.llmserve.sglang.plugins.module_utils.host.host_commands import SystemctlError, unit_properties
from ansible_collections.llmserve.sglang.plugins.module_utils.capacity.model_config import (
    MAX_CONFIG_BYTES, load_checkpoint_size, load_model_config)
from ansible_collections.llmserve.sglang.plugins.module_utils.service.server_args import (
    MEMORY_ARGS, STATE_POOL_ARGS, canonical, mem_fraction_static, normalise)

# option -> its default when neither the options nor startup_facts give it. A value comes from the explicit option,
# else startup_facts.server_args, else the top level of startup_facts, typed the way module_utils/service/server_args.py
# reads SGLang's arguments. mem_fraction_static has its own order (merge_inputs).
MERGED = {
    "pre_load_free_gib": None, "post_load_free_gib": None, "tp_size": 1, "dp_size": 1,
    "enable_dp_attention": False, "kv_cache_dtype": "auto", "page_size": 1, "max_total_tokens": None,
    "sglang_version": None, "speculative_algorithm": None, "speculative_num_steps": None,
    "speculative_eagle_topk": None, "speculative_num_draft_tokens": None, "max_running_requests": None,
    "disable_radix_cache": False, "max_mamba_cache_size": None, "mamba_full_memory_ratio": None,
    "mamba_ssm_dtype": None, "chunked_prefill_size": None, "disable_overlap_schedule": False,
}
# What the formula computes from P and A: withheld when the log's memory numbers cannot be trusted.
FROM_THE_LOG = (
    "kv_budget_gib", "reserved_gib", "max_total_num_tokens", "swa_max_total_num_tokens", "eagle_headroom_tokens",
    "kv_pool_gib", "total_kv_tokens", "min_mem_fraction_static", "mem_fraction_for_target", "headroom_mem_fraction",
    "headroom_kv_budget_gib", "headroom_tokens", "hicache_host_tokens", "hicache_host_gib_per_rank",
    "hicache_host_gib_total", "predicted_tokens", "prediction_error_pct", "mamba_cache_size", "mamba_state_gib",
)


def build_module():
    return AnsibleModule(
        argument_spec=dict(
            model_config=dict(type="raw", required=True),
            startup_facts=dict(type="dict"),
            mem_fraction_static=dict(type="float"),
            gpu_memory_total_mib=dict(type="int"),
            checkpoint_bytes=dict(type="int"),
            disable_radix_cache=dict(type="bool"),
            chunked_prefill_size=dict(type="int"),
            environment=dict(type="dict"),
            disable_overlap_schedule=dict(type="bool"),
            max_mamba_cache_size=dict(type="int"),
            mamba_full_memory_ratio=dict(type="float"),
            mamba_ssm_dtype=dict(type="str", choices=["float32", "bfloat16", "float16"]),
            pre_load_free_gib=dict(type="float"),
            post_load_free_gib=dict(type="float"),
            tp_size=dict(type="int"),
            dp_size=dict(type="int"),
            enable_dp_attention=dict(type="bool"),
            kv_cache_dtype=dict(type="str", choices=["auto", "bf16", "bfloat16", "fp8_e4m3", "fp8_e5m2", "mxfp8",
                                                     "fp4_e2m1", "nvfp4", "fp4_mx_block16"]),
            dtype=dict(type="str", default="auto", choices=["auto", "bfloat16", "float16", "half", "float32", "float"]),
            page_size=dict(type="int"),
            max_total_tokens=dict(type="int", no_log=False),
            sglang_version=dict(type="str"),
            speculative_algorithm=dict(type="str", choices=["EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM"]),
            speculative_draft_layers=dict(type="int"),
            speculative_num_steps=dict(type="int"),
            speculative_eagle_topk=dict(type="int"),
            speculative_num_draft_tokens=dict(type="int", no_log=False),
            max_running_requests=dict(type="int"),
            swa_full_tokens_ratio=dict(type="float", default=0.8, no_log=False),
            target_tokens=dict(type="int", no_log=False),
            free_after_start_gib=dict(type="float"),
            safety_margin_gib=dict(type="float", default=2.0),
            hicache_ratio=dict(type="float"),
            hicache_size_gb=dict(type="float"),
            unit=dict(type="str"),
        ),
        supports_check_mode=True,
    )


def _typed(name, value):
    if name == "mem_fraction_static":
        return mem_fraction_static({name: value}, KvModelError)
    if name in MEMORY_ARGS or name in STATE_POOL_ARGS:
        return normalise(name, value, KvModelError)
    if name == "disable_overlap_schedule":
        return parse_bool(name, value, KvModelError)
    if name == "sglang_version":
        return str(value)
    return parse_number(name, value, float, KvModelError)


def _fraction(params, facts, logged):
    """(f, source, the server_args value when it differs): the option, else the value that sized the logged pool
    (the multimodal reduction's, else server_args'), else None (main infers SGLang's default)."""
    logged_f = _typed("mem_fraction_static", logged["mem_fraction_static"]) \
        if logged.get("mem_fraction_static") is not None else None
    if params.get("mem_fraction_static") is not None:
        return params["mem_fraction_static"], "option", None
    if facts.get("mem_fraction_static") is not None:
        f = _typed("mem_fraction_static", facts["mem_fraction_static"])
        if facts.get("mem_fraction_static_source") == "multimodal_reduction":
            return f, "multimodal_reduction", logged_f
        return f, "startup_log", None
    if logged_f is not None:
        return logged_f, "startup_log", None
    return None, None, None


def merge_inputs(params):
    """Explicit options, else startup_facts.server_args, else startup_facts, else the default."""
    facts = params.get("startup_facts") or {}
    logged = facts.get("server_args") if isinstance(facts.get("server_args"), dict) else {}
    logged = {canonical(key): value for key, value in logged.items()}
    merged = {}
    for name, default in MERGED.items():
        value = params.get(name)
        if value is None:
            for source in (logged, facts):
                raw = source.get(name)
                if raw is None and name == "sglang_version":
                    raw = source.get("version")
                if raw is not None:
                    value = _typed(name, raw)
                    break
        merged[name] = default if value is None else value
    for name in ("pre_load_free_gib", "post_load_free_gib"):
        if merged[name] is None:
            raise KvModelError("%s is required: give it, or startup_facts that have it" % name)
    f, source, logged_f = _fraction(params, facts, logged)
    merged.update(mem_fraction_static=f, mem_fraction_static_source=source, mem_fraction_static_logged=logged_f)
    merged["memory_from_log"] = params.get("pre_load_free_gib") is None and params.get("post_load_free_gib") is None
    return merged


def infer_fraction(inputs, shape, facts, gpu_memory_total_mib):
    """SGLang's default --mem-fraction-static for these GPUs, arguments and version, and the warning that says it was
    inferred (and from what GPU size)."""
    args = {canonical(k): v for k, v in ((facts or {}).get("server_args") or {}).items()}
    gpu = gpu_memory_total_mib
    basis = "%d MiB GPUs" % gpu if gpu else None
    if not gpu:
        gpu = int(inputs["pre_load_free_gib"] * 1024)
        basis = "the free memory before the weights load (%.2f GiB) taken as the GPU's size" % inputs["pre_load_free_gib"]
    # the merged inputs win over the log's server_args, as everywhere else in this module
    merged = dict(args, **{name: inputs[name] for name in (
        "tp_size", "dp_size", "enable_dp_attention", "speculative_algorithm", "max_running_requests",
        "max_total_tokens")})
    f = default_for_server_args(gpu, merged, shape=shape, sglang_version=inputs["sglang_version"])
    return f, ("mem_fraction_static is neither an option nor in the startup log: inferred SGLang's default %s for SGLang "
               "%s from %s; give mem_fraction_static if the server was started with another value"
               % (f, inputs["sglang_version"] or "(newest)", basis))


def checkpoint_size(params, read=None):
    """The option, else the index beside a model_config path; None when neither says."""
    if params.get("checkpoint_bytes"):
        return params["checkpoint_bytes"]
    if isinstance(params.get("model_config"), str):
        return load_checkpoint_size(params["model_config"], read)
    return None


def model_reader(module, unit, warnings):
    """How the model's files are read, and the unit's environment variables that change the sizing (SIZING_VARIABLES
    of its Environment= and EnvironmentFile=; None without a unit). Files are read as the unit's User= when a unit is
    given (its server wrote them, perhaps a symlink to a root-only file), else by model_config's own safe reader.
    Either way a regular file only, no symlink followed by the kernel, no blocking open, bounded size (host_files)."""
    if not unit:
        return None, None
    try:
        state = unit_properties(module, unit, ["User", "LoadState", "Environment", "EnvironmentFiles"])
    except SystemctlError as exc:
        module.fail_json(msg="cannot tell the user of %s: %s" % (unit, exc))
    if state.get("LoadState") == "not-found":
        module.fail_json(msg="%s does not exist on the host: give the unit whose server uses the model" % unit)
    uid, gids = host_files.service_user(state.get("User"))
    if uid is None:
        module.fail_json(msg="%s runs as User=%s, which does not exist on the host" % (unit, state.get("User")))
    environment, problem = host_files.unit_variables(state, SIZING_VARIABLES)
    if problem:
        warnings.append("the environment of %s is not fully known (%s): %s is taken as unset"
                        % (unit, problem, ", ".join(name for name in SIZING_VARIABLES if name not in environment)))
    return (lambda path: host_files.read_as_user(os.path.abspath(path), uid, gids, MAX_CONFIG_BYTES)[0]), environment


def main():
    module = build_module()
    params = module.params
    warnings = []
    untrusted = []
    try:
        inputs = merge_inputs(params)
        read, unit_environment = model_reader(module, params["unit"], warnings)
        environment = params["environment"] if params["environment"] is not None else unit_environment
        shape = model_shape(load_model_config(params["model_config"], read), dtype=params["dtype"])
        if inputs["mem_fraction_static"] is None:
            inputs["mem_fraction_static"], why = infer_fraction(inputs, shape, params["startup_facts"],
                                                                params["gpu_memory_total_mib"])
            inputs["mem_fraction_static_source"] = "inferred_default"
            warnings.append(why)
        # P and A given as options are the caller's own numbers; from the log, they are checked first.
        if inputs.pop("memory_from_log") and params["startup_facts"]:
            untrusted = findings(params["startup_facts"], checkpoint_size(params, read))
        result = capacity(
            shape, inputs["mem_fraction_static"], inputs["pre_load_free_gib"], inputs["post_load_free_gib"],
            tp_size=inputs["tp_size"], dp_size=inputs["dp_size"], enable_dp_attention=bool(inputs["enable_dp_attention"]),
            kv_cache_dtype=inputs["kv_cache_dtype"], page_size=inputs["page_size"],
            sglang_version=inputs["sglang_version"], target_tokens=params["target_tokens"],
            max_total_tokens=inputs["max_total_tokens"], speculative_algorithm=inputs["speculative_algorithm"],
            draft_layers=params["speculative_draft_layers"], speculative_num_steps=inputs["speculative_num_steps"],
            speculative_eagle_topk=inputs["speculative_eagle_topk"],
            speculative_num_draft_tokens=inputs["speculative_num_draft_tokens"],
            max_running_requests=inputs["max_running_requests"],
            swa_full_tokens_ratio=params["swa_full_tokens_ratio"], observed=params["startup_facts"] or None,
            free_after_start_gib=params["free_after_start_gib"], safety_margin_gib=params["safety_margin_gib"],
            hicache_ratio=params["hicache_ratio"], hicache_size_gb=params["hicache_size_gb"],
            mamba_ssm_dtype=inputs["mamba_ssm_dtype"], mamba_full_memory_ratio=inputs["mamba_full_memory_ratio"],
            max_mamba_cache_size=inputs["max_mamba_cache_size"],
            disable_radix_cache=bool(inputs["disable_radix_cache"]),
            chunked_prefill_size=inputs["chunked_prefill_size"], gpu_memory_mib=params["gpu_memory_total_mib"],
            disable_overlap_schedule=bool(inputs["disable_overlap_schedule"]), environment=environment)
    except KvModelError as exc:
        module.fail_json(msg=str(exc))
    inputs["target_tokens"] = params["target_tokens"]
    result["mem_fraction_static_source"] = inputs["mem_fraction_static_source"]
    result["mem_fraction_static_logged"] = inputs["mem_fraction_static_logged"]
    result["untrusted"] = untrusted
    if untrusted:
        # A confident figure from wrong inputs is worse than none: keep what does not depend on P and A.
        result.update((key, None) for key in FROM_THE_LOG if key in result)
        result["issues"] = ["the startup log's memory numbers cannot be trusted: " + why for why in untrusted]
    for issue in warnings + result["issues"]:
        module.warn(issue)
    module.exit_json(changed=False, inputs=inputs, **result)


if __name__ == "__main__":
    main()

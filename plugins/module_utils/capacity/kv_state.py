# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The state pool of hybrid linear-attention models (Qwen3-Next, Qwen3.5, Nemotron-H, Falcon-H1): SGLang carves it
out of the KV budget before the KV pool is sized, so the KV pool gets ``rest - state`` and only the full-attention
layers count in its cell.

Read in SGLang's released code (``configs/mamba_utils.py``, ``model_runner.py`` / ``model_runner_kv_cache_mixin.py``
``handle_max_mamba_cache`` and ``mem_cache/kv_cache_configurator.py`` ``_handle_max_mamba_cache``, 0.5.2 - 0.5.23).

Bytes of one request's state per GPU (``state_bytes_per_request``), tp = the attention TP size:
``(conv_dim / tp * (conv_kernel - 1) * conv_bytes + num_heads / tp * head_dim * state_size * ssm_bytes) * layers``,
with ``conv_dim = intermediate_size + 2 * n_groups * state_size`` and n_groups raised to tp when tp does not divide it.
conv is bfloat16; ssm is --mamba-ssm-dtype, else (from 0.5.9) config.json's mamba_ssm_dtype, else float32.

How many request slots K the pool gets (``state_slots``), with rest = A - P * (1 - f) in GiB, r =
--mamba-full-memory-ratio (0.9), dp = the DP size (attention DP from 0.5.9):

- 0.5.2 - 0.5.3: radix cache is forced off; K = --max-mamba-cache-size, else --max-running-requests, else 512,
  then // dp. The pool takes K * per_request.
- 0.5.4 - 0.5.6: with radix cache on (the default; Nemotron-H and Falcon-H1 force it off),
  K = int(rest * r / (1 + r) * 2**30 // per_request), else as above (the ratio path ignores
  --max-mamba-cache-size); Qwen3-Next divides K by dp.
- 0.5.7 - 0.5.8: --max-mamba-cache-size or radix cache off: K = (that, else --max-running-requests, else 512) // dp;
  otherwise the ratio path.
- 0.5.9 - 0.5.16: --max-mamba-cache-size // dp; else radix off with --max-running-requests: that // dp; else the
  ratio path (also with radix off). From 0.5.13 K <= 0 stops SGLang ("Not enough GPU memory for hybrid").
- 0.5.17 on: the ratio path keeps one padding slot: K = int((budget - per_request) // per_request) and the pool
  takes (K + 1) * per_request; radix off with --max-running-requests: max(1, that // dp).

Not modelled (KvModelError or the note in DESIGN.md): speculative decoding with a hybrid model (SGLang reserves
per-draft-token state), pipeline parallelism, the 0.5.20+ ReplaySSM ring buffers (off by default).
"""
from __future__ import annotations

from typing import Any

from ansible_collections.llmserve.sglang.plugins.module_utils import checks
from ansible_collections.llmserve.sglang.plugins.module_utils.capacity.kv_base import GIB, KvModelError
from ansible_collections.llmserve.sglang.plugins.module_utils.capacity.kv_versions import release_of

V_STATE_RATIO = (0, 5, 4)      # mamba_full_memory_ratio: the state pool takes r / (1 + r) of the budget
V_STATE_EXPLICIT = (0, 5, 7)   # --max-mamba-cache-size is honoured with radix cache on
V_STATE_CONFIG = (0, 5, 9)     # config.json's mamba_ssm_dtype; radix off without --max-running-requests: ratio path
V_STATE_CHECKED = (0, 5, 13)   # "Not enough GPU memory for hybrid (mamba/linear-attention) state cache"
V_STATE_PAD_SLOT = (0, 5, 17)  # the padding slot is counted: K = (budget - per) // per, (K + 1) slots
DEFAULT_RATIO = 0.9
_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}

__all__ = ["state_bytes_per_request", "state_slots", "DEFAULT_RATIO"]


def _divide(value: int, tp: int, what: str) -> int:
    if value % tp:
        raise KvModelError("%s %d is not divisible by the attention TP size %d: SGLang refuses this split"
                           % (what, value, tp))
    return value // tp


def state_bytes_per_request(state: Any, attn_tp: int = 1, sglang_version: str | None = None,
                            mamba_ssm_dtype: str | None = None) -> int:
    """Bytes of one request's recurrent state on one GPU (module docstring). ``state`` is kv_shape.LinearState."""
    checks.integer("attention TP size", attn_tp, KvModelError, minimum=1)
    ssm = mamba_ssm_dtype
    if ssm is None and release_of(sglang_version) >= V_STATE_CONFIG:
        ssm = state.ssm_dtype
    ssm = str(ssm or "float32").replace("torch.", "")
    if ssm not in _DTYPE_BYTES:
        raise KvModelError("mamba_ssm_dtype %r is not one of %s" % (ssm, ", ".join(sorted(_DTYPE_BYTES))))
    groups = state.n_groups if state.n_groups % attn_tp == 0 else state.n_groups + (attn_tp - state.n_groups)
    conv_dim = state.intermediate_size + 2 * groups * state.state_size
    conv = _divide(conv_dim, attn_tp, "the conv state dimension") * (state.conv_kernel - 1) * _DTYPE_BYTES["bfloat16"]
    ssm_bytes = (_divide(state.num_heads, attn_tp, "the number of linear-attention heads") * state.head_dim
                 * state.state_size * _DTYPE_BYTES[ssm])
    return (conv + ssm_bytes) * state.layers


def state_slots(rest_gib: float, per_request: int, sglang_version: str | None = None, ratio: float | None = None,
                max_mamba_cache_size: int | None = None, disable_radix_cache: bool = False,
                max_running_requests: int | None = None, dp_size: int = 1,
                radix_forced_off: bool = False) -> tuple[int, float]:
    """(K, state_gib): the request slots of the state pool and the GiB it takes out of ``rest_gib`` (module
    docstring). K <= 0 means SGLang does not start (from 0.5.13 it says so; before, the pool is empty).
    ``radix_forced_off``: the model class turns radix cache off itself (Nemotron-H, Falcon-H1 in 0.5.4 - 0.5.6)."""
    rel = release_of(sglang_version)
    r = DEFAULT_RATIO if ratio is None else checks.number("mamba_full_memory_ratio", ratio, KvModelError, above=0)
    dp = checks.integer("dp_size", dp_size, KvModelError, minimum=1)
    radix_off = bool(disable_radix_cache) or rel < V_STATE_RATIO or (radix_forced_off and rel < V_STATE_EXPLICIT)
    budget = rest_gib * r / (1 + r) * GIB
    pad = 1 if rel >= V_STATE_PAD_SLOT else 0
    if rel < V_STATE_EXPLICIT:
        if radix_off:
            slots = (max_mamba_cache_size or max_running_requests or 512) // dp
        else:
            slots = int(budget // per_request)
    elif rel < V_STATE_CONFIG:
        if radix_off or max_mamba_cache_size is not None:
            slots = (max_mamba_cache_size or max_running_requests or 512) // dp
        else:
            slots = int(budget // per_request)
    elif max_mamba_cache_size is not None:
        slots = max_mamba_cache_size // dp
    elif radix_off and max_running_requests is not None:
        slots = max_running_requests // dp
        slots = max(1, slots) if pad else slots
    elif pad:
        slots = int((budget - per_request) // per_request)
    else:
        slots = int(budget // per_request)
    return slots, (slots + pad) * per_request / GIB

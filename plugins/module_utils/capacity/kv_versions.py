# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""SGLang version numbers and the eras of its memory code: which release computes the KV pool which way.

Every version computes ``rest = A - P * (1 - f)`` and divides it by the bytes one token takes in the pool (the
"cell"). What changed between versions is the cell and what happens around it; three eras matter (``kv_era``):

- ``classic`` (< 0.5.7, so 0.5.6.post2 included): ``model_runner.py`` ``profile_max_num_token`` /
  ``init_memory_pool``. MHA cell = heads * head_dim * 2 * L * bytes (v_head_dim ignored). With EAGLE, EAGLE3, NEXTN
  or STANDALONE the pool gets ``R*steps*topk + R*draft_tokens + 100`` tokens more, outside the budget.
- ``mixin`` (0.5.7 - 0.5.13): ``model_runner_kv_cache_mixin.py``. MHA cell uses head_dim + v_head_dim; no EAGLE
  headroom; the draft's KV pool is allocated after the target's, outside the budget.
- ``current`` (>= 0.5.14): ``pool_configurator.py`` / ``kv_cache_configurator.py``. EAGLE-family drafts are counted
  in the cell (``cell * D / L`` more), VLMs reserve SGLANG_VLM_CACHE_SIZE_MB (100 MiB) of the budget (>= 0.5.18).

Smaller changes inside an era are the ``V_*`` releases below, tested with ``since(version, V_...)``.
"""
from __future__ import annotations

import re
from typing import Any

from ansible_collections.llmserve.sglang.plugins.module_utils.capacity.kv_base import KvModelError

_VERSION_RE = re.compile(
    r"^\s*v?(?P<release>\d+(?:\.\d+)*)"
    r"(?:[-_.]?(?P<pre>a|b|c|rc|alpha|beta|pre|preview)[-_.]?(?P<pre_n>\d*))?"
    r"(?:[-_.]?(?:post|rev|r)[-_.]?(?P<post>\d*))?"
    r"(?:[-_.]?dev[-_.]?(?P<dev>\d*))?"
    r"(?:\+[a-z0-9]+(?:[-_.][a-z0-9]+)*)?\s*$",
    re.IGNORECASE)
_PRE_RANK = {"a": 0, "alpha": 0, "b": 1, "beta": 1, "c": 2, "rc": 2, "pre": 2, "preview": 2}

# The newest release whose code this module was checked against; None (no version given) means this one.
CURRENT_VERSION = "0.5.23"


def parse_version(version: Any) -> tuple[tuple[int, ...], tuple[int, int], int, float]:
    """PEP 440-style sort key for an SGLang version ("0.5.5.post3", "0.5.6rc1", "v0.5.9", "0.5.10.dev0+gabc")."""
    if not isinstance(version, str):
        raise KvModelError("sglang_version must be a string such as '0.5.9', got %r" % (version,))
    m = _VERSION_RE.match(version)
    if not m:
        raise KvModelError("sglang_version %r is not a version number such as 0.5.9 or 0.5.5.post3" % (version,))
    release = tuple(int(x) for x in m.group("release").split("."))
    release = release + (0,) * (3 - len(release)) if len(release) < 3 else release
    # dev < pre < final < post for one release
    if m.group("pre"):
        pre = (_PRE_RANK[m.group("pre").lower()], int(m.group("pre_n") or 0))
    elif m.group("dev") is not None and m.group("post") is None:
        pre = (-1, 0)
    else:
        pre = (3, 0)
    post = int(m.group("post") or 0) if m.group("post") is not None else -1
    dev = int(m.group("dev") or 0) if m.group("dev") is not None else float("inf")
    return release, pre, post, dev


def compare_versions(left: str, right: str) -> int:
    """-1, 0 or 1 as left <, ==, > right."""
    a, b = parse_version(left), parse_version(right)
    return (a > b) - (a < b)


def release_of(version: str | None) -> tuple[int, ...]:
    """The release segment (major, minor, micro) of a version; None means CURRENT_VERSION."""
    return parse_version(CURRENT_VERSION if version is None else version)[0][:3]


def since(version: str | None, threshold: tuple[int, ...]) -> bool:
    """True when `version` (None = current) is at or after release `threshold` (a tuple); pre-releases of a
    release count as that release (0.5.7rc1 has 0.5.7's code)."""
    return release_of(version) >= threshold


# Releases where the memory arithmetic changed (read in the wheels; the eras are in the docstring above).
# A full version, compared with compare_versions: 0.5.3rc0 still ignores the checkpoint, 0.5.3rc2 reads it.
V_AUTO_READS_KV_QUANT = "0.5.3rc2"  # kv-cache-dtype auto: fp8 when quant_config.kv_cache_quant_algo is FP8
V_MIXIN = (0, 5, 7)               # v_head_dim in the MHA cell, no EAGLE headroom, memory-based hybrid-SWA split
V_HYBRID_SWA_POOLS = (0, 4, 10)   # sliding-window pools for any model with a window (0.4.9: Llama 4 only)
V_HYBRID_SWA_MODELS = (0, 5, 8)   # is_hybrid_swa_model: gpt-oss and the others; 0.5.7 only these (is_hybrid_model)
HYBRID_SWA_0_5_7 = ("MiMoV2FlashForCausalLM",)
V_SWA_ALIGNED_FIRST = (0, 5, 10)  # hybrid SWA: the SWA count from the page-aligned full count (before: unaligned)
V_SWA_CONFIGURATOR = (0, 5, 11)   # HybridSWAPoolConfigurator: cell = F*nf + r*S*ns
V_CURRENT = (0, 5, 14)            # EAGLE draft in the cell, "Loaded weights leave no GPU memory" error
V_MXFP8_SCALE = (0, 5, 16)        # mxfp8 scale bytes in the MHA cell; FP4 MHA cell via recipe (backend-dependent)
V_DSA_FP8_LAYOUT = (0, 5, 17)     # DSA + fp8_e4m3: 656-byte latent rows in the cell
V_DSA_SPEC_SPLIT = (0, 5, 18)     # DSA draft = int(kv * D / L) + the draft's own indexer
V_VLM_RESERVATION = (0, 5, 18)    # multimodal models reserve SGLANG_VLM_CACHE_SIZE_MB of the KV budget
V_SPEC_ADDITIVE = (0, 5, 22)      # cell += int(cell * D / L) instead of int(cell * (1 + D / L))
V_SWA_REQUEST_CAP = (0, 5, 14)    # radix cache off + max_running_requests: the SWA pool from a request cap
V_SWA_CAP_NEEDS_CHUNK = (0, 5, 21)  # ... only with chunked_prefill_size > 0 (0.5.14 - 0.5.20: any)
V_SWA_CAP_ONE_REQUEST = (0, 5, 23)  # ... at least one request per attention-DP rank
V_SWA_MIN_POOL = (0, 5, 16)      # an SWA pool <= window + page refuses to start (validate_swa_pool_size)
V_POST_CAPTURE_SIZING = (0, 5, 16)  # SGLANG_ENABLE_POST_CAPTURE_KV_SIZING: the pool sized after graph capture
V_POST_CAPTURE_MODEL_ON = (0, 5, 23)  # ... on by default for these model classes (muse_spark_hook.py)
POST_CAPTURE_SIZING_MODELS = ("MuseSparkForConditionalGeneration",)
# default --mem-fraction-static
V_NO_SPEC_RESERVE = (0, 5, 14)    # the +2048/+6144 MiB speculative reserve is gone
V_GRAPH_RESERVE = (0, 5, 16)      # reserve_for_graph_mb(): decode + prefill graph terms
V_TIER35_AND_095 = (0, 5, 20)     # <35 GiB tier 4096/48/160, fallback 0.95 without nvidia-smi
V_MRR_CAPS_BS = (0, 5, 22)        # default decode max_bs capped at --max-running-requests


# Hybrid SWA with --page-size > 1: model_runner's paged allocator asserts `not self.is_hybrid` from 0.5.0rc2 (checked
# to 0.5.7; 0.5.8 builds a paged SWA allocator). A full version, compared with compare_versions.
V_PAGED_HYBRID_ASSERT = "0.5.0rc2"

# Model classes the KV model sizes in its own way, and the newest release checked (the PyPI wheels' models/*.py
# EntryClass, 0.4.6.post5 ... 0.5.23) without them: that release and older ones cannot load the model.
MODEL_CLASS_ABSENT_IN = {
    "GptOssForCausalLM": "0.4.6.post5", "Gemma3nForCausalLM": "0.4.6.post5",
    "Gemma3nForConditionalGeneration": "0.4.6.post5", "Qwen3NextForCausalLM": "0.5.2rc2",
    "FalconH1ForCausalLM": "0.5.3rc0", "DeepseekV32ForCausalLM": "0.5.3rc0", "NemotronHForCausalLM": "0.5.3",
    "MiMoV2FlashForCausalLM": "0.5.6.post2", "Qwen3_5ForConditionalGeneration": "0.5.8.post1",
    "Qwen3_5MoeForConditionalGeneration": "0.5.8.post1", "Step3p5ForCausalLM": "0.5.8.post1",
    "KimiK25ForConditionalGeneration": "0.5.8.post1", "MiMoV2ForCausalLM": "0.5.10", "Gemma4ForCausalLM": "0.5.10",
    "Gemma4ForConditionalGeneration": "0.5.10", "Step3p7ForConditionalGeneration": "0.5.11",
    "LagunaForCausalLM": "0.5.11", "GraniteSWAForCausalLM": "0.5.14", "GraniteMoeSWAForCausalLM": "0.5.14",
    "IQuestQ1ForCausalLM": "0.5.14", "MellumForCausalLM": "0.5.14", "Qwen3_5ForCausalLM": "0.5.14",
    "Qwen3_5MoeForCausalLM": "0.5.14", "BeamForCausalLM": "0.5.22",
}


def model_class_missing(architecture: Any, sglang_version: str | None) -> str | None:
    """The newest release checked without `architecture` when `sglang_version` is at or before it, else None."""
    absent = MODEL_CLASS_ABSENT_IN.get(architecture)
    if absent is None or sglang_version is None or compare_versions(sglang_version, absent) > 0:
        return None
    return absent


def kv_era(sglang_version: str | None = None) -> str:
    """'classic' (< 0.5.7), 'mixin' (0.5.7 - 0.5.13) or 'current' (>= 0.5.14; also for None)."""
    rel = release_of(sglang_version)
    if rel < V_MIXIN:
        return "classic"
    if rel < V_CURRENT:
        return "mixin"
    return "current"


def is_classic(sglang_version: str | None) -> bool:
    """True for SGLang whose init_memory_pool adds the EAGLE headroom outside the budget and whose MHA cell ignores
    v_head_dim: every release before 0.5.7, post releases included (0.5.5.post3, 0.5.6.post2). None = current."""
    return sglang_version is not None and kv_era(sglang_version) == "classic"

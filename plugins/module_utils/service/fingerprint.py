# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The tuning fingerprint (docs/DESIGN.md, "The fingerprint"): everything that changes the memory picture of one host.

A pinned --mem-fraction-static is valid only while the fingerprint it was tuned under is unchanged: same
fingerprint, nothing to do (changed=0, no restart); anything else, re-tune (:func:`retune_reason` says which). Pure
and stdlib only: the caller reads the GPUs (gpu_info), the versions, config.json's text and the server args, and
passes them in.

What counts, and why (the keys of the dict, in sections):

- ``gpu``: ``name`` (the model; a list when mixed), ``count``, ``memory_total_mib`` (MIN over GPUs): P, the free
  memory before weights, follows from them.
- ``versions``: ``driver`` and ``cuda`` (the CUDA context and NCCL buffers change size between drivers), ``sglang``
  (the KV arithmetic, graph sizes and defaults change between releases).
- ``model``: ``path``, ``config_sha256`` (sha256 of config.json's text: layers, heads, dtype, quantization decide
  the weights and the KV cell), ``revision`` (the same path may hold other weights) and, with a speculative draft,
  ``draft_config_sha256`` (its config.json's, by content: a draft replaced in place keeps its path).
- ``server_args`` (``server_args.MEMORY_ARGS``, each with SGLang's default, so an absent flag, ``None`` and the default
  value hash the same): tp/pp/dp sizes and DP attention (weights and pools per rank), dtype and quantization
  (weight bytes), kv_cache_dtype and page_size (the cell and page rounding), context_length (request table),
  chunked_prefill_size and max_prefill_tokens (the largest prefill batch's activations), cuda graph max bs / bs
  list / disable_cuda_graph (graph memory and which decode batches run eagerly), enable_mixed_chunk (prefill and
  decode activations at once), speculative settings (draft weights, KV and graphs; ignored when no speculative
  algorithm is set), the hierarchical cache (its ratio and size only count when it is enabled),
  max_running_requests and max_total_tokens (caps on the request table and the pool); and, only when set, the
  state-pool args of hybrid linear-attention models (``server_args.STATE_POOL_ARGS``: radix cache off, the state
  pool's size, ratio and SSM dtype), so that fingerprints of servers that do not set them did not change.

Excluded on purpose: host, port, api_key, served_model_name, log level and every other flag that does not move
memory; and mem_fraction_static itself, which is the search's OUTPUT (including it would make every pin change
the fingerprint it was pinned under).
"""
from __future__ import annotations

import hashlib
import json
from typing import Any

from ansible_collections.llmserve.sglang.plugins.module_utils import checks
from ansible_collections.llmserve.sglang.plugins.module_utils.capacity import kv_search
from ansible_collections.llmserve.sglang.plugins.module_utils.service import server_args as sa


class FingerprintError(checks.InvalidInput):
    """A bad input to the fingerprint: the message names the field and the value."""


def _gpu_section(gpus: Any) -> dict[str, Any]:
    if not isinstance(gpus, list) or not gpus:
        raise FingerprintError("gpus must be a non-empty list of GPUs (gpu_info's gpus), got %r" % (gpus,))
    names: set[str] = set()
    memories: list[int] = []
    for gpu in gpus:
        if not isinstance(gpu, dict) or not gpu.get("name"):
            raise FingerprintError("every GPU needs a name, got %r" % (gpu,))
        names.add(str(gpu["name"]).strip())
        if gpu.get("memory_total_mib") is not None:
            memories.append(int(gpu["memory_total_mib"]))
        elif gpu.get("memory_total_bytes") is not None:
            memories.append(int(gpu["memory_total_bytes"]) // 2 ** 20)
        else:
            raise FingerprintError("GPU %r has neither memory_total_mib nor memory_total_bytes" % (gpu["name"],))
    name = sorted(names)
    return {"name": name[0] if len(name) == 1 else name, "count": len(gpus), "memory_total_mib": min(memories)}


def _version(name: str, value: Any) -> str | None:
    if value is None:
        return None
    text = str(value).strip()
    if name == "sglang" and text[:1] in ("v", "V"):
        text = text[1:]
    return text or None


def config_sha256(config_text: Any) -> str | None:
    """sha256 of config.json's text as read (None when not given): any edit to the model's shape changes it."""
    if config_text is None:
        return None
    if isinstance(config_text, str):
        config_text = config_text.encode("utf-8")
    if not isinstance(config_text, bytes):
        raise FingerprintError("config_text must be the text of config.json, got %s" % type(config_text).__name__)
    return hashlib.sha256(config_text).hexdigest()


def fingerprint(gpus: Any, driver_version: Any, cuda_version: Any, sglang_version: Any, model_path: Any,
                config_text: Any = None, model_revision: Any = None, server_args: dict[str, Any] | None = None,
                draft_config_text: Any = None) -> dict[str, Any]:
    """The fingerprint dict (see the module docstring for the keys). ``gpus`` = gpu_info's list (name and
    memory_total_mib or memory_total_bytes per GPU); ``server_args`` = SGLang flags as a dict;
    ``draft_config_text`` = the speculative draft model's config.json, hashed by content like the target's (a
    draft replaced in place under the same path changes the memory picture too)."""
    if not model_path or not isinstance(model_path, str):
        raise FingerprintError("model_path must be the served model's path, got %r" % (model_path,))
    model = {"path": model_path.rstrip("/") or "/", "config_sha256": config_sha256(config_text),
             "revision": _version("revision", model_revision)}
    if draft_config_text is not None:
        model["draft_config_sha256"] = config_sha256(draft_config_text)
    return {
        "gpu": _gpu_section(gpus),
        "versions": {"driver": _version("driver", driver_version), "cuda": _version("cuda", cuda_version),
                     "sglang": _version("sglang", sglang_version)},
        "model": model,
        "server_args": sa.memory_args(server_args, FingerprintError),
    }


def fingerprint_hash(fp: Any) -> str:
    """sha256 (hex) of the canonical JSON of a fingerprint: sorted keys, no whitespace, ASCII."""
    if not isinstance(fp, dict):
        raise FingerprintError("fingerprint must be a dict, got %s" % type(fp).__name__)
    text = json.dumps(fp, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def fingerprint_diff(old: dict[str, Any] | None, new: dict[str, Any] | None) -> list[str]:
    """Dotted keys whose values differ (``versions.driver``): why a host is re-tuned, for the report."""
    changed = []
    for section in sorted(set(old or {}) | set(new or {})):
        left, right = (old or {}).get(section), (new or {}).get(section)
        if isinstance(left, dict) and isinstance(right, dict):
            for key in sorted(set(left) | set(right)):
                if left.get(key) != right.get(key):
                    changed.append("%s.%s" % (section, key))
        elif left != right:
            changed.append(section)
    return changed


def retune_reason(pin: dict[str, Any] | None, current: dict[str, Any] | None, current_hash: str | None,
                  running_value: float | None, force: bool = False, pin_error: str | None = None,
                  watch: dict[str, Any] | None = None) -> str | None:
    """Why the unit must be tuned, or None when its pin still holds: the same fingerprint hash (``current_hash``, of
    the fingerprint ``current``), the server runs the pinned value, and the headroom watch (``watch``,
    kv_watch.decision's, when the unit has one) asks for nothing."""
    if force:
        return "kv_tune_force"
    if pin_error:
        return pin_error
    if not pin:
        return "never tuned"
    if pin.get("fingerprint_hash") != current_hash:
        changed = fingerprint_diff(pin.get("fingerprint") or {}, current or {})
        return "fingerprint changed: " + (", ".join(changed) or "its hash")
    pinned = pin.get("mem_fraction_static")
    if pinned is None or running_value is None or not kv_search.same_value(pinned, running_value):
        return "the server runs %s, not the pinned %s" % (running_value, pinned)
    return (watch or {}).get("retune")

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The tuning fingerprint (DESIGN.md "Fingerprint"): everything that changes the memory picture of one host.

A pinned --mem-fraction-static is valid only while the fingerprint it was tuned under is unchanged: same
fingerprint, nothing to do (changed=0, no restart); anything else, re-tune. Pure and stdlib only: the caller reads
the GPUs (gpu_info), the versions, config.json's text and the server args, and passes them in.

What counts, and why (the keys of the dict, in sections):

- ``gpu``: ``name`` (the model; a list when mixed), ``count``, ``memory_total_mib`` (MIN over GPUs): P, the free
  memory before weights, follows from them.
- ``versions``: ``driver`` and ``cuda`` (the CUDA context and NCCL buffers change size between drivers), ``sglang``
  (the KV arithmetic, graph sizes and defaults change between releases).
- ``model``: ``path``, ``config_sha256`` (sha256 of config.json's text: layers, heads, dtype, quantization decide
  the weights and the KV cell) and ``revision`` (the same path may hold other weights).
- ``server_args`` (:data:`MEMORY_ARGS`, each with SGLang's default, so an absent flag, ``None`` and the default
  value hash the same): tp/pp/dp sizes and DP attention (weights and pools per rank), dtype and quantization
  (weight bytes), kv_cache_dtype and page_size (the cell and page rounding), context_length (request table),
  chunked_prefill_size and max_prefill_tokens (the largest prefill batch's activations), cuda graph max bs / bs
  list / disable_cuda_graph (graph memory and which decode batches run eagerly), enable_mixed_chunk (prefill and
  decode activations at once), speculative settings (draft weights, KV and graphs; ignored when no speculative
  algorithm is set), the hierarchical cache (its ratio and size only count when it is enabled),
  max_running_requests and max_total_tokens (caps on the request table and the pool).

Excluded on purpose: host, port, api_key, served_model_name, log level and every other flag that does not move
memory; and mem_fraction_static itself, which is the search's OUTPUT (including it would make every pin change
the fingerprint it was pinned under).
"""
from __future__ import annotations

import hashlib
import json
import math

# SGLang's defaults (0.5.x server_args.py) for the args that change the memory picture; None = "SGLang decides".
MEMORY_ARGS = {
    "tp_size": 1, "pp_size": 1, "dp_size": 1, "enable_dp_attention": False,
    "dtype": "auto", "quantization": None,
    "kv_cache_dtype": "auto", "page_size": 1, "context_length": None,
    "chunked_prefill_size": None, "max_prefill_tokens": 16384, "enable_mixed_chunk": False,
    "cuda_graph_max_bs": None, "cuda_graph_bs": None, "disable_cuda_graph": False,
    "speculative_algorithm": None, "speculative_draft_model_path": None, "speculative_num_steps": None,
    "speculative_eagle_topk": None, "speculative_num_draft_tokens": None,
    "enable_hierarchical_cache": False, "hicache_ratio": None, "hicache_size": None,
    "max_running_requests": None, "max_total_tokens": None,
}
# Other spellings of the same flags (SGLang's short aliases, Ansible-friendly names).
ALIASES = {"tp": "tp_size", "tensor_parallel_size": "tp_size", "pp": "pp_size", "pipeline_parallel_size": "pp_size",
           "dp": "dp_size", "data_parallel_size": "dp_size", "context_len": "context_length",
           "speculative_algo": "speculative_algorithm"}
_BOOL_ARGS = ("enable_dp_attention", "enable_mixed_chunk", "disable_cuda_graph", "enable_hierarchical_cache")
_INT_ARGS = ("tp_size", "pp_size", "dp_size", "page_size", "context_length", "chunked_prefill_size",
             "max_prefill_tokens", "cuda_graph_max_bs", "speculative_num_steps", "speculative_eagle_topk",
             "speculative_num_draft_tokens", "max_running_requests", "max_total_tokens")
_FLOAT_ARGS = ("hicache_ratio", "hicache_size")
_LOWER_ARGS = ("dtype", "quantization", "kv_cache_dtype")
_SPEC_ARGS = ("speculative_draft_model_path", "speculative_num_steps", "speculative_eagle_topk",
              "speculative_num_draft_tokens")
_HICACHE_ARGS = ("hicache_ratio", "hicache_size")


class FingerprintError(ValueError):
    """A bad input to the fingerprint: the message names the field and the value."""


def _key(name):
    key = str(name).lstrip("-").replace("-", "_").lower()
    return ALIASES.get(key, key)


def _as_bool(name, value):
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "yes", "on", "1", ""):
        return True   # "" = a bare flag (--enable-dp-attention) read from a command line
    if isinstance(value, str) and value.strip().lower() in ("false", "no", "off", "0"):
        return False
    if isinstance(value, int):
        return bool(value)
    raise FingerprintError("server arg %s must be a boolean, got %r" % (name, value))


def _as_number(name, value, kind):
    if isinstance(value, bool):
        raise FingerprintError("server arg %s must be a number, got %r" % (name, value))
    try:
        number = float(value.strip() if isinstance(value, str) else value)
    except (TypeError, ValueError):
        raise FingerprintError("server arg %s must be a number, got %r" % (name, value)) from None
    if not math.isfinite(number):
        raise FingerprintError("server arg %s must be finite, got %r" % (name, value))
    if kind is int:
        if not number.is_integer():
            raise FingerprintError("server arg %s must be an integer, got %r" % (name, value))
        return int(number)
    return number


def _bs_list(value):
    if isinstance(value, str):
        value = value.replace(",", " ").split()
    if not isinstance(value, (list, tuple)):
        raise FingerprintError("server arg cuda_graph_bs must be a list of batch sizes, got %r" % (value,))
    sizes = sorted({_as_number("cuda_graph_bs", size, int) for size in value})
    return sizes or None


def _normalise(name, value):
    if name in _BOOL_ARGS:
        return _as_bool(name, value)
    if name in _INT_ARGS:
        return _as_number(name, value, int)
    if name in _FLOAT_ARGS:
        return _as_number(name, value, float)
    if name == "cuda_graph_bs":
        return _bs_list(value)
    text = str(value).strip()
    if name in _LOWER_ARGS:
        return text.lower()
    if name == "speculative_algorithm":
        return text.upper() or None
    return text


def memory_args(server_args):
    """The memory-relevant server args of ``server_args`` (a dict; keys as flags --tp-size or names tp_size or
    aliases tp), every one present with None/absent replaced by SGLang's default; the rest dropped."""
    if server_args is None:
        server_args = {}
    if not isinstance(server_args, dict):
        raise FingerprintError("server_args must be a dict of SGLang flags, got %s" % type(server_args).__name__)
    out = dict(MEMORY_ARGS)
    for raw_key, value in server_args.items():
        name = _key(raw_key)
        if name not in MEMORY_ARGS or value is None:
            continue
        out[name] = _normalise(name, value)
    if out["speculative_algorithm"] is None:
        out.update({name: None for name in _SPEC_ARGS})
    if not out["enable_hierarchical_cache"]:
        out.update({name: None for name in _HICACHE_ARGS})
    return out


def _gpu_section(gpus):
    if not isinstance(gpus, list) or not gpus:
        raise FingerprintError("gpus must be a non-empty list of GPUs (gpu_info's gpus), got %r" % (gpus,))
    names, memories = set(), []
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


def _version(name, value):
    if value is None:
        return None
    text = str(value).strip()
    if name == "sglang" and text[:1] in ("v", "V"):
        text = text[1:]
    return text or None


def config_sha256(config_text):
    """sha256 of config.json's text as read (None when not given): any edit to the model's shape changes it."""
    if config_text is None:
        return None
    if isinstance(config_text, str):
        config_text = config_text.encode("utf-8")
    if not isinstance(config_text, bytes):
        raise FingerprintError("config_text must be the text of config.json, got %s" % type(config_text).__name__)
    return hashlib.sha256(config_text).hexdigest()


def fingerprint(gpus, driver_version, cuda_version, sglang_version, model_path, config_text=None,
                model_revision=None, server_args=None):
    """The fingerprint dict (see the module docstring for the keys). ``gpus`` = gpu_info's list (name and
    memory_total_mib or memory_total_bytes per GPU); ``server_args`` = SGLang flags as a dict."""
    if not model_path or not isinstance(model_path, str):
        raise FingerprintError("model_path must be the served model's path, got %r" % (model_path,))
    return {
        "gpu": _gpu_section(gpus),
        "versions": {"driver": _version("driver", driver_version), "cuda": _version("cuda", cuda_version),
                     "sglang": _version("sglang", sglang_version)},
        "model": {"path": model_path.rstrip("/") or "/", "config_sha256": config_sha256(config_text),
                  "revision": _version("revision", model_revision)},
        "server_args": memory_args(server_args),
    }


def fingerprint_hash(fp):
    """sha256 (hex) of the canonical JSON of a fingerprint: sorted keys, no whitespace, ASCII."""
    if not isinstance(fp, dict):
        raise FingerprintError("fingerprint must be a dict, got %s" % type(fp).__name__)
    text = json.dumps(fp, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def fingerprint_diff(old, new):
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


# Flags whose values never leave the host (SGLang's own secret args, as startup_log redacts them).
SECRET_FLAGS = ("api_key", "admin_api_key", "ssl_keyfile_password")


def server_args_from_argv(argv):
    """The server args of an SGLang command line (``/proc/<pid>/cmdline`` split at NUL): a dict keyed by flag
    name in snake_case. Everything before the first ``--flag`` (the interpreter, ``-m sglang.launch_server``) is
    skipped; a flag without a value is ``True``, with one value a string, with several a list (``--cuda-graph-bs 1 2
    4``); ``--flag=value`` works too. Secret flags (:data:`SECRET_FLAGS`) are dropped, never returned."""
    if not isinstance(argv, (list, tuple)):
        raise FingerprintError("argv must be a list of words, got %s" % type(argv).__name__)
    args, name = {}, None
    for word in argv:
        word = str(word)
        if word.startswith("--") and len(word) > 2:
            flag, sep, value = word[2:].partition("=")
            name = flag.replace("-", "_")
            args[name] = value if sep else True
            if sep:
                name = None  # --flag=value takes no further words
        elif name is not None:
            current = args[name]
            if current is True:
                args[name] = word
            elif isinstance(current, list):
                current.append(word)
            else:
                args[name] = [current, word]
    for secret in SECRET_FLAGS:
        args.pop(secret, None)
    return args

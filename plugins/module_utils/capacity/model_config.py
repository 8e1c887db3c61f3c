# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Read a Hugging Face config.json: the only I/O of the KV model.

``load_model_config(source)`` takes a dict (returned as a copy), the path of a config.json, a model directory
holding one, or a Hugging Face cache repository directory (``models--org--name``, whose single snapshot is used).
Every failure raises ModelConfigError (a KvModelError, so a ValueError) naming the path and the reason.

Files are read through ``read`` (path -> bytes), by default host_files.read_walking: a regular file only, no
symlink followed by the kernel, no blocking open, bounded size. A module that reads what a service user controls
passes host_files.read_as_user for that user.
"""
from __future__ import annotations

import copy
import json
import os
from typing import Any, Callable

from ansible_collections.llmserve.sglang.plugins.module_utils.host import host_files
from ansible_collections.llmserve.sglang.plugins.module_utils.startup.boot_trust import checkpoint_bytes
from ansible_collections.llmserve.sglang.plugins.module_utils.capacity.kv_base import KvModelError

MAX_CONFIG_BYTES = 16 * 2 ** 20   # a config.json is a few KiB; anything this large is not one


class ModelConfigError(KvModelError):
    """config.json missing, unreadable, not JSON or not a JSON object."""


def resolve_config_path(path: Any) -> str:
    """The config.json a path stands for: the file itself, <dir>/config.json, or the one snapshot of a Hugging Face
    cache repository directory (<dir>/snapshots/<revision>/config.json)."""
    if not isinstance(path, str) or not path.strip():
        raise ModelConfigError("model_config must be a path to config.json or a model directory, got %r" % (path,))
    path = os.path.expanduser(path)
    if os.path.isdir(path):
        candidate = os.path.join(path, "config.json")
        if os.path.exists(candidate):
            return candidate
        snapshots = os.path.join(path, "snapshots")
        if os.path.isdir(snapshots):
            found = sorted(d for d in os.listdir(snapshots)
                           if os.path.exists(os.path.join(snapshots, d, "config.json")))
            if len(found) == 1:
                return os.path.join(snapshots, found[0], "config.json")
            if len(found) > 1:
                raise ModelConfigError("%s holds %d snapshots with a config.json (%s): give the snapshot directory"
                                       % (path, len(found), ", ".join(found)))
        raise ModelConfigError("model directory %s has no config.json" % path)
    if not os.path.exists(path):
        raise ModelConfigError("config.json not found: %s does not exist" % path)
    return path


def _read_safely(path: str) -> bytes:
    return host_files.read_walking(os.path.abspath(path), MAX_CONFIG_BYTES)[0]


def read_config_file(path: str, read: Callable[[str], bytes] | None = None) -> dict[str, Any]:
    """Parse one config.json file into a dict, its bytes from ``read`` (module docstring)."""
    try:
        raw = (read or _read_safely)(path)
    except (IOError, OSError) as exc:
        raise ModelConfigError("cannot read %s: %s" % (path, exc.strerror or exc))
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ModelConfigError("%s is not UTF-8 text (byte %d): not a config.json" % (path, exc.start))
    if not text.strip():
        raise ModelConfigError("%s is empty" % path)
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise ModelConfigError("%s is not valid JSON: %s" % (path, exc))
    if not isinstance(data, dict):
        raise ModelConfigError("%s holds a JSON %s, not an object: not a config.json"
                               % (path, type(data).__name__.replace("list", "array").replace("str", "string")))
    return data


def load_model_config(source: Any, read: Callable[[str], bytes] | None = None) -> dict[str, Any]:
    """The config.json dict for a dict, a config.json path or a model directory."""
    if isinstance(source, dict):
        return copy.deepcopy(source)
    return read_config_file(resolve_config_path(source), read)


def load_checkpoint_size(source: Any, read: Callable[[str], bytes] | None = None) -> int | None:
    """The checkpoint's bytes for a config.json path or a model directory: ``metadata.total_size`` of the
    ``model.safetensors.index.json`` beside config.json, else the size of a single ``model.safetensors``; None when
    neither is there (a Hub id, a config.json copied on its own)."""
    directory = os.path.dirname(resolve_config_path(source))
    index = os.path.join(directory, "model.safetensors.index.json")
    if os.path.exists(index):
        try:
            return checkpoint_bytes(read_config_file(index, read))
        except ModelConfigError:
            return None
    single = os.path.join(directory, "model.safetensors")
    return os.path.getsize(single) if os.path.isfile(single) else None

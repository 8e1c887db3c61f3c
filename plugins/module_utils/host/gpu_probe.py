# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The GPU probe: per-GPU memory, identity and compute processes from NVML (nvml.py), falling back to nvidia-smi
(nvidia_smi.py), as one result (:func:`probe`, :func:`summarize`), and a cheap probe for sampling loops
(:func:`free_memory_sampler`). What each field of a GPU dict means, from either source: gpu_fields.py.

I/O only through the two sources: NVML through ``pynvml`` (imported lazily) and nvidia-smi through an injected
``run_command``.
"""
from __future__ import annotations

import shutil
from typing import Any, Callable

from ansible_collections.llmserve.sglang.plugins.module_utils.host.gpu_fields import GpuProbeError
from ansible_collections.llmserve.sglang.plugins.module_utils.host.nvidia_smi import (
    RunCommand,
    find_nvidia_smi,
    probe_nvidia_smi,
    query_memory,
)
from ansible_collections.llmserve.sglang.plugins.module_utils.host.nvml import probe_nvml

GIB = 2 ** 30

PREFER_CHOICES = ("auto", "nvml", "nvidia_smi")


def gib(value_bytes: int | None) -> float | None:
    """Bytes to GiB (2**30), rounded to 3 decimals; None stays None."""
    if value_bytes is None:
        return None
    return round(value_bytes / GIB, 3)


def summarize(gpus: list[dict[str, Any]], source: str, driver_version: str | None,
              cuda_driver_version: str | None, nvml_error: str | None = None) -> dict[str, Any]:
    """The gpu_info result: GPU dicts with *_gib added, and the summaries the tuner reads.

    ``min_free_gib`` / ``total_memory_gib_min`` are the minimum over all GPUs, or None when there is no
    GPU or any GPU's value is unknown (a minimum over a subset would overstate what every rank has).
    """
    out: list[dict[str, Any]] = []
    for gpu in gpus:
        gpu = dict(gpu)
        for key in ("total", "free", "used", "reserved"):
            gpu["memory_%s_gib" % key] = gib(gpu.get("memory_%s_bytes" % key))
        out.append(gpu)

    def _min(key: str) -> float | None:
        values = [g[key] for g in out]
        if not values or any(v is None for v in values):
            return None
        return gib(min(values))

    return {
        "gpus": out,
        "gpu_count": len(out),
        "driver_version": driver_version,
        "cuda_driver_version": cuda_driver_version,
        "source": source,
        "min_free_gib": _min("memory_free_bytes"),
        "total_memory_gib_min": _min("memory_total_bytes"),
        "nvml_error": nvml_error,
    }


def free_memory_sampler(run_command: RunCommand | None = None, nvidia_smi: str | None = None, prefer: str = "auto",
                        nvml: Any = None, which: Callable[[str], str | None] = shutil.which,
                        processes: bool = False) -> Callable[[], list[dict[str, Any]]]:
    """A probe for a loop that reads free memory many times a second (kv_stress, gpu_info's watch; every 0.1 s by
    default): a function that returns the GPU dicts of :func:`probe`. Its first call is :func:`probe`'s; later calls
    ask the source that answered for each GPU's index and memory only: NVML in-process as before, nvidia-smi with
    one ``--query-gpu`` instead of three commands (three process starts per sample keep a CPU core of the host busy
    in a 0.1 s loop). With ``processes``, each sample lists every GPU's compute processes too (NVML's, or one more
    nvidia-smi command)."""
    found: dict[str, Any] = {}

    def sample() -> list[dict[str, Any]]:
        if not found:
            result = probe(run_command=run_command, nvidia_smi=nvidia_smi, prefer=prefer, nvml=nvml, which=which)
            found["source"] = result["source"]
            if result["source"] != "nvml":
                found["nvidia_smi"] = find_nvidia_smi(nvidia_smi, which)[0]
            return result["gpus"]
        if found["source"] == "nvml":
            return probe_nvml(nvml)["gpus"]
        return query_memory(run_command, found["nvidia_smi"], processes)

    return sample


def probe(run_command: RunCommand | None = None, nvidia_smi: str | None = None, prefer: str = "auto", nvml: Any = None,
          which: Callable[[str], str | None] = shutil.which) -> dict[str, Any]:
    """Probe the GPUs and return :func:`summarize`'s dict.

    ``prefer``: auto (NVML, falling back to nvidia-smi when NVML is unavailable or fails), nvml (NVML
    only), nvidia_smi (nvidia-smi only). ``run_command(argv) -> (rc, stdout, stderr)`` runs nvidia-smi (the
    caller's: a module's run_command with the C locale; None where only NVML is asked);
    ``nvml`` stands in for the pynvml module; ``which`` resolves a command name on PATH.
    """
    if prefer not in PREFER_CHOICES:
        raise GpuProbeError("prefer must be one of %s, not %r" % (", ".join(PREFER_CHOICES), prefer))
    nvml_reason = None
    if prefer in ("auto", "nvml"):
        try:
            result = probe_nvml(nvml)
            return summarize(result["gpus"], "nvml", result["driver_version"], result["cuda_driver_version"])
        except GpuProbeError as exc:
            if prefer == "nvml":
                raise GpuProbeError("NVML probe failed (prefer=nvml): %s" % exc)
            nvml_reason = str(exc)
    path, missing = find_nvidia_smi(nvidia_smi, which)
    if path is None:
        if nvml_reason is None:
            raise GpuProbeError("nvidia-smi probe unavailable (prefer=nvidia_smi): %s" % missing)
        raise GpuProbeError("no NVIDIA GPU probe available: %s and %s" % (nvml_reason, missing))
    try:
        result = probe_nvidia_smi(run_command, path)
    except GpuProbeError as exc:
        if nvml_reason is None:
            raise
        raise GpuProbeError("%s (NVML was not used: %s)" % (exc, nvml_reason))
    return summarize(result["gpus"], "nvidia-smi", result["driver_version"], result["cuda_driver_version"],
                     nvml_error=nvml_reason)

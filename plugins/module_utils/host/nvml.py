# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Every GPU read through NVML (:func:`probe_nvml`): memory (gpu_fields.py says what each field means), identity,
persistence and MIG mode, compute processes, the driver's and CUDA's versions.

The only I/O is NVML's, through ``pynvml`` (nvidia-ml-py, imported lazily, so that a managed host without it can
still use nvidia-smi) or a stand-in for it.
"""
from __future__ import annotations

from typing import Any, Callable

from ansible_collections.llmserve.sglang.plugins.module_utils.host.gpu_fields import (
    GpuProbeError,
    ProbeUnavailable,
    mig_mode,
)

NVML_LIBRARY = "libnvidia-ml.so.1"
_NVML_ERROR_LIBRARY_NOT_FOUND = 12  # pynvml.NVML_ERROR_LIBRARY_NOT_FOUND


def cuda_version_from_int(value: int | None) -> str | None:
    """NVML's CUDA driver version integer to "major.minor": 12080 -> "12.8", 13000 -> "13.0"."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise GpuProbeError("CUDA driver version from NVML is not a positive integer: %r" % (value,))
    return "%d.%d" % (value // 1000, (value % 1000) // 10)


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _is_nvml_error(exc: BaseException, nvml: Any, name: str) -> bool:
    cls = getattr(nvml, name, None)
    return isinstance(cls, type) and isinstance(exc, cls)


def describe_nvml_error(exc: BaseException, nvml: Any = None) -> str:
    """A sentence for an NVML failure; the missing-library case names the library."""
    if _is_nvml_error(exc, nvml, "NVMLError_LibraryNotFound") or \
            getattr(exc, "value", None) == _NVML_ERROR_LIBRARY_NOT_FOUND:
        return "NVML library not found (%s)" % NVML_LIBRARY
    try:
        text = str(exc)
    except Exception:  # pynvml's __str__ may itself call into the library
        text = "NVML error code %s" % getattr(exc, "value", "?")
    return "NVML %s: %s" % (type(exc).__name__, text)


def _import_pynvml() -> Any:
    try:
        import pynvml  # pylint: disable=import-outside-toplevel
    except ImportError as exc:
        raise ProbeUnavailable("pynvml (nvidia-ml-py) is not importable: %s" % exc)
    return pynvml


def probe_nvml(nvml: Any = None) -> dict[str, Any]:
    """Read every GPU through NVML. ``nvml`` is the pynvml module (imported when None) or a stand-in.

    Raises ProbeUnavailable when pynvml is missing or nvmlInit fails (no library, no driver), GpuProbeError
    when NVML answers but a GPU cannot be read.
    """
    if nvml is None:
        nvml = _import_pynvml()
    nvml_error = getattr(nvml, "NVMLError", Exception)
    try:
        nvml.nvmlInit()
    except nvml_error as exc:
        raise ProbeUnavailable(describe_nvml_error(exc, nvml))
    try:
        return _read_nvml(nvml, nvml_error)
    except nvml_error as exc:
        raise GpuProbeError("NVML query failed: %s" % describe_nvml_error(exc, nvml))
    finally:
        try:
            nvml.nvmlShutdown()
        except nvml_error:
            pass


def _optional(nvml_error: Any, call: Callable[..., Any], *args: Any) -> Any:
    try:
        return call(*args)
    except nvml_error:
        return None


def _read_nvml(nvml: Any, nvml_error: Any) -> dict[str, Any]:
    driver = _text(nvml.nvmlSystemGetDriverVersion())
    cuda = None
    for name in ("nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion"):
        if cuda is None and hasattr(nvml, name):
            cuda = _optional(nvml_error, getattr(nvml, name))
    gpus: list[dict[str, Any]] = []
    for position in range(nvml.nvmlDeviceGetCount()):
        handle = nvml.nvmlDeviceGetHandleByIndex(position)
        index = _optional(nvml_error, nvml.nvmlDeviceGetIndex, handle) if hasattr(nvml, "nvmlDeviceGetIndex") else None
        total, free, reserved = _nvml_memory(nvml, nvml_error, handle)
        used = None
        if total is not None and free is not None:
            used = max(0, total - free - (reserved or 0))
        persistence = _optional(nvml_error, nvml.nvmlDeviceGetPersistenceMode, handle)
        mig = _optional(nvml_error, nvml.nvmlDeviceGetMigMode, handle) if hasattr(nvml, "nvmlDeviceGetMigMode") else None
        gpus.append({
            "index": position if index is None else int(index),
            "uuid": _text(nvml.nvmlDeviceGetUUID(handle)),
            "name": _text(nvml.nvmlDeviceGetName(handle)),
            "memory_total_bytes": total,
            "memory_free_bytes": free,
            "memory_used_bytes": used,
            "memory_reserved_bytes": reserved,
            "persistence_mode": None if persistence is None else bool(persistence),
            "mig_mode": None if not mig else mig_mode(bool(mig[0])),
            "compute_processes": _nvml_processes(nvml, nvml_error, handle),
        })
    gpus.sort(key=lambda g: g["index"])
    return {"gpus": gpus, "driver_version": driver, "cuda_driver_version": cuda_version_from_int(cuda)}


def _nvml_memory(nvml: Any, nvml_error: Any, handle: Any) -> tuple[int | None, int | None, int | None]:
    """(total, free, reserved) in bytes; v2 (with reserved) when the driver has it, else v1 (reserved None).

    A MIG-partitioned GPU seen from an unprivileged container answers NoPermission: all None.
    """
    version = getattr(nvml, "nvmlMemory_v2", None)
    if version is not None:
        try:
            info = nvml.nvmlDeviceGetMemoryInfo(handle, version=version)
            return int(info.total), int(info.free), int(info.reserved)
        except (TypeError, AttributeError):
            pass
        except nvml_error:
            pass
    try:
        info = nvml.nvmlDeviceGetMemoryInfo(handle)
    except nvml_error as exc:
        if _is_nvml_error(exc, nvml, "NVMLError_NoPermission"):
            return None, None, None
        raise
    return int(info.total), int(info.free), None


def _nvml_processes(nvml: Any, nvml_error: Any, handle: Any) -> list[dict[str, Any]]:
    procs = _optional(nvml_error, nvml.nvmlDeviceGetComputeRunningProcesses, handle) or []
    out: list[dict[str, Any]] = []
    for proc in procs:
        pid = int(proc.pid)
        name = _optional(nvml_error, nvml.nvmlSystemGetProcessName, pid) if hasattr(nvml, "nvmlSystemGetProcessName") else None
        used = getattr(proc, "usedGpuMemory", None)
        out.append({"pid": pid, "name": None if name is None else _text(name),
                    "used_memory_bytes": None if used is None else int(used)})
    return out

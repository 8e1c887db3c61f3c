# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Every GPU read through nvidia-smi (:func:`probe_nvidia_smi`, :func:`query_memory`): its CSV and its header text
parsed into the GPU dicts gpu_fields.py describes.

The parsing is pure (text in, lists of dicts out); the only I/O is running nvidia-smi, through the caller's
``run_command(argv) -> (rc, stdout, stderr)``.
"""
from __future__ import annotations

import os
import re
import shutil
from typing import Any, Callable, Sequence

from ansible_collections.llmserve.sglang.plugins.module_utils.host.gpu_fields import (
    GpuProbeError,
    InvalidQueryField,
    mig_mode,
)

MIB = 2 ** 20
# The caller's way of running a command: run_command(argv) -> (rc, stdout, stderr) (a module's run_command with the
# C locale, the watch's subprocess.run); None where only NVML is asked.
RunCommand = Callable[[list[str]], tuple[int, str, str]]

# Asked of nvidia-smi, in this order. memory.reserved appeared in later drivers: without it we ask again
# with GPU_FIELDS_LEGACY.
GPU_FIELDS = ("index", "uuid", "name", "memory.total", "memory.reserved", "memory.used", "memory.free",
              "persistence_mode", "mig.mode.current", "driver_version")
GPU_FIELDS_LEGACY = tuple(f for f in GPU_FIELDS if f != "memory.reserved")
APP_FIELDS = ("gpu_uuid", "pid", "used_memory", "process_name")  # the name last: it may hold commas
CSV_FORMAT = "--format=csv,noheader,nounits"

# nvidia-smi prints a value it cannot give as a bracketed reason: [N/A], [Not Supported],
# [Insufficient Permissions], [Unknown Error], [GPU is lost], ...; older releases print a bare N/A.
_UNAVAILABLE = re.compile(r"^\[[^\]]*\]$|^N/A$", re.IGNORECASE)
_HEADER_UNIT = re.compile(r"\s*\[[^\]]*\]\s*$")
_NUMBER_WITH_UNIT = re.compile(r"^(\d+(?:\.\d+)?)(?:\s*(MiB|B))?$")
_INVALID_FIELD = re.compile(r'Field "([^"]+)" is not a valid field to query', re.IGNORECASE)
_NO_PROCESSES = re.compile(r"^No running (compute )?processes found", re.IGNORECASE)
# "Driver Version: 570.133.20   CUDA Version: 12.8" (tables up to R590, and nvidia-smi -q),
# "KMD Version: 610.57.04   CUDA UMD Version: 13.3" (R610 tables).
_HEADER_CUDA = re.compile(r"CUDA (?:UMD )?Version\s*:\s*([0-9]+(?:\.[0-9]+)*)")
_HEADER_DRIVER = re.compile(r"(?:Driver|KMD) Version\s*:\s*([0-9]+(?:\.[0-9]+)*)")


def is_unavailable(value: str) -> bool:
    """True for nvidia-smi's non-values: [N/A], [Not Supported], [Insufficient Permissions], N/A, ..."""
    return bool(_UNAVAILABLE.match(value.strip()))


def _split(line: str, maxsplit: int = -1) -> list[str]:
    # nvidia-smi separates values with ", " and never quotes them.
    return [value.strip() for value in line.split(",", maxsplit)]


def parse_csv(text: str, fields: Sequence[str] | None = None,
              free_text_last: bool = False) -> list[dict[str, Any]]:
    """Parse nvidia-smi ``--format=csv`` output into one dict per line, keyed by query field name.

    ``fields`` names the columns of ``noheader`` output; when None, the first line must be the header
    (e.g. ``index, memory.total [MiB]``; unit suffixes are dropped from the names). Values are stripped
    strings, or None for nvidia-smi's non-values. ``free_text_last``: the last field is free text that may
    itself hold commas (a process name), so a line is split into at most len(fields) values. Blank lines
    and "No running processes found" are skipped. A line whose value count differs from the field count
    raises GpuProbeError naming the line.
    """
    lines = [line for line in text.splitlines() if line.strip() and not _NO_PROCESSES.match(line.strip())]
    if fields is None:
        if not lines:
            return []
        fields = [_HEADER_UNIT.sub("", name) for name in _split(lines[0])]
        lines = lines[1:]
    fields = list(fields)
    if not fields:
        raise GpuProbeError("no nvidia-smi CSV fields to parse %r with" % text[:200])
    maxsplit = len(fields) - 1 if free_text_last else -1
    rows: list[dict[str, Any]] = []
    for number, line in enumerate(lines, start=1):
        values = _split(line, maxsplit)
        if len(values) != len(fields):
            raise GpuProbeError(
                "nvidia-smi CSV line %d has %d values where %d fields (%s) were asked for: %r"
                % (number, len(values), len(fields), ", ".join(fields), line))
        rows.append({name: (None if is_unavailable(value) else value) for name, value in zip(fields, values)})
    return rows


def parse_header(text: str) -> dict[str, str | None]:
    """Driver and CUDA version from plain ``nvidia-smi`` (table header) or ``nvidia-smi -q`` text.

    Returns ``{"driver_version": str|None, "cuda_driver_version": str|None}``; "CUDA Version: Not Found" or
    a missing line gives None.
    """
    cuda = _HEADER_CUDA.search(text)
    driver = _HEADER_DRIVER.search(text)
    return {"driver_version": driver.group(1) if driver else None,
            "cuda_driver_version": cuda.group(1) if cuda else None}


def _int(value: str | None, what: str) -> int | None:
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        raise GpuProbeError("%s is not an integer: %r" % (what, value))


def _mib_to_bytes(value: str | None, what: str) -> int | None:
    if value is None:
        return None
    match = _NUMBER_WITH_UNIT.match(value.strip())
    if not match:
        raise GpuProbeError("%s is not a MiB amount: %r" % (what, value))
    if match.group(2) == "B":
        return int(float(match.group(1)))
    return int(round(float(match.group(1)) * MIB))


def _enabled(value: str | None, what: str) -> bool | None:
    if value is None:
        return None
    lowered = value.strip().lower()
    if lowered in ("enabled", "on"):
        return True
    if lowered in ("disabled", "off"):
        return False
    raise GpuProbeError("%s is neither Enabled nor Disabled: %r" % (what, value))


def gpus_from_smi(gpu_rows: list[dict[str, Any]],
                  app_rows: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Normalise parsed ``--query-gpu`` rows (and ``--query-compute-apps`` rows) into GPU dicts.

    Each GPU dict: index, uuid, name, memory_{total,free,used,reserved}_bytes (None where nvidia-smi gave
    none), persistence_mode (bool|None), mig_mode ("enabled"|"disabled"|None), compute_processes
    (list of {pid, name, used_memory_bytes}). Processes are matched to GPUs by UUID; a process on a UUID
    that is not one of the GPUs (a MIG device) is left out.
    """
    gpus: list[dict[str, Any]] = []
    by_uuid: dict[Any, dict[str, Any]] = {}
    for row in gpu_rows:
        where = "GPU %s" % row.get("index")
        index = _int(row.get("index"), "%s index" % where)
        if index is None:
            raise GpuProbeError("nvidia-smi gave no index for a GPU: %r" % (row,))
        where = "GPU %d" % index
        total = _mib_to_bytes(row.get("memory.total"), where + " memory.total")
        free = _mib_to_bytes(row.get("memory.free"), where + " memory.free")
        reserved = _mib_to_bytes(row.get("memory.reserved"), where + " memory.reserved")
        used = _mib_to_bytes(row.get("memory.used"), where + " memory.used")
        if used is None and total is not None and free is not None:
            used = max(0, total - free - (reserved or 0))
        gpu: dict[str, Any] = {
            "index": index,
            "uuid": row.get("uuid"),
            "name": row.get("name"),
            "memory_total_bytes": total,
            "memory_free_bytes": free,
            "memory_used_bytes": used,
            "memory_reserved_bytes": reserved,
            "persistence_mode": _enabled(row.get("persistence_mode"), where + " persistence_mode"),
            "mig_mode": mig_mode(_enabled(row.get("mig.mode.current"), where + " mig.mode.current")),
            "compute_processes": [],
        }
        gpus.append(gpu)
        if gpu["uuid"]:
            by_uuid[gpu["uuid"]] = gpu
    for row in app_rows or []:
        pid = _int(row.get("pid"), "compute app pid")
        if pid is None:
            raise GpuProbeError("nvidia-smi listed a compute process without a pid: %r" % (row,))
        owner = by_uuid.get(row.get("gpu_uuid"))
        if owner is None:  # e.g. a MIG device UUID: not one of the GPUs reported
            continue
        owner["compute_processes"].append({
            "pid": pid,
            "name": row.get("process_name"),
            "used_memory_bytes": _mib_to_bytes(row.get("used_memory"), "pid %d used_memory" % pid),
        })
    gpus.sort(key=lambda g: g["index"])
    return gpus


def _run(run_command: RunCommand | None, argv: list[str]) -> str:
    if run_command is None:
        # Every caller runs commands its own way (AnsibleModule.run_command, the watch's service): none is assumed.
        raise ValueError("running nvidia-smi needs run_command(argv) -> (rc, stdout, stderr)")
    rc, out, err = run_command(argv)
    if rc != 0:
        text = ((out or "") + "\n" + (err or "")).strip()
        invalid = _INVALID_FIELD.search(text)
        if invalid:
            raise InvalidQueryField("%s: %s" % (" ".join(argv), invalid.group(0)), invalid.group(1))
        raise GpuProbeError("'%s' failed (rc=%s): %s" % (" ".join(argv), rc, text or "no output"))
    return out or ""


def query_gpus(run_command: RunCommand | None, nvidia_smi: str) -> list[dict[str, Any]]:
    """Run ``--query-gpu`` (with memory.reserved, else without it on drivers that lack the field)."""
    for fields in (GPU_FIELDS, GPU_FIELDS_LEGACY):
        argv = [nvidia_smi, "--query-gpu=" + ",".join(fields), CSV_FORMAT]
        try:
            return parse_csv(_run(run_command, argv), fields)
        except InvalidQueryField as exc:
            if exc.field != "memory.reserved" or fields is GPU_FIELDS_LEGACY:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


def probe_nvidia_smi(run_command: RunCommand | None, nvidia_smi: str = "nvidia-smi") -> dict[str, Any]:
    """Read every GPU through nvidia-smi: --query-gpu, --query-compute-apps, and the plain header."""
    gpu_rows = query_gpus(run_command, nvidia_smi)
    app_rows = parse_csv(_run(run_command, [nvidia_smi, "--query-compute-apps=" + ",".join(APP_FIELDS),
                                            CSV_FORMAT]), APP_FIELDS, free_text_last=True)
    try:
        header = parse_header(_run(run_command, [nvidia_smi]))
    except GpuProbeError:
        header = {"driver_version": None, "cuda_driver_version": None}
    drivers = sorted({row["driver_version"] for row in gpu_rows if row.get("driver_version")})
    return {"gpus": gpus_from_smi(gpu_rows, app_rows),
            "driver_version": drivers[0] if drivers else header["driver_version"],
            "cuda_driver_version": header["cuda_driver_version"]}


# What a sampling loop reads after its first probe: the only fields that change while a server runs.
MEMORY_FIELDS = ("index", "memory.total", "memory.used", "memory.free")


def query_memory(run_command: RunCommand | None, nvidia_smi: str, processes: bool = False) -> list[dict[str, Any]]:
    """The GPU dicts of one ``--query-gpu`` of MEMORY_FIELDS only (gpu_probe.free_memory_sampler's later samples),
    with each GPU's compute processes too (one more command) with ``processes``."""
    fields = MEMORY_FIELDS + (("uuid",) if processes else ())
    rows = parse_csv(_run(run_command, [nvidia_smi, "--query-gpu=" + ",".join(fields), CSV_FORMAT]), fields)
    apps = None
    if processes:
        apps = parse_csv(_run(run_command, [nvidia_smi, "--query-compute-apps=" + ",".join(APP_FIELDS),
                                            CSV_FORMAT]), APP_FIELDS, free_text_last=True)
    return gpus_from_smi(rows, apps)


def find_nvidia_smi(nvidia_smi: str | None = None,
                    which: Callable[[str], str | None] = shutil.which) -> tuple[str | None, str]:
    """Resolve the nvidia-smi to run: (path or None, a description for the error message)."""
    if not nvidia_smi:
        found = which("nvidia-smi")
        return found, "nvidia-smi not found on PATH"
    if os.sep in nvidia_smi:
        if os.path.isfile(nvidia_smi) and os.access(nvidia_smi, os.X_OK):
            return nvidia_smi, ""
        return None, "nvidia-smi not found at nvidia_smi=%s" % nvidia_smi
    return which(nvidia_smi), "nvidia-smi not found on PATH (nvidia_smi=%s)" % nvidia_smi

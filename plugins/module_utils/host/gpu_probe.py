# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""NVML access: per-GPU memory, identity and compute processes, from NVML or from nvidia-smi.

I/O here is limited to what the name says: loading NVML through ``pynvml`` (nvidia-ml-py, imported lazily, so
a managed host without it can still use nvidia-smi) and running ``nvidia-smi`` through an injected callable.
The parsing of nvidia-smi's CSV and header text is pure (text in, lists of dicts out).

Memory semantics, identical for both sources (all integers in bytes; nvidia-smi's MiB are 2**20 bytes):

- ``memory_total_bytes``: physical framebuffer (NVML ``total``, nvidia-smi ``memory.total``).
- ``memory_free_bytes``: unallocated (NVML ``free``, nvidia-smi ``memory.free``).
- ``memory_reserved_bytes``: set aside by driver and firmware (NVML v2 ``reserved``, nvidia-smi
  ``memory.reserved``); None where the driver does not report it.
- ``memory_used_bytes``: allocated by contexts, reserved memory excluded, as nvidia-smi prints it on current
  drivers: nvidia-smi's ``memory.used``; from NVML ``total - free - reserved``. (NVML v1 ``used`` is
  ``total - free`` and so counts the reserved memory; NVML v2's ``used`` field is documented as including
  ``reserved`` but is reported to match nvidia-smi on some drivers, so it is not read at all.) Where the
  reserved amount is unknown (old drivers), ``memory_used_bytes`` is ``total - free`` and includes it.
"""
from __future__ import annotations

import os
import re
import shutil

MIB = 2 ** 20
GIB = 2 ** 30

# Asked of nvidia-smi, in this order. memory.reserved appeared in later drivers: without it we ask again
# with GPU_FIELDS_LEGACY.
GPU_FIELDS = ("index", "uuid", "name", "memory.total", "memory.reserved", "memory.used", "memory.free",
              "persistence_mode", "mig.mode.current", "driver_version")
GPU_FIELDS_LEGACY = tuple(f for f in GPU_FIELDS if f != "memory.reserved")
APP_FIELDS = ("gpu_uuid", "pid", "used_memory", "process_name")  # the name last: it may hold commas
CSV_FORMAT = "--format=csv,noheader,nounits"

NVML_LIBRARY = "libnvidia-ml.so.1"
_NVML_ERROR_LIBRARY_NOT_FOUND = 12  # pynvml.NVML_ERROR_LIBRARY_NOT_FOUND

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


class GpuProbeError(ValueError):
    """A GPU probe failed, or its output could not be read; the message names the cause and the value."""


class ProbeUnavailable(GpuProbeError):
    """This probe cannot run on this host at all (no NVML library, no nvidia-smi): try the other one."""


class InvalidQueryField(GpuProbeError):
    """nvidia-smi rejected a --query-gpu field (older driver); ``field`` names it."""

    def __init__(self, message: str, field: str):
        super().__init__(message)
        self.field = field


# --------------------------------------------------------------------------------------------------
# Pure helpers
# --------------------------------------------------------------------------------------------------

def gib(value_bytes: int | None) -> float | None:
    """Bytes to GiB (2**30), rounded to 3 decimals; None stays None."""
    if value_bytes is None:
        return None
    return round(value_bytes / GIB, 3)


def cuda_version_from_int(value: int | None) -> str | None:
    """NVML's CUDA driver version integer to "major.minor": 12080 -> "12.8", 13000 -> "13.0"."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise GpuProbeError("CUDA driver version from NVML is not a positive integer: %r" % (value,))
    return "%d.%d" % (value // 1000, (value % 1000) // 10)


def is_unavailable(value: str) -> bool:
    """True for nvidia-smi's non-values: [N/A], [Not Supported], [Insufficient Permissions], N/A, ..."""
    return bool(_UNAVAILABLE.match(value.strip()))


def _split(line: str, maxsplit: int = -1) -> list[str]:
    # nvidia-smi separates values with ", " and never quotes them.
    return [value.strip() for value in line.split(",", maxsplit)]


def parse_csv(text: str, fields: tuple | list | None = None, free_text_last: bool = False) -> list[dict]:
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
    rows = []
    for number, line in enumerate(lines, start=1):
        values = _split(line, maxsplit)
        if len(values) != len(fields):
            raise GpuProbeError(
                "nvidia-smi CSV line %d has %d values where %d fields (%s) were asked for: %r"
                % (number, len(values), len(fields), ", ".join(fields), line))
        rows.append({name: (None if is_unavailable(value) else value) for name, value in zip(fields, values)})
    return rows


def parse_header(text: str) -> dict:
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


def _mig(flag: bool | None) -> str | None:
    if flag is None:
        return None
    return "enabled" if flag else "disabled"


def gpus_from_smi(gpu_rows: list[dict], app_rows: list[dict] | None = None) -> list[dict]:
    """Normalise parsed ``--query-gpu`` rows (and ``--query-compute-apps`` rows) into GPU dicts.

    Each GPU dict: index, uuid, name, memory_{total,free,used,reserved}_bytes (None where nvidia-smi gave
    none), persistence_mode (bool|None), mig_mode ("enabled"|"disabled"|None), compute_processes
    (list of {pid, name, used_memory_bytes}). Processes are matched to GPUs by UUID; a process on a UUID
    that is not one of the GPUs (a MIG device) is left out.
    """
    gpus = []
    by_uuid = {}
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
        gpu = {
            "index": index,
            "uuid": row.get("uuid"),
            "name": row.get("name"),
            "memory_total_bytes": total,
            "memory_free_bytes": free,
            "memory_used_bytes": used,
            "memory_reserved_bytes": reserved,
            "persistence_mode": _enabled(row.get("persistence_mode"), where + " persistence_mode"),
            "mig_mode": _mig(_enabled(row.get("mig.mode.current"), where + " mig.mode.current")),
            "compute_processes": [],
        }
        gpus.append(gpu)
        if gpu["uuid"]:
            by_uuid[gpu["uuid"]] = gpu
    for row in app_rows or []:
        pid = _int(row.get("pid"), "compute app pid")
        if pid is None:
            raise GpuProbeError("nvidia-smi listed a compute process without a pid: %r" % (row,))
        gpu = by_uuid.get(row.get("gpu_uuid"))
        if gpu is None:  # e.g. a MIG device UUID: not one of the GPUs reported
            continue
        gpu["compute_processes"].append({
            "pid": pid,
            "name": row.get("process_name"),
            "used_memory_bytes": _mib_to_bytes(row.get("used_memory"), "pid %d used_memory" % pid),
        })
    gpus.sort(key=lambda g: g["index"])
    return gpus


def summarize(gpus: list[dict], source: str, driver_version: str | None,
              cuda_driver_version: str | None, nvml_error: str | None = None) -> dict:
    """The gpu_info result: GPU dicts with *_gib added, and the summaries the tuner reads.

    ``min_free_gib`` / ``total_memory_gib_min`` are the minimum over all GPUs, or None when there is no
    GPU or any GPU's value is unknown (a minimum over a subset would overstate what every rank has).
    """
    out = []
    for gpu in gpus:
        gpu = dict(gpu)
        for key in ("total", "free", "used", "reserved"):
            gpu["memory_%s_gib" % key] = gib(gpu.get("memory_%s_bytes" % key))
        out.append(gpu)

    def _min(key):
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


# --------------------------------------------------------------------------------------------------
# NVML
# --------------------------------------------------------------------------------------------------

def _text(value) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _is_nvml_error(exc: BaseException, nvml, name: str) -> bool:
    cls = getattr(nvml, name, None)
    return isinstance(cls, type) and isinstance(exc, cls)


def describe_nvml_error(exc: BaseException, nvml=None) -> str:
    """A sentence for an NVML failure; the missing-library case names the library."""
    if _is_nvml_error(exc, nvml, "NVMLError_LibraryNotFound") or \
            getattr(exc, "value", None) == _NVML_ERROR_LIBRARY_NOT_FOUND:
        return "NVML library not found (%s)" % NVML_LIBRARY
    try:
        text = str(exc)
    except Exception:  # pynvml's __str__ may itself call into the library
        text = "NVML error code %s" % getattr(exc, "value", "?")
    return "NVML %s: %s" % (type(exc).__name__, text)


def _import_pynvml():
    try:
        import pynvml  # pylint: disable=import-outside-toplevel
    except ImportError as exc:
        raise ProbeUnavailable("pynvml (nvidia-ml-py) is not importable: %s" % exc)
    return pynvml


def probe_nvml(nvml=None) -> dict:
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


def _optional(nvml_error, call, *args):
    try:
        return call(*args)
    except nvml_error:
        return None


def _read_nvml(nvml, nvml_error) -> dict:
    driver = _text(nvml.nvmlSystemGetDriverVersion())
    cuda = None
    for name in ("nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion"):
        if cuda is None and hasattr(nvml, name):
            cuda = _optional(nvml_error, getattr(nvml, name))
    gpus = []
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
            "mig_mode": None if not mig else _mig(bool(mig[0])),
            "compute_processes": _nvml_processes(nvml, nvml_error, handle),
        })
    gpus.sort(key=lambda g: g["index"])
    return {"gpus": gpus, "driver_version": driver, "cuda_driver_version": cuda_version_from_int(cuda)}


def _nvml_memory(nvml, nvml_error, handle):
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


def _nvml_processes(nvml, nvml_error, handle) -> list[dict]:
    procs = _optional(nvml_error, nvml.nvmlDeviceGetComputeRunningProcesses, handle) or []
    out = []
    for proc in procs:
        pid = int(proc.pid)
        name = _optional(nvml_error, nvml.nvmlSystemGetProcessName, pid) if hasattr(nvml, "nvmlSystemGetProcessName") else None
        used = getattr(proc, "usedGpuMemory", None)
        out.append({"pid": pid, "name": None if name is None else _text(name),
                    "used_memory_bytes": None if used is None else int(used)})
    return out


# --------------------------------------------------------------------------------------------------
# nvidia-smi
# --------------------------------------------------------------------------------------------------

def _run(run_command, argv: list[str]) -> str:
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


def query_gpus(run_command, nvidia_smi: str) -> list[dict]:
    """Run ``--query-gpu`` (with memory.reserved, else without it on drivers that lack the field)."""
    for fields in (GPU_FIELDS, GPU_FIELDS_LEGACY):
        argv = [nvidia_smi, "--query-gpu=" + ",".join(fields), CSV_FORMAT]
        try:
            return parse_csv(_run(run_command, argv), fields)
        except InvalidQueryField as exc:
            if exc.field != "memory.reserved" or fields is GPU_FIELDS_LEGACY:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


def probe_nvidia_smi(run_command, nvidia_smi: str = "nvidia-smi") -> dict:
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


def find_nvidia_smi(nvidia_smi: str | None = None, which=shutil.which) -> tuple[str | None, str]:
    """Resolve the nvidia-smi to run: (path or None, a description for the error message)."""
    if not nvidia_smi:
        found = which("nvidia-smi")
        return found, "nvidia-smi not found on PATH"
    if os.sep in nvidia_smi:
        if os.path.isfile(nvidia_smi) and os.access(nvidia_smi, os.X_OK):
            return nvidia_smi, ""
        return None, "nvidia-smi not found at nvidia_smi=%s" % nvidia_smi
    return which(nvidia_smi), "nvidia-smi not found on PATH (nvidia_smi=%s)" % nvidia_smi


# --------------------------------------------------------------------------------------------------
# Entry point
# --------------------------------------------------------------------------------------------------

PREFER_CHOICES = ("auto", "nvml", "nvidia_smi")


# What a sampling loop reads after its first probe: the only fields that change while a server runs.
MEMORY_FIELDS = ("index", "memory.total", "memory.used", "memory.free")


def free_memory_sampler(run_command=None, nvidia_smi: str | None = None, prefer: str = "auto", nvml=None,
                        which=shutil.which, processes=False):
    """A probe for a loop that reads free memory many times a second (kv_stress, gpu_info's watch; every 0.1 s by
    default): a function that returns the GPU dicts of :func:`probe`. Its first call is :func:`probe`'s; later calls
    ask the source that answered for each GPU's index and memory only: NVML in-process as before, nvidia-smi with
    one ``--query-gpu`` instead of three commands (three process starts per sample keep a CPU core of the host busy
    in a 0.1 s loop). With ``processes``, each sample lists every GPU's compute processes too (NVML's, or one more
    nvidia-smi command)."""
    found = {}
    fields = MEMORY_FIELDS + (("uuid",) if processes else ())

    def sample() -> list[dict]:
        if not found:
            result = probe(run_command=run_command, nvidia_smi=nvidia_smi, prefer=prefer, nvml=nvml, which=which)
            found["source"] = result["source"]
            if result["source"] != "nvml":
                found["nvidia_smi"] = find_nvidia_smi(nvidia_smi, which)[0]
            return result["gpus"]
        if found["source"] == "nvml":
            return probe_nvml(nvml)["gpus"]
        rows = parse_csv(_run(run_command, [found["nvidia_smi"], "--query-gpu=" + ",".join(fields), CSV_FORMAT]), fields)
        apps = None
        if processes:
            apps = parse_csv(_run(run_command, [found["nvidia_smi"], "--query-compute-apps=" + ",".join(APP_FIELDS),
                                                CSV_FORMAT]), APP_FIELDS, free_text_last=True)
        return gpus_from_smi(rows, apps)

    return sample


def probe(run_command=None, nvidia_smi: str | None = None, prefer: str = "auto", nvml=None,
          which=shutil.which) -> dict:
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

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The simulated hardware: a host.json file describes the GPUs, the software versions and the faults.

The GPUs are a property of the host, not of the server process: the server and ``sglang-sim-smi`` (installed as
``nvidia-smi``) read the same file, so both agree on what the GPUs are. The file is ``/etc/sglang-sim/host.json``
unless the environment variable ``SGLANG_SIM_HOST`` names another one. See the package README for the schema.

Memory of GPU ``i`` as nvidia-smi sees it: ``total = reserved + used + free`` (MiB). ``reserved`` is the driver's
and firmware's; ``used`` is what processes hold: another process's ``gpu_occupied_mib`` fault (and, while a server
loads and sizes its pools, its ``load_contention_mib`` neighbour), and the simulated server's CUDA context, NCCL
buffers, a small per-GPU difference (``noise_mib``, deterministic per index), weights, KV pool, CUDA graphs and
cached activations.

The SGLang version the host runs is that of the installed ``sglang`` distribution (the stand-in wheel, one per
simulated SGLang version, that pip installs as on a real host): installing another version changes the server's KV
arithmetic, its errors and what it reports. host.json's ``sglang_version`` counts only where no ``sglang``
distribution is installed (the simulator run from its source tree).
"""
from __future__ import annotations

import hashlib
import json
import os
import re

HOST_ENV = "SGLANG_SIM_HOST"
DEFAULT_HOST_PATH = "/etc/sglang-sim/host.json"
STATE_ENV = "SGLANG_SIM_STATE"
DEFAULT_STATE_DIR = "/run/sglang-sim"

MIB = 2 ** 20
GIB = 2 ** 30

LOG_FORMATS = ("classic", "current")
TIME_SCALES = ("fast", "realistic")

# Defaults of the memory behaviour: what SGLang allocates besides weights and KV, and what a batch needs.
DEFAULT_MEMORY = {
    # PyTorch's activations for one prefill token (hidden states, MoE/MLP intermediates, attention workspace).
    "activation_bytes_per_prefill_token": 262144,
    # Activations per token of a decode batch that runs eagerly (larger than the captured CUDA graphs).
    "activation_bytes_per_decode_token": 65536,
    # cuBLAS/attention-backend workspaces allocated after the KV pool, before graph capture.
    "workspace_mib": 64,
    # CUDA-graph memory pool: a base plus a share per captured token (batch size x tokens per request).
    "graph_mib_base": 32,
    "graph_kib_per_token": 64,
    # EAGLE draft: decode and extend graphs (one draft layer, small).
    "draft_graph_mib": 40,
    # The caching allocator keeps freed activation blocks and rounds up: reserved = activations * (1 + this).
    "allocator_fragmentation": 0.05,
}

DEFAULT_FAULTS = {"hang_at_startup": False, "crash_at_startup": False, "crash_after_requests": None, "slow_start_s": 0,
                  "gpu_occupied_mib": {}, "load_contention_mib": {}, "load_contention_unlisted": [],
                  "load_contention_from": "load",
                  "from_mem_fraction_static": None,
                  "for_sglang_versions": None, "argv0": None, "metrics_garbage": False}
# The faults of the server process; from_mem_fraction_static limits them to servers started at that value or above
# (a value that hangs or crashes while lower ones work: what the tuner must back off from), for_sglang_versions to
# servers of those SGLang versions (a release that does not start on this host: what a rollout must roll back).
# load_contention_mib: another process takes that many MiB on the named GPUs of the server while it loads its weights
# and gives them back once the server has sized its pools (memory.Server._startup; the oracle ignores it).
# load_contention_unlisted: the GPUs on which nvidia-smi does not list that process (another container's): its memory
# is in memory.used, under no compute process. load_contention_from: "load" (it takes its memory as the weights start
# to load) or "pool" (once the weights are loaded and logged, before SGLang measures the free memory again to size
# its pools: the log's weights and avail mem are clean, the pools smaller), or "idle" (CONTENTION_AFTER_INFO_S after
# the server is first asked for its info while idle after a load that reserved half the pool or more, as kv_stress
# asks when its load ends; it keeps the memory until the server exits: the start and the load were clean, what comes
# after them is not).
# metrics_garbage: /metrics answers 200 with a text that is not Prometheus' (a proxy's error page), read at each
# request, so a test can turn it on and off under a running server.
CONTENTION_FROM = ("load", "pool", "idle")
CONTENTION_AFTER_INFO_S = 0.1
SERVER_FAULTS = ("hang_at_startup", "crash_at_startup", "crash_after_requests", "slow_start_s", "load_contention_mib")

# PCI bus ids of a typical 8-GPU server (HGX board), in index order.
_BUS_IDS = ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB")
PCI_KEYS = ("nvswitch_count", "gpu_device_id", "nvswitch_device_id", "nvswitch_bus_ids")


class SimConfigError(ValueError):
    """host.json, a model directory or a profile is missing or invalid; the message names the file and the field."""


def installed_sglang_version() -> str | None:
    """The version of the ``sglang`` distribution this interpreter finds (its ``sglang-<version>.dist-info``), or
    None when there is none."""
    try:
        from importlib import metadata  # pylint: disable=import-outside-toplevel
        return metadata.version("sglang")
    except Exception:  # pylint: disable=broad-except
        return None


def sglang_version(path: str | None = None) -> str:
    """The SGLang version of this host: the installed ``sglang`` distribution's, else host.json's ``sglang_version``
    (raises SimConfigError when that is needed and the host file is unreadable)."""
    return installed_sglang_version() or load_host(path).host_sglang_version


def host_path() -> str:
    """The host.json in use: $SGLANG_SIM_HOST, else /etc/sglang-sim/host.json."""
    return os.environ.get(HOST_ENV) or DEFAULT_HOST_PATH


def state_dir() -> str:
    """The directory of the servers' live GPU state files: $SGLANG_SIM_STATE, else /run/sglang-sim."""
    return os.environ.get(STATE_ENV) or DEFAULT_STATE_DIR


def _number(data, key, where, minimum=0, integer=False):
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < minimum:
        raise SimConfigError("%s: %s must be a number >= %s, got %r" % (where, key, minimum, value))
    if integer and int(value) != value:
        raise SimConfigError("%s: %s must be an integer, got %r" % (where, key, value))
    return int(value) if integer else float(value)


class Host:
    """One simulated host, read from a host.json dict. Attributes mirror the JSON keys."""

    def __init__(self, data: dict, path: str = "<dict>"):
        if not isinstance(data, dict):
            raise SimConfigError("%s: not a JSON object" % path)
        self.path = path
        self.data = data            # as read: a multi-node server sends it to the other nodes (multinode.py)
        gpu = data.get("gpu")
        if not isinstance(gpu, dict):
            raise SimConfigError("%s: 'gpu' must be an object with name, count and memory_total_mib" % path)
        where = path + " gpu"
        for key in ("name", "count", "memory_total_mib"):
            if key not in gpu:
                raise SimConfigError("%s: missing gpu.%s" % (path, key))
        self.name = str(data.get("name", "sim"))
        self.gpu_name = str(gpu["name"])
        self.gpu_count = _number(gpu, "count", where, 1, integer=True)
        self.memory_total_mib = _number(gpu, "memory_total_mib", where, 1, integer=True)
        self.memory_reserved_mib = _number(dict(gpu, memory_reserved_mib=gpu.get("memory_reserved_mib", 0)),
                                           "memory_reserved_mib", where, 0, integer=True)
        self.power_limit_w = int(gpu.get("power_limit_w", 700))
        self.bus_ids = list(gpu.get("pci_bus_ids") or [])
        defaults = {"cuda_context_mib": 500, "nccl_mib": 0, "noise_mib": 0, "weight_load_gb_per_s": 1.0}
        values = dict(defaults, **{k: data[k] for k in defaults if k in data})
        self.cuda_context_mib = _number(values, "cuda_context_mib", path, 0, integer=True)
        self.nccl_mib = _number(values, "nccl_mib", path, 0, integer=True)
        self.noise_mib = _number(values, "noise_mib", path, 0, integer=True)
        self.weight_load_gb_per_s = _number(values, "weight_load_gb_per_s", path, 0.001)
        self.driver_version = str(data.get("driver_version", "580.95.05"))
        self.cuda_version = str(data.get("cuda_version", "13.0"))
        # What host.json says; the version in use (sglang_version) is the installed distribution's when there is one.
        self.host_sglang_version = str(data.get("sglang_version", "0.5.9"))
        self._sglang_version = None
        self._sglang_version_from = ""
        self.log_format = data.get("log_format", "classic")
        if self.log_format not in LOG_FORMATS:
            raise SimConfigError("%s: log_format must be one of %s, got %r" % (path, LOG_FORMATS, self.log_format))
        self.time_scale = data.get("time_scale", "fast")
        if self.time_scale not in TIME_SCALES:
            raise SimConfigError("%s: time_scale must be one of %s, got %r" % (path, TIME_SCALES, self.time_scale))
        memory = data.get("memory") or {}
        unknown = sorted(set(memory) - set(DEFAULT_MEMORY))
        if unknown:
            raise SimConfigError("%s: unknown memory keys %s (known: %s)" % (path, unknown, sorted(DEFAULT_MEMORY)))
        merged = dict(DEFAULT_MEMORY, **memory)
        self._memory = {key: _number(merged, key, path + " memory") for key in DEFAULT_MEMORY}
        # A release whose memory needs differ from the others' (a larger graph reserve, more activations): what an
        # upgrade to it changes, and a pin verified on the old release may not survive.
        by_version = data.get("memory_for_sglang_versions") or {}
        if not isinstance(by_version, dict):
            raise SimConfigError("%s: memory_for_sglang_versions must be an object of SGLang version -> memory keys, "
                                 "got %r" % (path, by_version))
        self._memory_for_versions = {}
        for version, keys in by_version.items():
            unknown = sorted(set(keys or {}) - set(DEFAULT_MEMORY)) if isinstance(keys, dict) else ["(not an object)"]
            if unknown:
                raise SimConfigError("%s: memory_for_sglang_versions[%r]: unknown memory keys %s (known: %s)"
                                     % (path, version, unknown, sorted(DEFAULT_MEMORY)))
            self._memory_for_versions[str(version)] = {
                key: _number(keys, key, "%s memory_for_sglang_versions[%r]" % (path, version)) for key in keys}
        faults = data.get("faults") or {}
        unknown = sorted(set(faults) - set(DEFAULT_FAULTS))
        if unknown:
            raise SimConfigError("%s: unknown faults %s (known: %s)" % (path, unknown, sorted(DEFAULT_FAULTS)))
        self.faults = dict(DEFAULT_FAULTS, **faults)
        self.occupied_mib = _per_gpu_mib(self.faults, "gpu_occupied_mib", path, self.gpu_count)
        self.contention_mib = _per_gpu_mib(self.faults, "load_contention_mib", path, self.gpu_count)
        self.contention_unlisted = _gpu_list(self.faults, "load_contention_unlisted", path, self.gpu_count)
        self.contention_from = self.faults.get("load_contention_from")
        if self.contention_from not in CONTENTION_FROM:
            raise SimConfigError("%s: faults.load_contention_from must be one of %s, got %r"
                                 % (path, list(CONTENTION_FROM), self.contention_from))
        self.default_launch_args = list(data.get("default_launch_args") or [])
        self.pci = _pci_section(data.get("pci"), path)

    @property
    def memory(self) -> dict:
        """What SGLang needs besides weights and KV: host.json's memory, with memory_for_sglang_versions' keys for
        the SGLang version this host runs over it."""
        return dict(self._memory, **self._memory_for_versions.get(self.sglang_version, {}))

    @property
    def sglang_version(self) -> str:
        """The SGLang version this host runs (see the module docstring); looked up when first asked for."""
        if self._sglang_version is None:
            installed = installed_sglang_version()
            self._sglang_version = installed or self.host_sglang_version
            self._sglang_version_from = "installed sglang distribution" if installed else "host.json"
        return self._sglang_version

    @sglang_version.setter
    def sglang_version(self, version: str) -> None:
        """Run another version than the installed one (the oracle's --sglang-version)."""
        self._sglang_version = str(version)
        self._sglang_version_from = "given"

    @property
    def sglang_version_from(self) -> str:
        """Where sglang_version comes from: installed sglang distribution, host.json or given."""
        return self._sglang_version_from if self.sglang_version else ""

    # -- per GPU ---------------------------------------------------------------------------------------------

    def server_faults(self, mem_fraction_static) -> dict:
        """The faults of a server started at ``mem_fraction_static``: none below faults.from_mem_fraction_static,
        none when faults.for_sglang_versions does not list the SGLang version this host runs."""
        gate = self.faults.get("from_mem_fraction_static")
        versions = self.faults.get("for_sglang_versions")
        if (gate is not None and mem_fraction_static is not None and float(mem_fraction_static) < float(gate)) \
                or (versions is not None and self.sglang_version not in [str(v) for v in versions]):
            return dict(self.faults, **{key: DEFAULT_FAULTS[key] for key in SERVER_FAULTS})
        return dict(self.faults)

    def load_contention(self, mem_fraction_static) -> dict:
        """GPU index -> MiB the load_contention_mib neighbour takes while a server started at ``mem_fraction_static``
        loads its weights ({} where the fault's gates leave that server alone)."""
        if not self.server_faults(mem_fraction_static).get("load_contention_mib"):
            return {}
        return {index: mib for index, mib in self.contention_mib.items() if mib}

    def noise_of(self, index: int) -> int:
        """MiB this GPU's CUDA context takes beyond the others: 0..noise_mib, fixed per host name and index."""
        if not self.noise_mib:
            return 0
        digest = hashlib.sha256(("%s:%d" % (self.name, index)).encode()).digest()
        return digest[0] % (self.noise_mib + 1)

    def free_idle_mib(self, index: int) -> int:
        """Free MiB of GPU ``index`` with no simulated server on it (another process's memory counted)."""
        return self.memory_total_mib - self.memory_reserved_mib - self.occupied_mib.get(index, 0)

    def uuid(self, index: int) -> str:
        """A stable GPU UUID in NVIDIA's format, derived from the host name and the index."""
        text = hashlib.sha256(("uuid:%s:%d" % (self.name, index)).encode()).hexdigest()
        return "GPU-%s-%s-%s-%s-%s" % (text[:8], text[8:12], text[12:16], text[16:20], text[20:32])

    def bus_id(self, index: int) -> str:
        """PCI bus id as nvidia-smi prints it (00000000:18:00.0)."""
        if index < len(self.bus_ids):
            return self.bus_ids[index]
        base = _BUS_IDS[index] if index < len(_BUS_IDS) else "%02X" % (0xE0 + index)
        return "00000000:%s:00.0" % base

    def seconds(self, realistic: float, fast: float) -> float:
        """How long a startup phase or a batch takes on this host's time scale."""
        return realistic if self.time_scale == "realistic" else fast


def _per_gpu_mib(faults: dict, key: str, path: str, gpu_count: int) -> dict:
    """A ``{"<GPU index>": MiB}`` fault, checked: an object, indexes of this host's GPUs, non-negative integer
    MiB. Returns {index: MiB}."""
    value = faults.get(key) or {}
    if not isinstance(value, dict):
        raise SimConfigError("%s: faults.%s must be an object of GPU index -> MiB such as {\"0\": 8192}, got %r"
                             % (path, key, value))
    found = {}
    for index, mib in value.items():
        if not str(index).isdigit() or int(index) >= gpu_count:
            raise SimConfigError("%s: faults.%s names GPU %r, the host has GPUs 0-%d"
                                 % (path, key, index, gpu_count - 1))
        found[int(index)] = _number({key: mib}, key, "%s faults (GPU %s)" % (path, index), 0, integer=True)
    return found


def _gpu_list(faults: dict, key: str, path: str, gpu_count: int) -> set:
    """A ``[<GPU index>, ...]`` fault, checked: a list of this host's GPU indexes. Returns them as a set."""
    value = faults.get(key) or []
    if not isinstance(value, list) or any(isinstance(index, bool) or not isinstance(index, int)
                                          or not 0 <= index < gpu_count for index in value):
        raise SimConfigError("%s: faults.%s must be a list of GPU indexes 0-%d such as [4, 5], got %r"
                             % (path, key, gpu_count - 1, value))
    return set(value)


def _pci_section(pci, path: str) -> dict:
    """host.json's optional ``pci`` section (what lspci shows besides the GPUs; see pci.py), checked."""
    if pci is None:
        pci = {}
    if not isinstance(pci, dict):
        raise SimConfigError("%s: 'pci' must be an object with keys from %s" % (path, list(PCI_KEYS)))
    unknown = sorted(set(pci) - set(PCI_KEYS))
    if unknown:
        raise SimConfigError("%s: unknown pci keys %s (known: %s)" % (path, unknown, list(PCI_KEYS)))
    section = {"nvswitch_count": _number(dict(nvswitch_count=pci.get("nvswitch_count", 0)), "nvswitch_count",
                                         path + " pci", 0, integer=True)}
    for key in ("gpu_device_id", "nvswitch_device_id"):
        value = pci.get(key)
        if value is not None and not re.fullmatch(r"(10de:)?[0-9a-fA-F]{4}", str(value)):
            raise SimConfigError("%s: pci.%s must be an NVIDIA PCI device id such as \"10de:2335\", got %r"
                                 % (path, key, value))
        section[key] = int(str(value)[-4:], 16) if value is not None else None
    bus_ids = pci.get("nvswitch_bus_ids")
    if bus_ids is not None and not (isinstance(bus_ids, list) and all(isinstance(bus, str) for bus in bus_ids)):
        raise SimConfigError("%s: pci.nvswitch_bus_ids must be a list of PCI addresses, got %r" % (path, bus_ids))
    section["nvswitch_bus_ids"] = list(bus_ids or [])
    return section


def load_host(path: str | None = None) -> Host:
    """Read and validate a host.json (default: :func:`host_path`)."""
    path = path or host_path()
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except OSError as exc:
        raise SimConfigError("cannot read the simulated host file %s (set %s to another one): %s"
                             % (path, HOST_ENV, exc.strerror or exc))
    except ValueError as exc:
        raise SimConfigError("%s is not valid JSON: %s" % (path, exc))
    return Host(data, path)

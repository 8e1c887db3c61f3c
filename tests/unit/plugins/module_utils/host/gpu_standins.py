# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Stand-ins the GPU probe's tests share: a pynvml that raises pynvml's own error shapes (FakeNvml), an nvidia-smi
behind an injected runner (Runner), and the real outputs of tests/fixtures/nvidia_smi."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from ansible_collections.llmserve.sglang.plugins.module_utils.host import nvidia_smi


FIXTURES = Path(__file__).resolve().parents[4] / "fixtures" / "nvidia_smi"


MIB = 2 ** 20


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


class NVMLError(Exception):
    """Same shape as pynvml.NVMLError: carries the NVML return code in .value."""

    def __init__(self, value):
        super().__init__(value)
        self.value = value

    def __str__(self):
        return {12: "NVML Shared Library Not Found", 9: "Driver Not Loaded", 3: "Not Supported",
                4: "Insufficient Permissions", 6: "Not Found", 13: "Function Not Found"}.get(self.value, "Unknown Error")


def _error_class(name, value):
    return type(name, (NVMLError,), {"__init__": lambda self, *a: NVMLError.__init__(self, value)})


NVMLError_LibraryNotFound = _error_class("NVMLError_LibraryNotFound", 12)


NVMLError_DriverNotLoaded = _error_class("NVMLError_DriverNotLoaded", 9)


NVMLError_NotSupported = _error_class("NVMLError_NotSupported", 3)


NVMLError_NoPermission = _error_class("NVMLError_NoPermission", 4)


NVMLError_NotFound = _error_class("NVMLError_NotFound", 6)


NVMLError_FunctionNotFound = _error_class("NVMLError_FunctionNotFound", 13)


H200_TOTAL = 143771 * MIB  # NVIDIA H200 as nvidia-smi shows it (sglang-project/sglang#3196)


class FakeNvml:
    """Just the pynvml calls nvml.py makes, over a list of device dicts."""

    NVMLError = NVMLError
    NVMLError_LibraryNotFound = NVMLError_LibraryNotFound
    NVMLError_NoPermission = NVMLError_NoPermission
    nvmlMemory_v2 = 0x02000028

    def __init__(self, devices, init_error=None, driver="570.133.20", cuda=12080, memory_v2=True):
        self.devices = devices
        self.init_error = init_error
        self.driver = driver
        self.cuda = cuda
        self.memory_v2 = memory_v2
        self.initialized = False
        self.shutdowns = 0

    def nvmlInit(self):
        if self.init_error is not None:
            raise self.init_error
        self.initialized = True

    def nvmlShutdown(self):
        self.shutdowns += 1

    def nvmlSystemGetDriverVersion(self):
        return self.driver

    def nvmlSystemGetCudaDriverVersion_v2(self):
        return self.cuda

    def nvmlSystemGetCudaDriverVersion(self):
        return self.cuda

    def nvmlSystemGetProcessName(self, pid):
        for dev in self.devices:
            for proc in dev.get("procs", []):
                if proc["pid"] == pid:
                    if proc.get("name") is None:
                        raise NVMLError_NotFound()
                    return proc["name"].encode()  # old bindings return bytes
        raise NVMLError_NotFound()

    def nvmlDeviceGetCount(self):
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, i):
        return self.devices[i]

    def nvmlDeviceGetIndex(self, h):
        return h["index"]

    def nvmlDeviceGetUUID(self, h):
        return h["uuid"]

    def nvmlDeviceGetName(self, h):
        return h["name"]

    def nvmlDeviceGetMemoryInfo(self, h, version=None):
        if h.get("memory_error"):
            raise h["memory_error"]
        if version is not None:
            if not self.memory_v2:
                raise NVMLError_FunctionNotFound()
            # as NVML documents v2: `used` includes `reserved`; nvml.py must not read it
            return SimpleNamespace(version=version, total=h["total"], reserved=h["reserved"], free=h["free"],
                                   used=h["total"] - h["free"])
        return SimpleNamespace(total=h["total"], free=h["free"], used=h["total"] - h["free"])

    def nvmlDeviceGetPersistenceMode(self, h):
        return h.get("persistence", 1)

    def nvmlDeviceGetMigMode(self, h):
        if h.get("mig") is None:
            raise NVMLError_NotSupported()
        return [h["mig"], h["mig"]]

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return [SimpleNamespace(pid=p["pid"], usedGpuMemory=p.get("used"), gpuInstanceId=0xFFFFFFFF,
                                computeInstanceId=0xFFFFFFFF) for p in h.get("procs", [])]


def h200(i, free_mib=143139, reserved_mib=631, procs=(), mig=0):
    return {"index": i, "uuid": "GPU-%08x-0000-0000-0000-000000000000" % i, "name": "NVIDIA H200",
            "total": H200_TOTAL, "free": free_mib * MIB, "reserved": reserved_mib * MIB,
            "procs": list(procs), "mig": mig}


def eight_h200_csv(fields):
    """8 GPUs in --query-gpu noheader,nounits form; H200 total and driver from real outputs, rest made up."""
    lines = []
    for i in range(8):
        values = {"index": str(i), "uuid": "GPU-%08x-0000-0000-0000-000000000000" % i, "name": "NVIDIA H200",
                  "memory.total": "143771", "memory.reserved": "631", "memory.used": str(124585 if i else 124729),
                  "memory.free": str(143771 - 631 - (124585 if i else 124729)), "persistence_mode": "Enabled",
                  "mig.mode.current": "Disabled", "driver_version": "550.144.03"}
        lines.append(", ".join(values[f] for f in fields))
    return "\n".join(lines) + "\n"


class Runner:
    def __init__(self, gpu_fields_ok=nvidia_smi.GPU_FIELDS, apps="", header=None, fail=None):
        self.calls = []
        self.gpu_fields_ok = gpu_fields_ok
        self.apps = apps
        self.header = header if header is not None else fixture("table_8xh200_550.txt")
        self.fail = fail

    def __call__(self, argv):
        self.calls.append(argv)
        if self.fail:
            return self.fail
        if len(argv) == 1:
            return 0, self.header, ""
        query = argv[1]
        if query.startswith("--query-gpu="):
            fields = tuple(query.split("=", 1)[1].split(","))
            if "memory.reserved" in fields and "memory.reserved" not in self.gpu_fields_ok:
                return 2, fixture("query_gpu_invalid_field.txt").replace("device_minor", "memory.reserved"), ""
            return 0, eight_h200_csv(fields), ""
        if query.startswith("--query-compute-apps="):
            return 0, self.apps, ""
        return 2, "unknown", ""

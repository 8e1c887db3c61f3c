# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpu_probe: nvidia-smi parsing on real output (tests/fixtures/nvidia_smi, sources in SOURCES.md), NVML through
a stand-in for pynvml that raises pynvml's own error shapes, and the fallback between the two."""
from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from ansible_collections.llmserve.sglang.plugins.module_utils.host import gpu_probe as gp

FIXTURES = Path(__file__).resolve().parents[4] / "fixtures" / "nvidia_smi"
MIB = 2 ** 20


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


# ------------------------------------------------------------------------------------------------
# A stand-in for the pynvml module
# ------------------------------------------------------------------------------------------------

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
    """Just the pynvml calls gpu_probe makes, over a list of device dicts."""

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
            # as NVML documents v2: `used` includes `reserved`; gpu_probe must not read it
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


# ------------------------------------------------------------------------------------------------
# parse_csv on real output
# ------------------------------------------------------------------------------------------------

def test_one_gpu_na_value_is_none():
    fields = ("memory.total", "memory.free", "memory.used", "temperature.gpu", "fan.speed",
              "utilization.gpu", "utilization.memory")
    rows = gp.parse_csv(fixture("query_gpu_1gpu_na_nounits.txt"), fields)
    assert rows == [{"memory.total": "2004", "memory.free": "2004", "memory.used": "0", "temperature.gpu": "44",
                     "fan.speed": None, "utilization.gpu": "0", "utilization.memory": "0"}]


def test_not_supported_values_are_none():
    fields = ("gpu_name", "utilization.gpu", "utilization.memory", "temperature.gpu", "power.draw", "power.limit",
              "fan.speed", "pstate", "clocks.current.graphics", "clocks.current.memory", "power.max_limit",
              "power.default_limit")
    (row,) = gp.parse_csv(fixture("query_gpu_1gpu_not_supported.txt"), fields)
    assert row["gpu_name"] == "GeForce GTX 770"
    assert row["fan.speed"] == "52 %"
    assert [k for k, v in row.items() if v is None] == [
        "utilization.gpu", "utilization.memory", "power.draw", "power.limit", "clocks.current.graphics",
        "clocks.current.memory", "power.max_limit", "power.default_limit"]


def test_header_units_dropped_and_insufficient_permissions_is_none():
    (row,) = gp.parse_csv(fixture("query_gpu_a100_mig_insufficient_permissions.txt"))
    assert list(row) == ["name", "driver_version", "temperature.gpu", "utilization.gpu", "utilization.memory",
                         "memory.total", "memory.free", "memory.used"]
    assert row["name"] == "NVIDIA A100-SXM4-80GB" and row["driver_version"] == "535.161.08"
    assert row["memory.total"] is None and row["memory.free"] is None and row["memory.used"] is None


def test_mig_container_memory_total_unavailable():
    assert gp.parse_csv(fixture("query_gpu_memory_total_mig_container.txt"), ["memory.total"]) == [
        {"memory.total": None}]


def test_mig_enabled_on_one_of_four_gpus():
    rows = gp.parse_csv(fixture("query_gpu_4gpu_mig_enabled.txt"))
    for i, row in enumerate(rows):
        row["index"] = str(i)
    gpus = gp.gpus_from_smi(rows)
    assert [g["mig_mode"] for g in gpus] == ["enabled", "disabled", "disabled", "disabled"]
    assert gpus[0]["uuid"] == "GPU-ec845691-fb46-e16d-abfb-b135308cb39f"
    assert gpus[0]["memory_total_bytes"] is None  # not asked for: unknown, not zero


def test_mig_mode_not_applicable():
    (row,) = gp.parse_csv(fixture("query_gpu_mig_mode_na.txt"))
    row["index"] = "0"
    assert gp.gpus_from_smi([row])[0]["mig_mode"] is None


def test_processes_present_are_attached_to_their_gpus():
    apps = gp.parse_csv(fixture("query_compute_apps_3procs.txt"))
    assert [a["process_name"] for a in apps] == ["vgpu", "vgpu", "vgpu"]
    for pid, app in enumerate(apps, start=100):
        app["pid"] = str(pid)
    gpu_rows = [{"index": "0", "uuid": "GPU-d0180485-9584-433c-6782-c335d5df2cb3"},
                {"index": "1", "uuid": "GPU-777ead31-954e-837f-590f-6c4974d8e571"},
                {"index": "2", "uuid": "GPU-00000000-0000-0000-0000-000000000000"}]
    gpus = gp.gpus_from_smi(gpu_rows, apps)
    assert [[p["pid"] for p in g["compute_processes"]] for g in gpus] == [[100], [101, 102], []]
    assert gpus[0]["compute_processes"][0] == {"pid": 100, "name": "vgpu", "used_memory_bytes": None}


def test_process_on_an_unreported_uuid_is_left_out():
    apps = gp.parse_csv("MIG-1f292bf8-f63f-570f-a866-efaab3ceb50a, 7, [N/A], python\n", gp.APP_FIELDS,
                        free_text_last=True)
    assert gp.gpus_from_smi([{"index": "0", "uuid": "GPU-1"}], apps)[0]["compute_processes"] == []


def test_no_processes():
    assert gp.parse_csv("", gp.APP_FIELDS, free_text_last=True) == []
    assert gp.parse_csv("No running processes found\n", gp.APP_FIELDS, free_text_last=True) == []


def test_process_name_with_commas_kept_whole():
    (row,) = gp.parse_csv("GPU-1, 4123, 130048, python3 -m sglang.launch_server --tp 8, --port 30000\n",
                          gp.APP_FIELDS, free_text_last=True)
    assert row["process_name"] == "python3 -m sglang.launch_server --tp 8, --port 30000"
    assert row["used_memory"] == "130048"


def test_malformed_line_names_line_and_fields():
    # a real 12-column line read as if it answered the 10 GPU_FIELDS
    with pytest.raises(gp.GpuProbeError, match=r"line 1 has 12 values where 10 fields .*GeForce GTX 770"):
        gp.parse_csv(fixture("query_gpu_1gpu_not_supported.txt"), gp.GPU_FIELDS)


def test_malformed_number_names_value():
    rows = [{"index": "0", "memory.total": "lots", "memory.free": "1"}]
    with pytest.raises(gp.GpuProbeError, match=r"GPU 0 memory.total is not a MiB amount: 'lots'"):
        gp.gpus_from_smi(rows)


def test_unknown_enum_names_value():
    with pytest.raises(gp.GpuProbeError, match=r"persistence_mode is neither Enabled nor Disabled: 'Maybe'"):
        gp.gpus_from_smi([{"index": "0", "persistence_mode": "Maybe"}])


def test_real_h200_query_with_header_and_units():
    # Captured on a real H200 (driver 580.159.04) by tools/device/check_gpu_info.sh.
    (gpu,) = gp.gpus_from_smi(gp.parse_csv(fixture("query_gpu_h200_580_device.txt")))
    assert gpu["name"] == "NVIDIA H200" and gpu["uuid"] == "GPU-7dd5d990-3c91-09b2-6d49-5a61c0e1b415"
    assert gpu["memory_total_bytes"] == 143771 * MIB
    assert gpu["memory_reserved_bytes"] == 616 * MIB and gpu["memory_used_bytes"] == 0
    assert gpu["memory_free_bytes"] == 143156 * MIB
    assert gpu["persistence_mode"] is True and gpu["mig_mode"] == "disabled"


def test_values_with_units_are_read():
    (gpu,) = gp.gpus_from_smi([{"index": "0", "memory.total": "81559 MiB", "memory.free": "81079 MiB",
                                "memory.reserved": "480 MiB", "memory.used": "0 MiB"}])
    assert gpu["memory_total_bytes"] == 81559 * MIB and gpu["memory_used_bytes"] == 0


# ------------------------------------------------------------------------------------------------
# header (CUDA / driver version)
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name,driver,cuda", [
    ("table_8xh200_550.txt", "550.144.03", "12.4"),
    ("table_h100_570_cuda128.txt", "570.133.20", "12.8"),
    ("table_r610_kmd_umd.txt", "610.57.04", "13.3"),
    ("q_memory_cuda_not_found.txt", "580.105.06", None),
    ("table_h200_580_device.txt", "580.159.04", "13.0"),
    ("q_memory_h200_580_device.txt", "580.159.04", "13.0"),
])
def test_header_versions(name, driver, cuda):
    assert gp.parse_header(fixture(name)) == {"driver_version": driver, "cuda_driver_version": cuda}


@pytest.mark.parametrize("value,text", [(12080, "12.8"), (12040, "12.4"), (13000, "13.0"), (11020, "11.2")])
def test_cuda_version_from_int(value, text):
    assert gp.cuda_version_from_int(value) == text


def test_cuda_version_from_int_rejects_garbage():
    with pytest.raises(gp.GpuProbeError, match="not a positive integer: 0"):
        gp.cuda_version_from_int(0)


# ------------------------------------------------------------------------------------------------
# nvidia-smi end to end, through an injected runner
# ------------------------------------------------------------------------------------------------

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
    def __init__(self, gpu_fields_ok=gp.GPU_FIELDS, apps="", header=None, fail=None):
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


def test_nvidia_smi_eight_gpus():
    apps = "GPU-00000003-0000-0000-0000-000000000000, 4123, 124000, python3\n"
    run = Runner(apps=apps)
    result = gp.probe(run_command=run, prefer="nvidia_smi", which=lambda n: "/x/" + n)
    assert result["source"] == "nvidia-smi" and result["gpu_count"] == 8
    assert result["driver_version"] == "550.144.03" and result["cuda_driver_version"] == "12.4"
    gpu0 = result["gpus"][0]
    assert gpu0["memory_total_bytes"] == 143771 * MIB and gpu0["memory_total_gib"] == 140.401
    assert gpu0["memory_used_bytes"] == 124729 * MIB and gpu0["memory_reserved_bytes"] == 631 * MIB
    assert gpu0["persistence_mode"] is True and gpu0["mig_mode"] == "disabled"
    assert result["gpus"][3]["compute_processes"] == [
        {"pid": 4123, "name": "python3", "used_memory_bytes": 124000 * MIB}]
    assert result["min_free_gib"] == round((143771 - 631 - 124729) * MIB / 2 ** 30, 3)
    assert result["total_memory_gib_min"] == 140.401
    assert run.calls[0] == ["/x/nvidia-smi", "--query-gpu=" + ",".join(gp.GPU_FIELDS),
                            "--format=csv,noheader,nounits"]
    assert result["nvml_error"] is None


def test_nvidia_smi_old_driver_without_memory_reserved():
    run = Runner(gpu_fields_ok=gp.GPU_FIELDS_LEGACY)
    result = gp.probe(run_command=run, nvidia_smi="nvidia-smi", prefer="nvidia_smi", which=lambda n: "/x/" + n)
    assert [c[1] for c in run.calls[:2]] == ["--query-gpu=" + ",".join(gp.GPU_FIELDS),
                                             "--query-gpu=" + ",".join(gp.GPU_FIELDS_LEGACY)]
    assert result["gpus"][0]["memory_reserved_bytes"] is None
    assert result["gpus"][0]["memory_used_bytes"] == 124729 * MIB


def test_nvidia_smi_driver_not_loaded_is_reported():
    msg = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
           "Make sure that the latest NVIDIA driver is installed and running.\n")
    run = Runner(fail=(9, msg, ""))
    with pytest.raises(gp.GpuProbeError, match=r"failed \(rc=9\): NVIDIA-SMI has failed"):
        gp.probe(run_command=run, nvidia_smi="nvidia-smi", prefer="nvidia_smi", which=lambda n: "/x/" + n)


# ------------------------------------------------------------------------------------------------
# NVML through the stand-in
# ------------------------------------------------------------------------------------------------

def test_nvml_eight_gpus_used_excludes_reserved():
    procs = [{"pid": 4123, "name": "python3", "used": 124000 * MIB}, {"pid": 4124, "name": None, "used": None}]
    nvml = FakeNvml([h200(i, free_mib=18426 if i == 5 else 143139, procs=procs if i == 5 else ()) for i in range(8)])
    result = gp.probe(nvml=nvml, which=lambda n: None)
    assert result["source"] == "nvml" and result["gpu_count"] == 8 and nvml.shutdowns == 1
    assert result["driver_version"] == "570.133.20" and result["cuda_driver_version"] == "12.8"
    gpu5 = result["gpus"][5]
    assert gpu5["memory_reserved_bytes"] == 631 * MIB
    assert gpu5["memory_used_bytes"] == (143771 - 18426 - 631) * MIB  # total - free - reserved, like nvidia-smi
    assert gpu5["compute_processes"] == [{"pid": 4123, "name": "python3", "used_memory_bytes": 124000 * MIB},
                                         {"pid": 4124, "name": None, "used_memory_bytes": None}]
    assert result["gpus"][0]["compute_processes"] == []
    assert result["gpus"][0]["memory_used_bytes"] == 1 * MIB
    assert result["min_free_gib"] == round(18426 * MIB / 2 ** 30, 3) == 17.994
    assert result["gpus"][0]["mig_mode"] == "disabled" and result["gpus"][0]["persistence_mode"] is True


def test_nvml_one_gpu_mig_enabled_and_no_mig_support():
    nvml = FakeNvml([h200(0, mig=1), dict(h200(1), mig=None)])
    result = gp.probe(nvml=nvml, which=lambda n: None)
    assert [g["mig_mode"] for g in result["gpus"]] == ["enabled", None]


def test_nvml_without_memory_v2_counts_reserved_as_used():
    nvml = FakeNvml([h200(0)], memory_v2=False)
    gpu = gp.probe(nvml=nvml, which=lambda n: None)["gpus"][0]
    assert gpu["memory_reserved_bytes"] is None
    assert gpu["memory_used_bytes"] == (143771 - 143139) * MIB


def test_nvml_mig_container_no_permission_gives_unknown_memory():
    nvml = FakeNvml([dict(h200(0), memory_error=NVMLError_NoPermission()), h200(1)])
    result = gp.probe(nvml=nvml, which=lambda n: None)
    assert result["gpus"][0]["memory_free_bytes"] is None and result["gpus"][0]["memory_free_gib"] is None
    assert result["min_free_gib"] is None and result["total_memory_gib_min"] is None


def test_nvml_and_nvidia_smi_agree_on_the_same_gpus():
    nvml_result = gp.probe(nvml=FakeNvml([h200(i, free_mib=143771 - 631 - (124585 if i else 124729))
                                          for i in range(8)]), which=lambda n: None)
    smi_result = gp.probe(run_command=Runner(), nvidia_smi="nvidia-smi", prefer="nvidia_smi",
                          which=lambda n: "/x/" + n)
    for key in ("memory_total_bytes", "memory_free_bytes", "memory_used_bytes", "memory_reserved_bytes"):
        assert [g[key] for g in nvml_result["gpus"]] == [g[key] for g in smi_result["gpus"]], key
    assert nvml_result["min_free_gib"] == smi_result["min_free_gib"]


# ------------------------------------------------------------------------------------------------
# fallback and "neither available"
# ------------------------------------------------------------------------------------------------

def test_library_not_found_falls_back_to_nvidia_smi_and_says_why():
    nvml = FakeNvml([], init_error=NVMLError_LibraryNotFound())
    result = gp.probe(run_command=Runner(), nvml=nvml, which=lambda n: "/x/" + n)
    assert result["source"] == "nvidia-smi"
    assert result["nvml_error"] == "NVML library not found (libnvidia-ml.so.1)"


def test_driver_not_loaded_names_the_nvml_error():
    nvml = FakeNvml([], init_error=NVMLError_DriverNotLoaded())
    with pytest.raises(gp.GpuProbeError) as err:
        gp.probe(nvml=nvml, which=lambda n: None)
    assert str(err.value) == ("no NVIDIA GPU probe available: NVML NVMLError_DriverNotLoaded: Driver Not Loaded "
                              "and nvidia-smi not found on PATH")


def test_neither_probe_available():
    nvml = FakeNvml([], init_error=NVMLError_LibraryNotFound())
    with pytest.raises(gp.GpuProbeError) as err:
        gp.probe(nvml=nvml, which=lambda n: None)
    assert str(err.value) == ("no NVIDIA GPU probe available: NVML library not found (libnvidia-ml.so.1) "
                              "and nvidia-smi not found on PATH")


def test_neither_probe_available_with_explicit_path(tmp_path):
    nvml = FakeNvml([], init_error=NVMLError_LibraryNotFound())
    missing = str(tmp_path / "nvidia-smi")
    with pytest.raises(gp.GpuProbeError, match=r"NVML library not found \(libnvidia-ml.so.1\) and nvidia-smi "
                                               r"not found at nvidia_smi=" + missing):
        gp.probe(nvml=nvml, nvidia_smi=missing)


def test_pynvml_not_importable(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` raise ImportError
    with pytest.raises(gp.GpuProbeError, match=r"no NVIDIA GPU probe available: pynvml \(nvidia-ml-py\) is not "
                                               r"importable: .* and nvidia-smi not found on PATH"):
        gp.probe(which=lambda n: None)


def test_prefer_nvml_does_not_fall_back():
    nvml = FakeNvml([], init_error=NVMLError_LibraryNotFound())
    with pytest.raises(gp.GpuProbeError, match=r"NVML probe failed \(prefer=nvml\): NVML library not found"):
        gp.probe(run_command=Runner(), nvml=nvml, prefer="nvml", which=lambda n: "/x/" + n)


def test_real_pynvml_on_a_host_without_gpu():
    pynvml = pytest.importorskip("pynvml")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError_LibraryNotFound:
        pass
    else:  # pragma: no cover - a GPU host
        pynvml.nvmlShutdown()
        pytest.skip("NVML is present here")
    with pytest.raises(gp.ProbeUnavailable, match=r"^NVML library not found \(libnvidia-ml.so.1\)$"):
        gp.probe_nvml()


# ------------------------------------------------------------------------------------------------
# free_memory_sampler: kv_stress's loop
# ------------------------------------------------------------------------------------------------

def test_the_sampler_probes_once_then_asks_nvidia_smi_for_the_memory_only():
    run = Runner()
    sample = gp.free_memory_sampler(run_command=run, prefer="nvidia_smi", which=lambda n: "/x/" + n)
    first = sample()
    assert len(run.calls) == 3                   # probe(): --query-gpu, --query-compute-apps, the table
    second = sample()
    assert run.calls[3:] == [["/x/nvidia-smi", "--query-gpu=index,memory.total,memory.used,memory.free",
                              gp.CSV_FORMAT]]
    assert [(g["index"], g["memory_free_bytes"], g["memory_total_bytes"]) for g in second] == \
        [(g["index"], g["memory_free_bytes"], g["memory_total_bytes"]) for g in first]


def test_the_sampler_keeps_nvml_when_nvml_answered():
    nvml = FakeNvml([h200(i) for i in range(2)])
    run = Runner()
    sample = gp.free_memory_sampler(run_command=run, nvml=nvml, which=lambda n: "/x/" + n)
    assert [g["index"] for g in sample()] == [0, 1] and [g["index"] for g in sample()] == [0, 1]
    assert run.calls == []


def test_the_sampler_falls_back_as_probe_does_and_stays_there():
    run = Runner()
    sample = gp.free_memory_sampler(run_command=run, nvml=FakeNvml([], init_error=NVMLError_LibraryNotFound()),
                                    which=lambda n: "/x/" + n)
    sample()
    sample()
    assert len(run.calls) == 4 and run.calls[3][1].startswith("--query-gpu=index,memory.total")


def test_a_failed_first_sample_is_probed_again():
    run = Runner(fail=(9, "", "NVIDIA-SMI has failed"))
    sample = gp.free_memory_sampler(run_command=run, prefer="nvidia_smi", which=lambda n: "/x/" + n)
    with pytest.raises(gp.GpuProbeError):
        sample()
    run.fail = None
    assert len(sample()) == 8 and len(run.calls) == 4

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpu_probe: the fallback between NVML and nvidia-smi, both sources agreeing on the same GPUs, and the sampler of
kv_stress's loop."""
from __future__ import annotations

import sys

import pytest

from ansible_collections.llmserve.sglang.plugins.module_utils.host import gpu_fields, gpu_probe, nvidia_smi
from ansible_collections.llmserve.sglang.tests.unit.plugins.module_utils.host.gpu_standins import (
    FakeNvml,
    NVMLError_DriverNotLoaded,
    NVMLError_LibraryNotFound,
    Runner,
    h200,
)


def test_nvml_and_nvidia_smi_agree_on_the_same_gpus():
    nvml_result = gpu_probe.probe(nvml=FakeNvml([h200(i, free_mib=143771 - 631 - (124585 if i else 124729))
                                                 for i in range(8)]), which=lambda n: None)
    smi_result = gpu_probe.probe(run_command=Runner(), nvidia_smi="nvidia-smi", prefer="nvidia_smi",
                                 which=lambda n: "/x/" + n)
    for key in ("memory_total_bytes", "memory_free_bytes", "memory_used_bytes", "memory_reserved_bytes"):
        assert [g[key] for g in nvml_result["gpus"]] == [g[key] for g in smi_result["gpus"]], key
    assert nvml_result["min_free_gib"] == smi_result["min_free_gib"]


def test_library_not_found_falls_back_to_nvidia_smi_and_says_why():
    nvml = FakeNvml([], init_error=NVMLError_LibraryNotFound())
    result = gpu_probe.probe(run_command=Runner(), nvml=nvml, which=lambda n: "/x/" + n)
    assert result["source"] == "nvidia-smi"
    assert result["nvml_error"] == "NVML library not found (libnvidia-ml.so.1)"


def test_driver_not_loaded_names_the_nvml_error():
    nvml = FakeNvml([], init_error=NVMLError_DriverNotLoaded())
    with pytest.raises(gpu_fields.GpuProbeError) as err:
        gpu_probe.probe(nvml=nvml, which=lambda n: None)
    assert str(err.value) == ("no NVIDIA GPU probe available: NVML NVMLError_DriverNotLoaded: Driver Not Loaded "
                              "and nvidia-smi not found on PATH")


def test_neither_probe_available():
    nvml = FakeNvml([], init_error=NVMLError_LibraryNotFound())
    with pytest.raises(gpu_fields.GpuProbeError) as err:
        gpu_probe.probe(nvml=nvml, which=lambda n: None)
    assert str(err.value) == ("no NVIDIA GPU probe available: NVML library not found (libnvidia-ml.so.1) "
                              "and nvidia-smi not found on PATH")


def test_neither_probe_available_with_explicit_path(tmp_path):
    nvml = FakeNvml([], init_error=NVMLError_LibraryNotFound())
    missing = str(tmp_path / "nvidia-smi")
    with pytest.raises(gpu_fields.GpuProbeError, match=r"NVML library not found \(libnvidia-ml.so.1\) and nvidia-smi "
                                                       r"not found at nvidia_smi=" + missing):
        gpu_probe.probe(nvml=nvml, nvidia_smi=missing)


def test_pynvml_not_importable(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` raise ImportError
    with pytest.raises(gpu_fields.GpuProbeError, match=r"no NVIDIA GPU probe available: pynvml \(nvidia-ml-py\) is not "
                                                       r"importable: .* and nvidia-smi not found on PATH"):
        gpu_probe.probe(which=lambda n: None)


def test_prefer_nvml_does_not_fall_back():
    nvml = FakeNvml([], init_error=NVMLError_LibraryNotFound())
    with pytest.raises(gpu_fields.GpuProbeError, match=r"NVML probe failed \(prefer=nvml\): NVML library not found"):
        gpu_probe.probe(run_command=Runner(), nvml=nvml, prefer="nvml", which=lambda n: "/x/" + n)


def test_the_sampler_probes_once_then_asks_nvidia_smi_for_the_memory_only():
    run = Runner()
    sample = gpu_probe.free_memory_sampler(run_command=run, prefer="nvidia_smi", which=lambda n: "/x/" + n)
    first = sample()
    assert len(run.calls) == 3                   # probe(): --query-gpu, --query-compute-apps, the table
    second = sample()
    assert run.calls[3:] == [["/x/nvidia-smi", "--query-gpu=index,memory.total,memory.used,memory.free",
                              nvidia_smi.CSV_FORMAT]]
    assert [(g["index"], g["memory_free_bytes"], g["memory_total_bytes"]) for g in second] == \
        [(g["index"], g["memory_free_bytes"], g["memory_total_bytes"]) for g in first]


def test_the_sampler_keeps_nvml_when_nvml_answered():
    nvml = FakeNvml([h200(i) for i in range(2)])
    run = Runner()
    sample = gpu_probe.free_memory_sampler(run_command=run, nvml=nvml, which=lambda n: "/x/" + n)
    assert [g["index"] for g in sample()] == [0, 1] and [g["index"] for g in sample()] == [0, 1]
    assert run.calls == []


def test_the_sampler_falls_back_as_probe_does_and_stays_there():
    run = Runner()
    sample = gpu_probe.free_memory_sampler(run_command=run, nvml=FakeNvml([], init_error=NVMLError_LibraryNotFound()),
                                           which=lambda n: "/x/" + n)
    sample()
    sample()
    assert len(run.calls) == 4 and run.calls[3][1].startswith("--query-gpu=index,memory.total")


def test_a_failed_first_sample_is_probed_again():
    run = Runner(fail=(9, "", "NVIDIA-SMI has failed"))
    sample = gpu_probe.free_memory_sampler(run_command=run, prefer="nvidia_smi", which=lambda n: "/x/" + n)
    with pytest.raises(gpu_fields.GpuProbeError):
        sample()
    run.fail = None
    assert len(sample()) == 8 and len(run.calls) == 4

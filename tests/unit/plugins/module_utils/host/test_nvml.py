# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""nvml: NVML through a stand-in for pynvml that raises pynvml's own error shapes, and the real pynvml on a host
without a GPU."""
from __future__ import annotations

import pytest

from ansible_collections.llmserve.sglang.plugins.module_utils.host import gpu_fields, gpu_probe, nvml
from ansible_collections.llmserve.sglang.tests.unit.plugins.module_utils.host.gpu_standins import (
    FakeNvml,
    MIB,
    NVMLError_NoPermission,
    h200,
)


@pytest.mark.parametrize("value,text", [(12080, "12.8"), (12040, "12.4"), (13000, "13.0"), (11020, "11.2")])
def test_cuda_version_from_int(value, text):
    assert nvml.cuda_version_from_int(value) == text


def test_cuda_version_from_int_rejects_garbage():
    with pytest.raises(gpu_fields.GpuProbeError, match="not a positive integer: 0"):
        nvml.cuda_version_from_int(0)


def test_nvml_eight_gpus_used_excludes_reserved():
    procs = [{"pid": 4123, "name": "python3", "used": 124000 * MIB}, {"pid": 4124, "name": None, "used": None}]
    nvml = FakeNvml([h200(i, free_mib=18426 if i == 5 else 143139, procs=procs if i == 5 else ()) for i in range(8)])
    result = gpu_probe.probe(nvml=nvml, which=lambda n: None)
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
    result = gpu_probe.probe(nvml=nvml, which=lambda n: None)
    assert [g["mig_mode"] for g in result["gpus"]] == ["enabled", None]


def test_nvml_without_memory_v2_counts_reserved_as_used():
    nvml = FakeNvml([h200(0)], memory_v2=False)
    gpu = gpu_probe.probe(nvml=nvml, which=lambda n: None)["gpus"][0]
    assert gpu["memory_reserved_bytes"] is None
    assert gpu["memory_used_bytes"] == (143771 - 143139) * MIB


def test_nvml_mig_container_no_permission_gives_unknown_memory():
    nvml = FakeNvml([dict(h200(0), memory_error=NVMLError_NoPermission()), h200(1)])
    result = gpu_probe.probe(nvml=nvml, which=lambda n: None)
    assert result["gpus"][0]["memory_free_bytes"] is None and result["gpus"][0]["memory_free_gib"] is None
    assert result["min_free_gib"] is None and result["total_memory_gib_min"] is None


def test_real_pynvml_on_a_host_without_gpu():
    pynvml = pytest.importorskip("pynvml")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError_LibraryNotFound:
        pass
    else:  # pragma: no cover - a GPU host
        pynvml.nvmlShutdown()
        pytest.skip("NVML is present here")
    with pytest.raises(gpu_fields.ProbeUnavailable, match=r"^NVML library not found \(libnvidia-ml.so.1\)$"):
        nvml.probe_nvml()

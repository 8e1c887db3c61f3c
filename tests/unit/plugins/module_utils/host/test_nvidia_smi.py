# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""nvidia_smi: its CSV and header text parsed on real output (tests/fixtures/nvidia_smi, sources in SOURCES.md), and
the probe end to end through an injected runner."""
from __future__ import annotations

import pytest

from ansible_collections.llmserve.sglang.plugins.module_utils.host import gpu_fields, gpu_probe, nvidia_smi
from ansible_collections.llmserve.sglang.tests.unit.plugins.module_utils.host.gpu_standins import (
    MIB,
    Runner,
    fixture,
)


def test_one_gpu_na_value_is_none():
    fields = ("memory.total", "memory.free", "memory.used", "temperature.gpu", "fan.speed",
              "utilization.gpu", "utilization.memory")
    rows = nvidia_smi.parse_csv(fixture("query_gpu_1gpu_na_nounits.txt"), fields)
    assert rows == [{"memory.total": "2004", "memory.free": "2004", "memory.used": "0", "temperature.gpu": "44",
                     "fan.speed": None, "utilization.gpu": "0", "utilization.memory": "0"}]


def test_not_supported_values_are_none():
    fields = ("gpu_name", "utilization.gpu", "utilization.memory", "temperature.gpu", "power.draw", "power.limit",
              "fan.speed", "pstate", "clocks.current.graphics", "clocks.current.memory", "power.max_limit",
              "power.default_limit")
    (row,) = nvidia_smi.parse_csv(fixture("query_gpu_1gpu_not_supported.txt"), fields)
    assert row["gpu_name"] == "GeForce GTX 770"
    assert row["fan.speed"] == "52 %"
    assert [k for k, v in row.items() if v is None] == [
        "utilization.gpu", "utilization.memory", "power.draw", "power.limit", "clocks.current.graphics",
        "clocks.current.memory", "power.max_limit", "power.default_limit"]


def test_header_units_dropped_and_insufficient_permissions_is_none():
    (row,) = nvidia_smi.parse_csv(fixture("query_gpu_a100_mig_insufficient_permissions.txt"))
    assert list(row) == ["name", "driver_version", "temperature.gpu", "utilization.gpu", "utilization.memory",
                         "memory.total", "memory.free", "memory.used"]
    assert row["name"] == "NVIDIA A100-SXM4-80GB" and row["driver_version"] == "535.161.08"
    assert row["memory.total"] is None and row["memory.free"] is None and row["memory.used"] is None


def test_mig_container_memory_total_unavailable():
    assert nvidia_smi.parse_csv(fixture("query_gpu_memory_total_mig_container.txt"), ["memory.total"]) == [
        {"memory.total": None}]


def test_mig_enabled_on_one_of_four_gpus():
    rows = nvidia_smi.parse_csv(fixture("query_gpu_4gpu_mig_enabled.txt"))
    for i, row in enumerate(rows):
        row["index"] = str(i)
    gpus = nvidia_smi.gpus_from_smi(rows)
    assert [g["mig_mode"] for g in gpus] == ["enabled", "disabled", "disabled", "disabled"]
    assert gpus[0]["uuid"] == "GPU-ec845691-fb46-e16d-abfb-b135308cb39f"
    assert gpus[0]["memory_total_bytes"] is None  # not asked for: unknown, not zero


def test_mig_mode_not_applicable():
    (row,) = nvidia_smi.parse_csv(fixture("query_gpu_mig_mode_na.txt"))
    row["index"] = "0"
    assert nvidia_smi.gpus_from_smi([row])[0]["mig_mode"] is None


def test_processes_present_are_attached_to_their_gpus():
    apps = nvidia_smi.parse_csv(fixture("query_compute_apps_3procs.txt"))
    assert [a["process_name"] for a in apps] == ["vgpu", "vgpu", "vgpu"]
    for pid, app in enumerate(apps, start=100):
        app["pid"] = str(pid)
    gpu_rows = [{"index": "0", "uuid": "GPU-d0180485-9584-433c-6782-c335d5df2cb3"},
                {"index": "1", "uuid": "GPU-777ead31-954e-837f-590f-6c4974d8e571"},
                {"index": "2", "uuid": "GPU-00000000-0000-0000-0000-000000000000"}]
    gpus = nvidia_smi.gpus_from_smi(gpu_rows, apps)
    assert [[p["pid"] for p in g["compute_processes"]] for g in gpus] == [[100], [101, 102], []]
    assert gpus[0]["compute_processes"][0] == {"pid": 100, "name": "vgpu", "used_memory_bytes": None}


def test_process_on_an_unreported_uuid_is_left_out():
    apps = nvidia_smi.parse_csv("MIG-1f292bf8-f63f-570f-a866-efaab3ceb50a, 7, [N/A], python\n", nvidia_smi.APP_FIELDS,
                                free_text_last=True)
    assert nvidia_smi.gpus_from_smi([{"index": "0", "uuid": "GPU-1"}], apps)[0]["compute_processes"] == []


def test_no_processes():
    assert nvidia_smi.parse_csv("", nvidia_smi.APP_FIELDS, free_text_last=True) == []
    assert nvidia_smi.parse_csv("No running processes found\n", nvidia_smi.APP_FIELDS, free_text_last=True) == []


def test_process_name_with_commas_kept_whole():
    (row,) = nvidia_smi.parse_csv("GPU-1, 4123, 130048, python3 -m sglang.launch_server --tp 8, --port 30000\n",
                                  nvidia_smi.APP_FIELDS, free_text_last=True)
    assert row["process_name"] == "python3 -m sglang.launch_server --tp 8, --port 30000"
    assert row["used_memory"] == "130048"


def test_malformed_line_names_line_and_fields():
    # a real 12-column line read as if it answered the 10 GPU_FIELDS
    with pytest.raises(gpu_fields.GpuProbeError, match=r"line 1 has 12 values where 10 fields .*GeForce GTX 770"):
        nvidia_smi.parse_csv(fixture("query_gpu_1gpu_not_supported.txt"), nvidia_smi.GPU_FIELDS)


def test_malformed_number_names_value():
    rows = [{"index": "0", "memory.total": "lots", "memory.free": "1"}]
    with pytest.raises(gpu_fields.GpuProbeError, match=r"GPU 0 memory.total is not a MiB amount: 'lots'"):
        nvidia_smi.gpus_from_smi(rows)


def test_unknown_enum_names_value():
    with pytest.raises(gpu_fields.GpuProbeError, match=r"persistence_mode is neither Enabled nor Disabled: 'Maybe'"):
        nvidia_smi.gpus_from_smi([{"index": "0", "persistence_mode": "Maybe"}])


def test_real_h200_query_with_header_and_units():
    # Captured on a real H200 (driver 580.159.04) by tools/device/check_gpu_info.sh.
    (gpu,) = nvidia_smi.gpus_from_smi(nvidia_smi.parse_csv(fixture("query_gpu_h200_580_device.txt")))
    assert gpu["name"] == "NVIDIA H200" and gpu["uuid"] == "GPU-7dd5d990-3c91-09b2-6d49-5a61c0e1b415"
    assert gpu["memory_total_bytes"] == 143771 * MIB
    assert gpu["memory_reserved_bytes"] == 616 * MIB and gpu["memory_used_bytes"] == 0
    assert gpu["memory_free_bytes"] == 143156 * MIB
    assert gpu["persistence_mode"] is True and gpu["mig_mode"] == "disabled"


def test_values_with_units_are_read():
    (gpu,) = nvidia_smi.gpus_from_smi([{"index": "0", "memory.total": "81559 MiB", "memory.free": "81079 MiB",
                                        "memory.reserved": "480 MiB", "memory.used": "0 MiB"}])
    assert gpu["memory_total_bytes"] == 81559 * MIB and gpu["memory_used_bytes"] == 0


@pytest.mark.parametrize("name,driver,cuda", [
    ("table_8xh200_550.txt", "550.144.03", "12.4"),
    ("table_h100_570_cuda128.txt", "570.133.20", "12.8"),
    ("table_r610_kmd_umd.txt", "610.57.04", "13.3"),
    ("q_memory_cuda_not_found.txt", "580.105.06", None),
    ("table_h200_580_device.txt", "580.159.04", "13.0"),
    ("q_memory_h200_580_device.txt", "580.159.04", "13.0"),
])
def test_header_versions(name, driver, cuda):
    assert nvidia_smi.parse_header(fixture(name)) == {"driver_version": driver, "cuda_driver_version": cuda}


def test_nvidia_smi_eight_gpus():
    apps = "GPU-00000003-0000-0000-0000-000000000000, 4123, 124000, python3\n"
    run = Runner(apps=apps)
    result = gpu_probe.probe(run_command=run, prefer="nvidia_smi", which=lambda n: "/x/" + n)
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
    assert run.calls[0] == ["/x/nvidia-smi", "--query-gpu=" + ",".join(nvidia_smi.GPU_FIELDS),
                            "--format=csv,noheader,nounits"]
    assert result["nvml_error"] is None


def test_nvidia_smi_old_driver_without_memory_reserved():
    run = Runner(gpu_fields_ok=nvidia_smi.GPU_FIELDS_LEGACY)
    result = gpu_probe.probe(run_command=run, nvidia_smi="nvidia-smi", prefer="nvidia_smi", which=lambda n: "/x/" + n)
    assert [c[1] for c in run.calls[:2]] == ["--query-gpu=" + ",".join(nvidia_smi.GPU_FIELDS),
                                             "--query-gpu=" + ",".join(nvidia_smi.GPU_FIELDS_LEGACY)]
    assert result["gpus"][0]["memory_reserved_bytes"] is None
    assert result["gpus"][0]["memory_used_bytes"] == 124729 * MIB


def test_nvidia_smi_driver_not_loaded_is_reported():
    msg = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
           "Make sure that the latest NVIDIA driver is installed and running.\n")
    run = Runner(fail=(9, msg, ""))
    with pytest.raises(gpu_fields.GpuProbeError, match=r"failed \(rc=9\): NVIDIA-SMI has failed"):
        gpu_probe.probe(run_command=run, nvidia_smi="nvidia-smi", prefer="nvidia_smi", which=lambda n: "/x/" + n)

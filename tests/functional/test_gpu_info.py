# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""llmserve.sglang.gpu_info through ansible-runner on localhost: no probe at all, a fake nvidia-smi, check mode."""
from __future__ import annotations

import os
import shutil
import stat
import sys
from pathlib import Path

import pytest

MIB = 2 ** 20
SAFE_PATH = os.pathsep.join([os.path.dirname(sys.executable), "/usr/local/bin", "/usr/bin", "/bin"])

# A stand-in for nvidia-smi on an 8x H200 host: answers --query-gpu for any list of the fields it knows,
# --query-compute-apps, and no arguments (the table header), in nvidia-smi's own formats; anything else
# fails the way nvidia-smi does. Values: H200 total, driver and header from real output
# (tests/fixtures/nvidia_smi/table_8xh200_550.txt); GPU 6 holds an SGLang rank.
FAKE_NVIDIA_SMI = r"""#!/usr/bin/env bash
set -u
echo "$*" >> "$(dirname "$0")/calls.log"
value() {  # value GPU FIELD
  local i=$1 used=0 free=143140
  if [ "$i" = 6 ]; then used=124729; free=18411; fi
  case "$2" in
    index) echo "$i" ;;
    uuid|gpu_uuid) printf 'GPU-5e10b7bc-91f1-640a-e927-963f7f82de4%d' "$i" ;;
    name|gpu_name) echo "NVIDIA H200" ;;
    memory.total) echo 143771 ;;
    memory.reserved) echo 631 ;;
    memory.used) echo "$used" ;;
    memory.free) echo "$free" ;;
    persistence_mode) echo Enabled ;;
    mig.mode.current) echo Disabled ;;
    driver_version) echo 550.144.03 ;;
    *) return 1 ;;
  esac
}
if [ $# -eq 0 ]; then
  cat <<'EOF'
Thu Jan 30 05:00:03 2025
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 550.144.03             Driver Version: 550.144.03     CUDA Version: 12.4     |
|-----------------------------------------+------------------------+----------------------+
EOF
  exit 0
fi
if [ $# -ne 2 ] || [ "$2" != "--format=csv,noheader,nounits" ]; then
  echo "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help."; exit 2
fi
case "$1" in
  --query-gpu=*)
    IFS=, read -r -a fields <<< "${1#--query-gpu=}"
    for i in 0 1 2 3 4 5 6 7; do
      line=""
      for f in "${fields[@]}"; do
        v=$(value "$i" "$f") || { printf 'Field "%s" is not a valid field to query.\n\n' "$f"; exit 2; }
        line="${line:+$line, }$v"
      done
      echo "$line"
    done ;;
  --query-compute-apps=gpu_uuid,pid,used_memory,process_name)
    echo "GPU-5e10b7bc-91f1-640a-e927-963f7f82de46, 48213, 124160, /usr/bin/python3" ;;
  *) echo "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help."; exit 2 ;;
esac
"""


def _nvml_present() -> bool:
    try:
        import pynvml
    except ImportError:
        return False
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


@pytest.fixture
def fake_nvidia_smi(tmp_path: Path) -> Path:
    path = tmp_path / "bin" / "nvidia-smi"
    path.parent.mkdir()
    path.write_text(FAKE_NVIDIA_SMI)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def test_no_nvml_and_no_nvidia_smi_fails_clearly(ansible):
    if _nvml_present() or shutil.which("nvidia-smi", path=SAFE_PATH + os.pathsep + "/usr/sbin:/sbin"):
        pytest.skip("this host has NVML or nvidia-smi")
    result = ansible.module("gpu_info", {}, envvars={"PATH": SAFE_PATH})
    assert result["failed"]
    assert result["msg"] == ("no NVIDIA GPU probe available: NVML library not found (libnvidia-ml.so.1) "
                             "and nvidia-smi not found on PATH")


def test_explicit_missing_nvidia_smi_is_named(ansible, tmp_path):
    if _nvml_present():
        pytest.skip("this host has NVML")
    missing = tmp_path / "nowhere" / "nvidia-smi"
    result = ansible.module("gpu_info", {"nvidia_smi": str(missing)}, envvars={"PATH": SAFE_PATH})
    assert result["failed"]
    assert result["msg"].endswith("and nvidia-smi not found at nvidia_smi=%s" % missing)


def _check_eight_h200(result: dict) -> None:
    assert not result["failed"], result.get("msg")
    assert result["changed"] is False
    assert result["source"] == "nvidia-smi" and result["gpu_count"] == 8
    assert result["driver_version"] == "550.144.03" and result["cuda_driver_version"] == "12.4"
    gpus = result["gpus"]
    assert [g["index"] for g in gpus] == list(range(8))
    assert gpus[0]["name"] == "NVIDIA H200" and gpus[0]["uuid"] == "GPU-5e10b7bc-91f1-640a-e927-963f7f82de40"
    assert gpus[0]["memory_total_bytes"] == 143771 * MIB and gpus[0]["memory_total_gib"] == 140.401
    assert gpus[6]["memory_free_bytes"] == 18411 * MIB and gpus[6]["memory_free_gib"] == 17.979
    assert gpus[6]["memory_used_bytes"] == 124729 * MIB and gpus[6]["memory_reserved_bytes"] == 631 * MIB
    assert gpus[6]["compute_processes"] == [{"pid": 48213, "name": "/usr/bin/python3",
                                             "used_memory_bytes": 124160 * MIB}]
    assert all(g["compute_processes"] == [] for g in gpus if g["index"] != 6)
    assert all(g["persistence_mode"] is True and g["mig_mode"] == "disabled" for g in gpus)
    assert result["min_free_gib"] == 17.979 and result["total_memory_gib_min"] == 140.401


def test_fake_nvidia_smi_numbers(ansible, fake_nvidia_smi):
    result = ansible.module("gpu_info", {"nvidia_smi": str(fake_nvidia_smi)}, envvars={"PATH": SAFE_PATH})
    _check_eight_h200(result)
    if not _nvml_present():
        assert result["nvml_error"] == "NVML library not found (libnvidia-ml.so.1)"
    calls = (fake_nvidia_smi.parent / "calls.log").read_text().splitlines()
    assert calls[0] == ("--query-gpu=index,uuid,name,memory.total,memory.reserved,memory.used,memory.free,"
                        "persistence_mode,mig.mode.current,driver_version --format=csv,noheader,nounits")


def test_fake_nvidia_smi_found_on_path_check_mode(ansible, fake_nvidia_smi):
    path = str(fake_nvidia_smi.parent) + os.pathsep + SAFE_PATH
    result = ansible.module("gpu_info", {"prefer": "nvidia_smi"}, check=True, envvars={"PATH": path})
    _check_eight_h200(result)
    assert result["nvml_error"] is None


def test_nvidia_smi_failure_is_reported(ansible, tmp_path):
    broken = tmp_path / "nvidia-smi"
    broken.write_text("#!/bin/sh\necho \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA "
                      "driver. Make sure that the latest NVIDIA driver is installed and running.\"\nexit 9\n")
    broken.chmod(0o755)
    result = ansible.module("gpu_info", {"nvidia_smi": str(broken), "prefer": "nvidia_smi"},
                            envvars={"PATH": SAFE_PATH})
    assert result["failed"]
    assert "failed (rc=9): NVIDIA-SMI has failed because it couldn't communicate" in result["msg"]

#!/usr/bin/python
# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_info
short_description: Read the NVIDIA GPUs of a host (memory, MIG, persistence, processes) through NVML or nvidia-smi
version_added: 1.0.0
author:
  - llmserve.sglang contributors (@llmserve)
description:
  - Reports every NVIDIA GPU of the host with its total, free, used and reserved memory, persistence mode,
    MIG mode and compute processes, plus the driver and CUDA driver versions and the per-host minimums
    (RV(min_free_gib)) that the C(kv_tune) role sizes C(--mem-fraction-static) from.
  - Reads NVML through the C(pynvml) module (PyPI package C(nvidia-ml-py)) when it is importable and NVML's
    library loads; otherwise runs C(nvidia-smi --query-gpu) and C(nvidia-smi --query-compute-apps) and reads
    the CUDA driver version from the plain C(nvidia-smi) header. RV(source) says which was used.
  - Memory is reported in bytes and in GiB (bytes / 2**30, rounded to 3 decimals). nvidia-smi reports MiB
    (2**20 bytes), so values from nvidia-smi are multiples of 1 MiB.
  - C(memory_used_bytes) is memory allocated by contexts, without the memory the driver and firmware
    reserve, which is what nvidia-smi prints as "used" on current drivers. From NVML it is computed as
    total - free - reserved (C(nvmlDeviceGetMemoryInfo_v2)), so both sources agree. When the driver does
    not report reserved memory (old drivers), C(memory_reserved_bytes) is V(null) and C(memory_used_bytes)
    is total - free.
  - The module only reads, and always reports RV(ignore:changed=false).
requirements:
  - An NVIDIA driver on the managed host, and either the C(pynvml) Python module (C(nvidia-ml-py)) for the
    Python that runs the module, or the C(nvidia-smi) command.
extends_documentation_fragment:
  - llmserve.sglang.attributes
  - llmserve.sglang.attributes.read_only
options:
  nvidia_smi:
    description:
      - The nvidia-smi to run when NVML is not used, as an absolute path or as a command name looked up on
        E(PATH).
      - When not set, C(nvidia-smi) is looked up on E(PATH) and in the usual system directories.
    type: path
  prefer:
    description:
      - Which probe to use.
      - V(auto) reads NVML, and runs nvidia-smi when NVML is unavailable or fails (the reason is returned in
        RV(nvml_error)).
      - V(nvml) reads NVML only and fails when it cannot.
      - V(nvidia_smi) runs nvidia-smi only, for example to compare it with NVML.
    type: str
    choices: [auto, nvml, nvidia_smi]
    default: auto
  watch:
    description:
      - Seconds during which the GPUs are read again and again (every O(watch_interval); through nvidia-smi, the
        memory fields only after the first reading); RV(watched) then holds the least free memory each GPU had. The
        other results are the last reading, a whole probe.
      - For a load another host drives, such as a node of a multi-node SGLang server while node 0 serves the
        requests.
      - V(0) reads once.
    type: float
    default: 0
  watch_interval:
    description: Seconds between two readings while O(watch) lasts.
    type: float
    default: 0.1
  gpus:
    description: With O(watch), the indices of the GPUs RV(watched) covers; not set, every GPU.
    type: list
    elements: int
  watch_units:
    description:
      - With O(watch) and O(gpus), the systemd units whose processes are the servers on those GPUs; meanwhile the
        GPUs' compute processes are also read every second, and what processes outside those units hold there is
        returned in RV(watched) as C(other_memory_seen), as the kv_stress module returns it.
      - For a node of a multi-node server during the load node 0 drives, whose headroom another process would move.
    type: list
    elements: str
    default: []
notes:
  - On a GPU in MIG mode seen from an unprivileged container, NVML and nvidia-smi refuse the whole-GPU memory
    (C([Insufficient Permissions])); that GPU's memory values are then V(null), and so are RV(min_free_gib)
    and RV(total_memory_gib_min).
seealso:
  - name: nvidia-smi documentation
    description: The query fields (C(nvidia-smi --help-query-gpu)) and their meaning.
    link: https://docs.nvidia.com/deploy/nvidia-smi/index.html
  - name: NVML nvmlMemory_v2_t
    description: NVML's total, reserved, free and used memory.
    link: https://docs.nvidia.com/deploy/nvml-api/structnvmlMemory__v2__t.html
"""

EXAMPLES = r"""
- name: Read the GPUs
  llmserve.sglang.gpu_info:
  register: gpu

- name: Every host must have 8 GPUs with at least 130 GiB free each
  ansible.builtin.assert:
    that:
      - gpu.gpu_count == 8
      - gpu.min_free_gib is not none and gpu.min_free_gib >= 130
    fail_msg: "{{ gpu.gpu_count }} GPUs, least free {{ gpu.min_free_gib }} GiB (source {{ gpu.source }})"

- name: Read them through a given nvidia-smi only
  llmserve.sglang.gpu_info:
    prefer: nvidia_smi
    nvidia_smi: /usr/bin/nvidia-smi
  register: gpu_smi

- name: List the processes holding GPU memory
  ansible.builtin.debug:
    msg: "GPU {{ item.0.index }}: pid {{ item.1.pid }} ({{ item.1.name }}) {{ item.1.used_memory_bytes }} bytes"
  loop: "{{ gpu.gpus | subelements('compute_processes') }}"
"""

RETURN = r"""
watched:
  description:
    - With O(watch), the least free memory over the readings, per GPU of O(gpus) (GPU index as text -> GiB) and over
      them, and how many readings were taken.
    - With O(watch_units) also C(other_memory_seen), what processes outside those units held on O(gpus) meanwhile
      (RV(llmserve.sglang.kv_stress#module:other_memory_seen)); V(null) when no sample was taken.
  returned: when O(watch) is above 0
  type: dict
  sample: {"seconds": 120.0, "samples": 1187, "min_free_gib_per_gpu": {"4": 2.31, "5": 2.35}, "min_free_gib": 2.31}
gpus:
  description: One entry per GPU, ordered by index.
  returned: success
  type: list
  elements: dict
  contains:
    index:
      description: The GPU's index (as nvidia-smi numbers it).
      type: int
      sample: 0
    uuid:
      description: The GPU's UUID.
      type: str
      sample: GPU-ec845691-fb46-e16d-abfb-b135308cb39f
    name:
      description: The product name.
      type: str
      sample: NVIDIA H200
    memory_total_bytes:
      description: Total framebuffer memory, in bytes; V(null) where it cannot be read.
      type: int
      sample: 150754820096
    memory_free_bytes:
      description: Unallocated memory, in bytes; V(null) where it cannot be read.
      type: int
      sample: 150159097856
    memory_used_bytes:
      description:
        - Memory allocated by contexts, in bytes, without the driver's and firmware's reserved memory
          (nvidia-smi's C(memory.used)); total - free where the reserved amount is unknown.
      type: int
      sample: 0
    memory_reserved_bytes:
      description: Memory reserved by the driver and firmware, in bytes; V(null) where the driver does not report it.
      type: int
      sample: 595722240
    memory_total_gib:
      description: C(memory_total_bytes) / 2**30, rounded to 3 decimals.
      type: float
      sample: 140.401
    memory_free_gib:
      description: C(memory_free_bytes) / 2**30, rounded to 3 decimals.
      type: float
      sample: 139.846
    memory_used_gib:
      description: C(memory_used_bytes) / 2**30, rounded to 3 decimals.
      type: float
      sample: 0.0
    memory_reserved_gib:
      description: C(memory_reserved_bytes) / 2**30, rounded to 3 decimals.
      type: float
      sample: 0.555
    persistence_mode:
      description: Whether persistence mode is on; V(null) where not reported.
      type: bool
      sample: true
    mig_mode:
      description: The current MIG mode; V(null) on GPUs without MIG.
      type: str
      choices: [enabled, disabled]
      sample: disabled
    compute_processes:
      description: The compute processes on this GPU.
      type: list
      elements: dict
      contains:
        pid:
          description: Process ID (in the host's PID namespace as the driver sees it).
          type: int
          sample: 4123
        name:
          description: Process name or path when known, else V(null).
          type: str
          sample: python3
        used_memory_bytes:
          description: GPU memory used by the process, in bytes; V(null) where not reported (for example in MIG mode).
          type: int
          sample: 130023424000
gpu_count:
  description: Number of GPUs found.
  returned: success
  type: int
  sample: 8
driver_version:
  description: The NVIDIA driver version.
  returned: success
  type: str
  sample: 570.133.20
cuda_driver_version:
  description:
    - The highest CUDA version the driver supports, as C(major.minor) (NVML's 12080 is V(12.8)); V(null) when
      it cannot be read.
  returned: success
  type: str
  sample: "12.8"
source:
  description: Where the numbers came from.
  returned: success
  type: str
  choices: [nvml, nvidia-smi]
  sample: nvml
min_free_gib:
  description:
    - The least free memory of any GPU, in GiB; V(null) when there is no GPU or a GPU's free memory is unknown.
  returned: success
  type: float
  sample: 139.846
total_memory_gib_min:
  description:
    - The smallest total memory of any GPU, in GiB; V(null) when there is no GPU or a GPU's total is unknown.
  returned: success
  type: float
  sample: 140.401
nvml_error:
  description: Why NVML was not used when RV(source) is V(nvidia-smi) after trying NVML; V(null) otherwise.
  returned: success
  type: str
  sample: NVML library not found (libnvidia-ml.so.1)
"""

import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmserve.sglang.plugins.module_utils.host.gpu_fields import GpuProbeError
from ansible_collections.llmserve.sglang.plugins.module_utils.host.gpu_probe import (
    PREFER_CHOICES,
    free_memory_sampler,
    probe,
)
from ansible_collections.llmserve.sglang.plugins.module_utils.host.gpu_watch import start_watch
from ansible_collections.llmserve.sglang.plugins.module_utils.host.host_commands import C_LOCALE
from ansible_collections.llmserve.sglang.plugins.module_utils.host.kv_stress import min_free_per_gpu


def build_module() -> AnsibleModule:
    return AnsibleModule(
        argument_spec=dict(
            nvidia_smi=dict(type="path"),
            prefer=dict(type="str", choices=list(PREFER_CHOICES), default="auto"),
            watch=dict(type="float", default=0),
            watch_interval=dict(type="float", default=0.1),
            gpus=dict(type="list", elements="int"),
            watch_units=dict(type="list", elements="str", default=[]),
        ),
        supports_check_mode=True,
    )


def main() -> None:
    module = build_module()

    def run_command(argv):
        return module.run_command(argv, environ_update=C_LOCALE)

    def which(name):
        return module.get_bin_path(name)

    params = module.params
    if params["watch"] < 0 or params["watch_interval"] <= 0:
        module.fail_json(msg="watch must be 0 or more and watch_interval above 0, got %r and %r"
                             % (params["watch"], params["watch_interval"]))

    def watched(gpus):
        return [gpu for gpu in gpus if params["gpus"] is None or gpu["index"] in params["gpus"]]

    probe_args = dict(run_command=run_command, nvidia_smi=params["nvidia_smi"], prefer=params["prefer"], which=which)
    readings = []
    # What another process takes or gives back on the GPUs meanwhile (gpu_watch, once a second).
    watch = start_watch(module, params["gpus"], params["watch_units"]) \
        if params["watch"] > 0 and params["gpus"] and params["watch_units"] else None
    deadline = time.monotonic() + params["watch"]
    try:
        # While the watch lasts, the memory only (kv_stress's sampler); the last reading is the whole probe.
        read_memory = free_memory_sampler(**probe_args)
        while time.monotonic() < deadline:
            readings.append(watched(read_memory()))
            time.sleep(min(params["watch_interval"], max(0.0, deadline - time.monotonic())))
        result = probe(**probe_args)
        readings.append(watched(result["gpus"]))
    except GpuProbeError as exc:
        module.fail_json(msg=str(exc))
    if params["watch"] > 0:
        least = {str(index): round(free / 2.0 ** 30, 3) for index, free in sorted(min_free_per_gpu(readings).items())}
        result["watched"] = {"seconds": params["watch"], "samples": len(readings), "min_free_gib_per_gpu": least,
                             "min_free_gib": min(least.values()) if least else None}
        if watch is not None:
            result["watched"]["other_memory_seen"] = watch.result()["other_memory_seen"]
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the two GPU sources (nvml.py, nvidia_smi.py) give alike: the GPU dict's fields and what they mean, and a
probe's errors. gpu_probe.py chooses the source.

A GPU dict: index, uuid, name, memory_{total,free,used,reserved}_bytes (None where the source gave none),
persistence_mode (bool or None), mig_mode ("enabled", "disabled" or None: :func:`mig_mode`), compute_processes (a
list of {pid, name, used_memory_bytes}).

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

Stdlib only, no I/O.
"""
from __future__ import annotations


class GpuProbeError(ValueError):
    """A GPU probe failed, or its output could not be read; the message names the cause and the value."""


class ProbeUnavailable(GpuProbeError):
    """This probe cannot run on this host at all (no NVML library, no nvidia-smi): try the other one."""


class InvalidQueryField(GpuProbeError):
    """nvidia-smi rejected a --query-gpu field (older driver); ``field`` names it."""

    def __init__(self, message: str, field: str):
        super().__init__(message)
        self.field = field


def mig_mode(flag: bool | None) -> str | None:
    """A GPU dict's ``mig_mode`` of the source's flag: "enabled", "disabled", or None where it gave none."""
    if flag is None:
        return None
    return "enabled" if flag else "disabled"

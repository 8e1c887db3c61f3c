# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpu_fields: what both GPU sources share, the words of mig_mode and the errors of a probe."""
from __future__ import annotations

from ansible_collections.llmserve.sglang.plugins.module_utils.host import gpu_fields


def test_mig_mode_is_said_in_words_and_unknown_stays_unknown():
    assert [gpu_fields.mig_mode(flag) for flag in (True, False, None)] == ["enabled", "disabled", None]


def test_a_field_nvidia_smi_refuses_is_named_and_is_a_probe_error():
    error = gpu_fields.InvalidQueryField('nvidia-smi: Field "memory.reserved" is not a valid field to query',
                                         "memory.reserved")
    assert error.field == "memory.reserved" and isinstance(error, gpu_fields.GpuProbeError)
    assert issubclass(gpu_fields.ProbeUnavailable, gpu_fields.GpuProbeError)

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations


class ModuleDocFragment:
    # The GPU probe options of the modules that read GPU memory as llmserve.sglang.gpu_info does.
    DOCUMENTATION = r"""
options:
  nvidia_smi:
    description: The nvidia-smi to run when NVML is not used, as a path or a command name on E(PATH).
    type: path
  prefer:
    description: Which GPU probe to use, as in M(llmserve.sglang.gpu_info).
    type: str
    choices: [auto, nvml, nvidia_smi]
    default: auto
"""

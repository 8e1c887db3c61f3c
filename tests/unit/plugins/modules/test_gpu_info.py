# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""gpu_info: the cases of test_gpu_info.yaml (see uthelper.py).

`mocks.nvml` says what `import pynvml` finds: missing (not importable), library_not_found or driver_not_loaded (a
stand-in whose nvmlInit raises pynvml's error of that name). Without it, a case must not touch NVML.
"""
from __future__ import annotations

import sys
import types

import pytest

from ansible_collections.llmserve.sglang.plugins.modules import gpu_info
from ansible_collections.llmserve.sglang.tests.unit.plugins.modules import uthelper


class NVMLError(Exception):
    """pynvml.NVMLError's shape: the NVML return code in .value, its text from str()."""

    value = None
    text = "Unknown Error"

    def __str__(self):
        return self.text


class NVMLError_LibraryNotFound(NVMLError):  # pylint: disable=invalid-name
    value, text = 12, "NVML Shared Library Not Found"


class NVMLError_DriverNotLoaded(NVMLError):  # pylint: disable=invalid-name
    value, text = 9, "Driver Not Loaded"


def _stand_in(error):
    nvml = types.ModuleType("pynvml")
    nvml.NVMLError = NVMLError
    nvml.NVMLError_LibraryNotFound = NVMLError_LibraryNotFound
    nvml.NVMLError_DriverNotLoaded = NVMLError_DriverNotLoaded

    def nvml_init():
        if error is None:
            raise AssertionError("NVML was used by a case without mocks.nvml")
        raise error()

    nvml.nvmlInit = nvml_init
    nvml.nvmlShutdown = lambda: None
    return nvml


NVML = {"missing": None, "library_not_found": _stand_in(NVMLError_LibraryNotFound),
        "driver_not_loaded": _stand_in(NVMLError_DriverNotLoaded), None: _stand_in(None)}


@pytest.mark.parametrize("case", uthelper.cases(__file__))
def test_gpu_info(case, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", NVML[(case.get("mocks") or {}).get("nvml")])
    uthelper.run_case(gpu_info, case)

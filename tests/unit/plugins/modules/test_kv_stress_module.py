# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""kv_stress: the cases of test_kv_stress_module.yaml (see uthelper.py).

The module's HTTP goes through module_utils/host/kv_stress.py's urllib opener (_OPENER), from the module's thread, the
request threads and the GPU sampler thread: the fake HTTP replaces the opener there. NVML is made unimportable, so
that a case never reads the GPUs of the machine that runs the tests.

Named *_module: plain pytest imports test files by their basename, and module_utils/host/test_kv_stress.py has the plain one.
"""
from __future__ import annotations

import sys

import pytest

from ansible_collections.llmserve.sglang.plugins.module_utils.host import kv_stress as kv_stress_utils
from ansible_collections.llmserve.sglang.plugins.modules import kv_stress
from ansible_collections.llmserve.sglang.tests.unit.plugins.modules import uthelper


@pytest.mark.parametrize("case", uthelper.cases(__file__))
def test_kv_stress(case, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    uthelper.run_case(kv_stress, case, http_targets=[(kv_stress_utils, "_OPENER")])

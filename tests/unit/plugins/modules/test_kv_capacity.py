# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""kv_capacity: the cases of test_kv_capacity.yaml (see uthelper.py); the module runs no command."""
from __future__ import annotations

import pytest

from ansible_collections.llmserve.sglang.plugins.modules import kv_capacity
from ansible_collections.llmserve.sglang.tests.unit.plugins.modules import uthelper


@pytest.mark.parametrize("case", uthelper.cases(__file__))
def test_kv_capacity(case):
    uthelper.run_case(kv_capacity, case)

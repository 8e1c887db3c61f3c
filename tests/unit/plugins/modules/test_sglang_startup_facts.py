# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang_startup_facts: the cases of test_sglang_startup_facts.yaml (see uthelper.py)."""
from __future__ import annotations

import pytest

from ansible_collections.llmserve.sglang.plugins.modules import sglang_startup_facts
from ansible_collections.llmserve.sglang.tests.unit.plugins.modules import uthelper


@pytest.mark.parametrize("case", uthelper.cases(__file__))
def test_sglang_startup_facts(case):
    uthelper.run_case(sglang_startup_facts, case)

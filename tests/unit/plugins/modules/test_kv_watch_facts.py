# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""kv_watch_facts: the cases of test_kv_watch_facts.yaml (see uthelper.py)."""
from __future__ import annotations

import pytest

from ansible_collections.llmserve.sglang.plugins.modules import kv_watch_facts
from ansible_collections.llmserve.sglang.tests.unit.plugins.modules import uthelper


@pytest.mark.parametrize("case", uthelper.cases(__file__))
def test_kv_watch_facts(case):
    uthelper.run_case(kv_watch_facts, case)

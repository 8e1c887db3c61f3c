# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang_ready: the cases of test_sglang_ready.yaml (see uthelper.py); open_url is the module's own."""
from __future__ import annotations

import pytest

from ansible_collections.llmserve.sglang.plugins.modules import sglang_ready
from ansible_collections.llmserve.sglang.tests.unit.plugins.modules import uthelper


@pytest.mark.parametrize("case", uthelper.cases(__file__))
def test_sglang_ready(case):
    uthelper.run_case(sglang_ready, case)

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""module_utils imports nothing of ansible-core: its tests give one verdict on every core, so `make test` runs them on
the newest core and the hosts' oldest Python only (the Makefile's CORE_UNIT_TESTS). A module_utils file that needs
ansible-core's API makes this fail: its tests must then run on every core of CORE_LANES too."""
from __future__ import annotations

import ast
from pathlib import Path

MODULE_UTILS = Path(__file__).resolve().parents[3] / "plugins" / "module_utils"


def imported(path):
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module


def test_module_utils_imports_nothing_of_ansible_core():
    files = sorted(MODULE_UTILS.rglob("*.py"))
    assert files
    found = {str(path.relative_to(MODULE_UTILS)): name for path in files for name in imported(path)
             if name == "ansible" or name.startswith("ansible.")}
    assert found == {}

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""module_utils and plugin_utils' rooms (its subfolders) import nothing of ansible-core: their tests give one verdict
on every core, so `make test` runs them on the newest core only (module_utils' also on the hosts' oldest Python; the
Makefile's CORE_UNIT_TESTS). A file there that needs ansible-core's API makes this fail: it belongs in plugin_utils'
own files (whose tests run on every core of CORE_LANES), or its room's tests must run there too."""
from __future__ import annotations

import ast
from pathlib import Path

PLUGINS = Path(__file__).resolve().parents[3] / "plugins"


def imported(path):
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module


def pure_files():
    rooms = [PLUGINS / "module_utils"] + [path for path in (PLUGINS / "plugin_utils").iterdir() if path.is_dir()]
    return sorted(path for room in rooms for path in room.rglob("*.py"))


def test_the_pure_rooms_import_nothing_of_ansible_core():
    files = pure_files()
    assert len(files) > 40
    found = {str(path.relative_to(PLUGINS)): name for path in files for name in imported(path)
             if name == "ansible" or name.startswith("ansible.")}
    assert found == {}

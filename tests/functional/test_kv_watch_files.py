# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The headroom watch runs on the host from root's copy of the collection's module_utils (roles/sglang_service,
vars/main.yml): the role must copy every file the script imports, directly or through another, and nothing else.
A file missing there is a watch that dies at import on every host (ModuleNotFoundError), which only a simulated host
would otherwise show."""
from __future__ import annotations

import ast
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
MODULE_UTILS = REPO / "plugins" / "module_utils"
PACKAGE = "ansible_collections.llmserve.sglang.plugins.module_utils"


def _imported(path: Path) -> set[str]:
    """The collection's module_utils files ``path`` imports, by their path under module_utils without .py
    (``watch/sampler``): ``from PACKAGE.watch import sampler`` and ``from PACKAGE.watch.sampler import Watcher``."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(PACKAGE):
            inner = node.module[len(PACKAGE):].lstrip(".").replace(".", "/")
            names.add(inner)
            names.update("/".join(filter(None, (inner, alias.name))) for alias in node.names)
    return {name for name in names if name and (MODULE_UTILS / (name + ".py")).is_file()}


def _closure(path: Path) -> set[str]:
    found, todo = set(), list(_imported(path))
    while todo:
        name = todo.pop()
        if name not in found:
            found.add(name)
            todo.extend(_imported(MODULE_UTILS / (name + ".py")))
    return found


def test_the_role_copies_every_module_utils_file_the_watch_imports_and_no_other():
    role = REPO / "roles" / "sglang_service"
    variables = yaml.safe_load((role / "vars" / "main.yml").read_text(encoding="utf-8"))
    listed = variables["__sglang_service_kv_watch_files"]
    into = "{{ __sglang_service_kv_watch_module_utils }}/"
    copied = {entry["dest"][len(into):-len(".py")] for entry in listed if entry["dest"].startswith(into)}
    assert copied == _closure(role / "files" / "llmserve_kv_watch.py")
    for entry in listed:
        assert (role / "files" / entry["src"]).resolve().is_file(), entry["src"]
        if entry["dest"].startswith(into):
            # each file where its module_utils folder is, and that folder created (tasks/kv_watch.yml)
            assert entry["src"] == "../../../plugins/module_utils/" + entry["dest"][len(into):], entry
            folder = entry["dest"][len(into):].rpartition("/")[0]
            assert not folder or folder in variables["__sglang_service_kv_watch_folders"], entry

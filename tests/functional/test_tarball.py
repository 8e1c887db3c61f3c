# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The built tarball holds nothing that needs what it leaves out (galaxy.yml build_ignore): every test it ships
imports only what the tarball holds, the standard library and what ansible-test units installs, and names no path
of the checkout that the tarball leaves out."""
from __future__ import annotations

import ast
import os
import subprocess
import sys
import tarfile

import pytest

from conftest import REPO

BIN = os.path.dirname(sys.executable)
PREFIX = "ansible_collections.llmserve.sglang."
# What `ansible-test units` puts beside the standard library: ansible-core and its requirements, its pytest plugins,
# and tests/unit/requirements.txt (nvidia-ml-py is imported as pynvml).
UNITS_PACKAGES = {"ansible", "jinja2", "markupsafe", "yaml", "cryptography", "packaging", "resolvelib", "pytest",
                  "_pytest", "mock", "pytest_mock", "xdist", "pynvml",
                  "prometheus_client"}   # tests/unit/requirements.txt


@pytest.fixture(scope="module")
def members(tmp_path_factory):
    out = tmp_path_factory.mktemp("build")
    built = subprocess.run([os.path.join(BIN, "ansible-galaxy"), "collection", "build", "--output-path", str(out),
                            str(REPO)], capture_output=True, text=True, check=False)
    assert built.returncode == 0, built.stdout + built.stderr
    (tarball,) = out.glob("llmserve-sglang-*.tar.gz")
    with tarfile.open(tarball) as tar:
        return {member.name: (tar.extractfile(member).read().decode() if member.isfile() else None)
                for member in tar.getmembers()}


def left_out(members):
    """Top-level files and folders of the checkout (tracked by git) that the tarball does not hold."""
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    return {path.split("/")[0] for path in tracked} - {name.split("/")[0] for name in members}


def shipped_tests(members):
    return sorted(name for name in members if name.startswith("tests/") and name.endswith(".py"))


def resolves(module, members):
    path = module.replace(".", "/")
    return path + ".py" in members or path in members or path + "/__init__.py" in members


def imported(source, name):
    """(module, how) for every import of a test file; relative imports resolved against its package."""
    package = os.path.dirname(name).replace("/", ".")
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, "import"
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                yield (base + "." + node.module if node.module else base), "relative"
            else:
                yield node.module, "from"
                for alias in node.names:  # from ansible_collections.x.y import module
                    if node.module.startswith(PREFIX):
                        yield node.module + "." + alias.name, "from-member"


def test_the_tarball_leaves_out_the_tests_that_need_the_checkout(members):
    shipped = shipped_tests(members)
    assert any(name.startswith("tests/unit/plugins/modules/") for name in shipped), shipped
    for folder in ("tests/sim/", "tests/simhosts/", "tests/functional/", "tests/roles/", "tools/", "molecule/",
                   ".pytest_cache/"):
        assert not any(name.startswith(folder) for name in members), folder
    assert {"tools", "molecule", "Makefile", "ansible.cfg"} <= left_out(members)


def test_every_shipped_test_imports_what_the_tarball_holds(members):
    missing = []
    for name in shipped_tests(members):
        for module, how in imported(members[name], name):
            if module.startswith(PREFIX):
                rest = module[len(PREFIX):]
                # `from package import name`: a module of the package, or a name the module imported from defines.
                found = resolves(rest, members) or (how == "from-member" and resolves(rest.rsplit(".", 1)[0], members))
            elif how == "relative":
                found = resolves(module, members)
            else:
                top = module.split(".")[0]
                found = top != "ansible_collections" and (top in sys.stdlib_module_names or top in UNITS_PACKAGES)
            if not found:
                missing.append((name, module))
    assert missing == []


def test_no_shipped_test_names_a_path_the_tarball_leaves_out(members):
    gone = left_out(members) - {"galaxy.yml"}  # the tests read galaxy.yml or, installed, MANIFEST.json
    named = []
    for name in shipped_tests(members):
        for node in ast.walk(ast.parse(members[name])):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                first = node.value.split("/")[0]
                if first in gone and (node.value == first or "/" in node.value):
                    named.append((name, node.value))
    assert named == []

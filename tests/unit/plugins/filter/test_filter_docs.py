# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Every filter has its documentation, once, where both ansible-doc and Galaxy find it.

Galaxy's importer (galaxy-importer) lists a collection's filters by file: each plugins/filter/<file>.py, and the file
ansible-doc names as each filter's documentation. A file that returns filters of other names is listed as a filter
<file> without documentation, and a sidecar <name>.yml beside a <name>.py lists <name> twice. So each
plugins/filter/<name>.py returns the one filter <name> and carries its DOCUMENTATION, EXAMPLES and RETURN, and
nothing else lives in plugins/filter/."""
from __future__ import annotations

import importlib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[4]
FILTER_DIR = ROOT / "plugins" / "filter"
PACKAGE = "ansible_collections.llmserve.sglang.plugins.filter"
FILES = sorted(path for path in FILTER_DIR.glob("*.py") if path.name != "__init__.py")


def test_plugins_filter_holds_one_python_file_per_filter():
    assert len(FILES) >= 17
    others = sorted(path.name for path in FILTER_DIR.iterdir()
                    if path.is_file() and path.suffix != ".py" and path.suffix != ".pyc")
    assert others == [], "documentation goes into <name>.py (a sidecar .yml makes Galaxy list the filter twice)"


@pytest.mark.parametrize("path", FILES, ids=lambda path: path.stem)
def test_each_file_is_one_filter_of_its_name_with_its_documentation(path):
    module = importlib.import_module("%s.%s" % (PACKAGE, path.stem))
    assert list(module.FilterModule().filters()) == [path.stem], \
        "Galaxy lists %s as a filter: it must return exactly the filter of that name" % path.name
    doc = yaml.safe_load(module.DOCUMENTATION)
    assert doc["name"] == path.stem
    assert doc["short_description"] and doc["description"]
    assert doc["version_added"]  # which version: tests/unit/plugins/test_version_added.py
    assert "_input" in doc["options"]
    assert "_value" in yaml.safe_load(module.RETURN)
    assert "llmserve.sglang.%s" % path.stem in module.EXAMPLES
    assert isinstance(yaml.safe_load(module.EXAMPLES), list)


def test_every_filter_name_is_documented_and_every_documentation_names_a_filter():
    filters, documented = set(), []
    for path in FILES:
        module = importlib.import_module("%s.%s" % (PACKAGE, path.stem))
        filters |= set(module.FilterModule().filters())
        documented.append(yaml.safe_load(module.DOCUMENTATION)["name"])
    assert sorted(documented) == sorted(set(documented)), "a filter documented twice"
    assert filters - set(documented) == set(), "filters without documentation"
    assert set(documented) - filters == set(), "documentation of no filter"

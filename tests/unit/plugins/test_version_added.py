# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Every version_added in the plugins' documentation (a plugin's or an option's) is a version the collection ships in:
one released in changelogs/changelog.yaml, or the version being prepared (galaxy.yml, MANIFEST.json when installed)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]
VERSION_ADDED = re.compile(r"^\s*version_added:\s*['\"]?([^'\"\s#]+)", re.MULTILINE)


def collection_versions():
    if (ROOT / "galaxy.yml").is_file():
        current = yaml.safe_load((ROOT / "galaxy.yml").read_text())["version"]
    else:
        current = json.loads((ROOT / "MANIFEST.json").read_text())["collection_info"]["version"]
    changes = yaml.safe_load((ROOT / "changelogs" / "changelog.yaml").read_text())
    return {str(current)} | {str(version) for version in (changes.get("releases") or {})}


def test_every_version_added_is_a_version_of_the_collection():
    versions = collection_versions()
    found = {}
    for path in sorted((ROOT / "plugins").rglob("*.py")):
        for value in VERSION_ADDED.findall(path.read_text()):
            found.setdefault(value, []).append(str(path.relative_to(ROOT)))
    assert len(found.get("1.0.0", [])) >= 27
    assert {value: paths for value, paths in found.items() if value not in versions} == {}

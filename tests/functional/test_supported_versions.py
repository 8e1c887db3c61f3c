# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The ansible-core versions the collection claims against those it is tested on and those its files name:
meta/runtime.yml's requires_ansible admits every core make test runs (constraints.txt's, each of the Makefile's
CORE_LANES) and the example execution environment's, claims no minor version none of them is, and the README, docs/awx.md
and ansible-lint's meta-runtime setting say the same."""
from __future__ import annotations

import re

import yaml
from ansiblelint.config import Options
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from conftest import REPO


def requires_ansible():
    return yaml.safe_load((REPO / "meta" / "runtime.yml").read_text())["requires_ansible"]


def pinned_core(path):
    match = re.search(r"^ansible-core==(\S+)$", path.read_text(), re.M)
    assert match, "%s pins no ansible-core" % path.name
    return Version(match.group(1))


def venv_core():
    return pinned_core(REPO / "constraints.txt")


def makefile_lanes():
    match = re.search(r"^CORE_LANES := (.*)$", (REPO / "Makefile").read_text(), re.M)
    return [Version(word) for word in match.group(1).split()]


def ee_core():
    ee = yaml.safe_load((REPO / "docs" / "awx" / "execution-environment.yml").read_text())
    return Version(ee["dependencies"]["ansible_core"]["package_pip"].split("==")[1])


def minor(version):
    return "%d.%d" % (version.major, version.minor)


def test_requires_ansible_admits_every_core_tested_and_the_ees():
    claim = SpecifierSet(requires_ansible())
    for version in [venv_core(), ee_core(), *makefile_lanes()]:
        assert version in claim, "%s is tested but meta/runtime.yml claims %s" % (version, claim)


def test_the_claim_starts_at_the_oldest_minor_tested_and_skips_none():
    tested = sorted({minor(version) for version in [venv_core(), *makefile_lanes()]}, key=Version)
    floor = min(Version(spec.version) for spec in SpecifierSet(requires_ansible()) if spec.operator == ">=")
    assert minor(floor) == tested[0]
    # Every minor release from the floor to the newest has a lane: none in between is claimed untested.
    newest = Version(tested[-1])
    expected = ["%d.%d" % (floor.major, m) for m in range(floor.minor, newest.minor + 1)]
    assert tested == expected


def test_the_execution_environment_installs_the_core_the_playbooks_are_tested_on():
    assert ee_core() == venv_core()


def test_the_readme_and_the_awx_page_quote_the_claim_and_the_cores():
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Supported versions", 1)[1].split("\n## ", 1)[0]
    assert 'requires_ansible: "%s"' % requires_ansible() in section
    for version in [venv_core(), *makefile_lanes()]:
        assert str(version) in section, "README's Supported versions does not name %s" % version
    awx = (REPO / "docs" / "awx.md").read_text()
    assert '`requires_ansible` is `"%s"`' % requires_ansible() in awx
    assert "ansible-core %s" % ee_core() in awx


def test_ansible_lint_counts_every_minor_tested_as_supported():
    lint = yaml.safe_load((REPO / ".ansible-lint").read_text())
    supported = set(Options._default_supported) | set(lint.get("supported_ansible_also") or [])  # pylint: disable=protected-access
    for version in [venv_core(), *makefile_lanes()]:
        assert minor(version) + "." in supported

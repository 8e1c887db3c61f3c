# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""playbooks/site.yml on a simulated field-case host, twice: the second run changes nothing and restarts nothing.

The host (prefix simsite) gets inventories/sim/group_vars/sim.yml, the same variables `make demo` uses. A server
whose start fails (the readiness wait stops at once and names the failure) is tests/functional/
test_sglang_service_failed_start.py, on a real boot log.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from simhost_lib import REPO, play, sim_inventory

PREFIX = "simsite"
HOST = f"{PREFIX}1"
# `systemd-analyze security sglang.service` on this host (Debian 12, systemd 252): 7.3 before the hardening of
# roles/sglang_service/templates/sglang.service.j2, 3.1 after. A change that weakens the unit fails here; one that
# hardens it further lowers this value.
EXPOSURE_MAX = 3.1


@pytest.fixture(scope="module")
def inventory(tmp_path_factory):
    with sim_inventory(tmp_path_factory.mktemp("simsite"), PREFIX, ["field"]) as path:
        yield path


def unit_property(inventory: Path, name: str) -> str:
    return play(inventory, tasks=[{"name": "show", "ansible.builtin.command": {
        "argv": ["systemctl", "show", f"--property={name}", "--value", "sglang.service"]}}]).results["show"]["stdout"]


def unit_properties(inventory: Path, *names: str) -> dict[str, str]:
    """Several properties of sglang.service in one call; a property systemd leaves out (an empty list) reads ''."""
    out = play(inventory, tasks=[{"name": "show", "ansible.builtin.command": {
        "argv": ["systemctl", "show", "--property=" + ",".join(names), "sglang.service"]}}]).results["show"]["stdout"]
    shown = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    return {name: shown.get(name, "") for name in names}


def test_site_twice_then_nothing_changes(inventory):
    first = play(inventory, playbook=REPO / "playbooks" / "site.yml")
    assert first.status == "successful", first.stdout
    assert first.stats["changed"].get(HOST, 0) > 0
    started = unit_property(inventory, "InvocationID")
    assert unit_property(inventory, "User") == "sglang"

    second = play(inventory, playbook=REPO / "playbooks" / "site.yml")
    assert second.status == "successful", second.stdout
    assert second.stats["changed"].get(HOST, 0) == 0, second.stats
    assert unit_property(inventory, "InvocationID") == started  # not restarted


def test_capacity_report_after_site(inventory, tmp_path):
    report_run = play(inventory, playbook=REPO / "playbooks" / "capacity_report.yml",
                      extravars={"capacity_report_output_dir": str(tmp_path), "capacity_report_sglang_version": "0.5.9"})
    assert report_run.status == "successful", report_run.stdout
    report = (tmp_path / f"{HOST}.md").read_text()
    assert "| logged by SGLang | 0.88 |" in report and "8 x NVIDIA RTX PRO 6000" in report


def test_server_runs_as_sglang_not_root(inventory):
    ps_run = play(inventory, tasks=[{"name": "ps", "ansible.builtin.command": {
        "argv": ["ps", "-o", "user=", "-C", "python"]}}])
    users = set(ps_run.results["ps"]["stdout"].split())
    assert users == {"sglang"}, users


def test_unit_exposure_score_and_hardening(inventory):
    """The unit site.yml deployed (DevicePolicy=auto, the default) keeps its systemd-analyze exposure score and the
    directives behind it, while the server behind it generated (site.yml's readiness wait)."""
    run = play(inventory, tasks=[{"name": "security", "ansible.builtin.command": {
        "argv": ["systemd-analyze", "security", "--no-pager", "sglang.service"]}}])
    output = run.results["security"]["stdout"]
    level = re.search(r"Overall exposure level for sglang\.service: (\d+\.\d+)", output)
    assert level, output
    assert float(level.group(1)) <= EXPOSURE_MAX, output
    expected = {"ProtectKernelLogs": "yes", "ProtectClock": "yes", "ProtectHostname": "yes",
                "RestrictNamespaces": "yes", "SystemCallArchitectures": "native", "CapabilityBoundingSet": "",
                "AmbientCapabilities": "", "ProtectProc": "invisible", "ProcSubset": "all", "RemoveIPC": "yes",
                "KeyringMode": "private", "PrivateUsers": "no", "PrivateDevices": "no", "DevicePolicy": "auto",
                "DeviceAllow": ""}
    shown = unit_properties(inventory, *expected, "RestrictAddressFamilies")
    assert sorted(shown.pop("RestrictAddressFamilies").split()) == ["AF_INET", "AF_INET6", "AF_NETLINK", "AF_UNIX"]
    assert shown == expected


def server_version(inventory: Path) -> str:
    """What the running server reports as its SGLang version (/get_server_info)."""
    info = play(inventory, tasks=[{"name": "info", "ansible.builtin.uri": {
        "url": "http://127.0.0.1:30000/get_server_info", "return_content": True}}]).results["info"]
    return info["json"]["version"]


def test_sglang_installed_by_pip_and_an_upgrade_changes_the_server(inventory):
    """site.yml installed SGLang as on a real host: the distribution sglang 0.5.9 (the field profile's; the
    simulator's stand-in) in the root-owned venv, with its dist-info. Upgrading it with pip from the host's wheelhouse
    and restarting changes what the server runs and reports. Last in this module: the host keeps 0.5.10."""
    site_packages = "/opt/sglang/venv/lib/python3.*/site-packages"
    before = play(inventory, tasks=[{"name": "meta", "ansible.builtin.shell": (
        f"cat {site_packages}/sglang-0.5.9.dist-info/METADATA && stat -c %U {site_packages}/sglang-0.5.9.dist-info")}])
    lines = before.results["meta"]["stdout_lines"]
    assert "Name: sglang" in lines and "Version: 0.5.9" in lines and "Requires-Dist: sglang-sim" in lines, lines
    assert lines[-1] == "root"
    assert server_version(inventory) == "0.5.9"

    upgrade = play(inventory, tasks=[
        {"name": "pip", "ansible.builtin.command": {"argv": [
            "/opt/sglang/venv/bin/pip", "install", "-q", "--disable-pip-version-check", "--no-index",
            "--find-links", "/var/cache/sglang-sim/wheelhouse", "sglang==0.5.10"]}},
        {"name": "restart", "ansible.builtin.systemd_service": {"name": "sglang.service", "state": "restarted"}},
        {"name": "ready", "llmserve.sglang.sglang_ready": {"unit": "sglang.service", "timeout": 120}},
        {"name": "meta", "ansible.builtin.shell": f"ls -d {site_packages}/sglang-*.dist-info"}])
    assert upgrade.status == "successful", upgrade.stdout[-4000:]
    assert upgrade.results["ready"]["ready"], upgrade.results["ready"]
    assert [line.rsplit("/", 1)[1] for line in upgrade.results["meta"]["stdout_lines"]] == ["sglang-0.5.10.dist-info"]
    assert server_version(inventory) == "0.5.10"

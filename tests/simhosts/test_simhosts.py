# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""tools/simhosts for real: four nspawn hosts up, Ansible and journald on them, a crash recovered, nothing left after down.

Uses its own prefix (simtest) and inventory file, so a developer's `make sim-up` hosts are never touched.
The simulator comes from $SIM_WHEELHOUSE (`make simhosts` sets it), else its wheel is built here.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from simhost_lib import STATE_DIR, TOOL, ansible, simhosts, simulator_wheelhouse

PREFIX = "simtest"
COUNT = 4


def state_hosts() -> dict:
    path = STATE_DIR / "state.json"
    hosts = json.loads(path.read_text(encoding="utf-8"))["hosts"] if path.exists() else {}
    return {name: host for name, host in hosts.items() if host.get("prefix") == PREFIX}


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    """Four hosts of our own prefix; removed at the end whatever happened."""
    tmp = tmp_path_factory.mktemp("simhosts")
    wheelhouse = simulator_wheelhouse(tmp)
    inventory = tmp / "hosts.yml"
    up = simhosts("up", "--count", str(COUNT), "--prefix", PREFIX, "--profile", "field",
                  "--inventory", str(inventory), "--wheelhouse", wheelhouse)
    info = {"inventory": inventory, "up": up,
            "wheelhouse": wheelhouse}
    try:
        yield info
    finally:
        subprocess.run([sys.executable, str(TOOL), "down", "--prefix", PREFIX], capture_output=True, timeout=300, check=False)


def test_inventory_lists_the_hosts(sim):
    text = sim["inventory"].read_text(encoding="utf-8")
    for i in range(1, COUNT + 1):
        assert f"    {PREFIX}{i}:\n      ansible_host: 198.1" in text
    for line in ("ansible_user: root", "ansible_ssh_private_key_file:", "ansible_python_interpreter: /usr/bin/python3",
                 'sim_profile: "field"', "StrictHostKeyChecking=no"):
        assert line in text
    assert len(state_hosts()) == COUNT


def test_ansible_reaches_every_host(sim):
    results = ansible(sim["inventory"], "ansible.builtin.ping")
    assert sorted(results) == [f"{PREFIX}{i}" for i in range(1, COUNT + 1)], results
    assert all(res.get("ping") == "pong" for res in results.values()), results


def test_journald_records_a_unit(sim):
    results = ansible(sim["inventory"], "ansible.builtin.shell",
                      "systemd-run --wait --quiet --unit simtest-hi echo hi-from-journald && "
                      "journalctl -u simtest-hi --no-pager -o cat && systemctl is-system-running")
    assert len(results) == COUNT, results
    for host, res in results.items():
        assert res.get("rc") == 0, (host, res)
        assert "hi-from-journald" in res["stdout_lines"] and res["stdout_lines"][-1] == "running", (host, res)


def test_simulator_installed_with_profile(sim):
    results = ansible(sim["inventory"], "ansible.builtin.shell",
                      "readlink /usr/local/bin/nvidia-smi && readlink /usr/local/bin/lspci && test -s /etc/sglang-sim/host.json && "
                      "cat /etc/sglang-sim/host.json | head -c 300 && ls /models && nvidia-smi | head -3 && lspci -n -d 10de:")
    assert len(results) == COUNT, results
    for host, res in results.items():
        assert res.get("rc") == 0, (host, res)
        assert res["stdout_lines"][:2] == ["/opt/sglang-sim/bin/sglang-sim-smi", "/opt/sglang-sim/bin/sglang-sim-lspci"], (host, res)
        assert "RTX PRO 6000" in res["stdout"], (host, res)
        assert res["stdout_lines"][-8:] == [f"{bus}:00.0 0302: 10de:2bb5 (rev a1)" for bus in ("18", "2a", "3a", "5d", "9a", "ab", "ba", "db")], (host, res)


def test_sglang_of_the_profiles_version_installed_by_pip_beside_the_simulator(sim):
    """`serve` runs python -m sglang.launch_server from /opt/sglang-sim, where pip installed the profile's SGLang
    version (field: 0.5.9, the stand-in distribution) as on a real host."""
    results = ansible(sim["inventory"], "ansible.builtin.shell",
                      "/opt/sglang-sim/bin/pip freeze --disable-pip-version-check && "
                      "cat /opt/sglang-sim/lib/python3.*/site-packages/sglang-0.5.9.dist-info/METADATA && "
                      "/opt/sglang-sim/bin/python -c 'import sglang; print(sglang.__version__)'")
    assert len(results) == COUNT, results
    for host, res in results.items():
        assert res.get("rc") == 0, (host, res)
        lines = res["stdout_lines"]
        assert "sglang==0.5.9" in lines and "sglang-sim==0.1.0" in lines, (host, res)
        assert "Name: sglang" in lines and "Requires-Dist: sglang-sim" in lines and lines[-1] == "0.5.9", (host, res)


def test_rerun_keeps_running_hosts_and_recreates_a_crashed_one(sim):
    before = state_hosts()
    victim = f"{PREFIX}2"
    os.kill(before[victim]["pid"], 9)  # a crash: nspawn gone, its netns, overlay and tree left behind
    up = simhosts("up", "--count", str(COUNT), "--prefix", PREFIX, "--profile", "field",
                  "--inventory", str(sim["inventory"]), "--wheelhouse", sim["wheelhouse"])
    after = state_hosts()
    assert f"{victim}: recreating" in up.stderr, up.stderr
    for name in before:
        if name != victim:
            assert after[name]["pid"] == before[name]["pid"], f"{name} was restarted:\n{up.stderr}"
            assert f"{name}: already up" in up.stderr
    assert after[victim]["pid"] != before[victim]["pid"]
    results = ansible(sim["inventory"], "ansible.builtin.ping")
    assert len(results) == COUNT and all(res.get("ping") == "pong" for res in results.values()), results


def _live_processes_mentioning(text: str) -> list[str]:
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if text in cmdline:
                found.append(f"{proc.name}: {cmdline}")
    return found


def test_down_leaves_nothing_behind(sim):
    hosts = state_hosts()
    assert len(hosts) == COUNT
    simhosts("down", "--prefix", PREFIX, timeout=300)
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=True).stdout
    mounts = Path("/proc/mounts").read_text(encoding="utf-8")
    for name, host in hosts.items():
        home = host["home"]
        assert host["netns"] not in netns, netns
        assert f" {host['veth']}@" not in links and f" {host['veth']}:" not in links, links
        assert f" {home}/" not in mounts and f" {home} " not in mounts, mounts
        assert not Path(home).exists(), home
        assert not _live_processes_mentioning(home), _live_processes_mentioning(home)
        assert all(not Path(cg).exists() for cg in host.get("cgroups", [])), host.get("cgroups")
        assert name not in state_hosts()
    assert not sim["inventory"].exists()

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""tools/simhosts for real: four nspawn hosts up, Ansible and journald on them, a crash recovered, nothing left after down.

Uses its own prefix (simtest) and inventory file, so a developer's `make sim-up` hosts are never touched.
The simulator comes from $SIM_WHEELHOUSE (`make simhosts` sets it), else its wheel is built here.
"""
from __future__ import annotations

import contextlib

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import ansible_runner
import pytest

REPO = Path(__file__).resolve().parents[2]
TOOL = REPO / "tools" / "simhosts" / "simhosts.py"
PREFIX = "simtest"
COUNT = 4
STATE_DIR = Path(os.environ.get("SIM_STATE_DIR", "/var/lib/llmserve-sim"))
# ansible-runner starts ansible from PATH: use the one beside this interpreter (the venv's).
os.environ["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])


def _cannot_run_nspawn() -> str | None:
    """Why containers cannot run here at all, or None. A missing systemd-nspawn is not a reason: the tool installs it."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, veths and systemd-nspawn)"
    if shutil.which("unshare") is None:
        return "util-linux unshare is missing, cannot probe for namespaces"
    probe = subprocess.run(["unshare", "--mount", "--net", "--pid", "--uts", "--ipc", "--fork", "true"],
                           capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        return f"this machine cannot create the namespaces systemd-nspawn needs: {probe.stderr.strip()}"
    return None


pytestmark = pytest.mark.skipif(_cannot_run_nspawn() is not None, reason=str(_cannot_run_nspawn()))


def simulator_wheelhouse(tmp: Path) -> str:
    """$SIM_WHEELHOUSE (`make simhosts` sets it), else the simulator's real wheels (sglang-sim and the stand-in
    sglang wheels) built into tmp, as make would."""
    wheelhouse = os.environ.get("SIM_WHEELHOUSE")
    if wheelhouse:
        return wheelhouse
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(REPO / "tools" / "sglang_sim"),
                    "-w", str(tmp / "wheelhouse")], check=True, capture_output=True, timeout=600)
    subprocess.run([sys.executable, str(REPO / "tools" / "sglang_sim" / "build_standins.py"), str(tmp / "wheelhouse")],
                   check=True, capture_output=True, timeout=600)
    return str(tmp / "wheelhouse")


@contextlib.contextmanager
def sim_inventory(tmp: Path, prefix: str, profiles: list[str]):
    """An inventory directory (``tmp``/inventory) with inventories/sim's group_vars (what `make demo` uses) and one
    simulated host of ``prefix`` per profile, up while the block runs and removed after it. Nothing else goes into
    that directory: Ansible reads every file in it as inventory."""
    wheelhouse = simulator_wheelhouse(tmp)
    inventory = tmp / "inventory"
    shutil.copytree(REPO / "inventories" / "sim" / "group_vars", inventory / "group_vars")
    simhosts("up", "--count", str(len(profiles)), "--prefix", prefix, "--profile", ",".join(profiles),
             "--inventory", str(inventory / "hosts.yml"), "--wheelhouse", wheelhouse)
    try:
        yield inventory
    finally:
        simhosts("down", "--prefix", prefix, check=False)


def simhosts(*args: str, timeout: float = 900, check: bool = True) -> subprocess.CompletedProcess:
    """Run tools/simhosts; with check, a failure fails the test with the tool's output."""
    proc = subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True, timeout=timeout, check=False)
    if check:
        assert proc.returncode == 0, f"simhosts {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc


def state_hosts() -> dict:
    path = STATE_DIR / "state.json"
    hosts = json.loads(path.read_text(encoding="utf-8"))["hosts"] if path.exists() else {}
    return {name: host for name, host in hosts.items() if host.get("prefix") == PREFIX}


def ansible(inventory: Path, module: str, module_args: str | None = None) -> dict[str, dict]:
    """Run one ad-hoc module on every host through ansible-runner; return each host's result."""
    private = Path(tempfile.mkdtemp(prefix="simhosts-runner-"))
    try:
        runner = ansible_runner.run(
            private_data_dir=str(private), inventory=str(inventory), host_pattern="all", module=module,
            module_args=module_args or "", quiet=True, timeout=300,
            envvars={"ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"})
        results = {}
        for event in runner.events:
            if event.get("event") in ("runner_on_ok", "runner_on_failed", "runner_on_unreachable"):
                data = event["event_data"]
                results[data["host"]] = dict(data["res"], event=event["event"])
        return results
    finally:
        shutil.rmtree(private, ignore_errors=True)


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

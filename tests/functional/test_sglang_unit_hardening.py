# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The sglang_service unit's hardening as rendered for the hosts the simulated ones (systemd 252, DevicePolicy=auto)
do not show: ProtectClock= only where it cannot become a device allow-list without the GPUs (systemd#18142), and
none of the directives that would break the real NVIDIA driver or SGLang, on any systemd."""
from __future__ import annotations

import json

import pytest

from conftest import REPO, Ansible

ROLE = REPO / "roles" / "sglang_service"
# Each (systemd version, device policy): whether ProtectClock= is set.
VARIANTS = [(252, "auto", True), (257, "auto", True), (249, "auto", False), (249, "closed", True), (0, "auto", False)]
# In every variant (the simhost and molecule tests check them on a running unit).
ALWAYS = {"NoNewPrivileges": ["yes"], "CapabilityBoundingSet": [""], "AmbientCapabilities": [""],
          "ProtectKernelLogs": ["yes"], "ProtectHostname": ["yes"], "ProtectProc": ["invisible"],
          "RestrictNamespaces": ["yes"], "SystemCallArchitectures": ["native"], "KeyringMode": ["private"],
          "RemoveIPC": ["yes"], "RestrictAddressFamilies": ["AF_UNIX AF_INET AF_INET6 AF_NETLINK"]}
# Never: they hide /dev/nvidia* or /proc/driver/nvidia, break JIT, remap the devices' owners, or kill on a syscall.
NEVER = ["PrivateDevices", "ProcSubset", "PrivateUsers", "MemoryDenyWriteExecute", "SystemCallFilter"]


@pytest.fixture(name="units", scope="module")
def fixture_units(tmp_path_factory) -> dict[tuple[int, str], dict[str, list[str]]]:
    """The [Service] directives of the unit rendered from the role's template and defaults, per variant."""
    tmp = tmp_path_factory.mktemp("unit")
    unit = {"instance": "", "unit": "sglang.service", "port": 30000, "mem_fraction_static_from": "SGLang's default",
            "kv_args": "", "env_file": "/etc/sglang/sglang.env",
            "exec_start": "/opt/sglang/venv/bin/python -m sglang.launch_server --model-path /models/m"}
    play = tmp / "render.yml"
    play.write_text(json.dumps([{
        "hosts": "localhost", "gather_facts": False,
        # Defaults as play vars_files: below the task vars that set each variant.
        "vars_files": [str(ROLE / "defaults" / "main.yml")],
        "tasks": [{"name": "render", "ansible.builtin.template": {
            "src": str(ROLE / "templates" / "sglang.service.j2"),
            "dest": str(tmp) + "/{{ item.0 }}-{{ item.1 }}.service", "mode": "0644"},
            "loop": [list(variant[:2]) for variant in VARIANTS],
            "vars": {"__sglang_service_systemd_version": "{{ item.0 }}", "sglang_service_device_policy": "{{ item.1 }}",
                     "__sglang_service_nvidia_modprobe": "", "__sglang_service_unit": unit}}]}]))
    runner = Ansible(tmp).playbook(play)
    assert runner.status == "successful", runner.stdout.read()
    units = {}
    for version, policy in (variant[:2] for variant in VARIANTS):
        directives: dict[str, list[str]] = {}
        for line in (tmp / f"{version}-{policy}.service").read_text().splitlines():
            if "=" in line and not line.startswith("#"):
                key, value = line.split("=", 1)
                directives.setdefault(key, []).append(value)
        units[(version, policy)] = directives
    return units


@pytest.mark.parametrize("version, policy, protect_clock", VARIANTS, ids=[f"systemd{v[0]}-{v[1]}" for v in VARIANTS])
def test_hardening_per_systemd_and_device_policy(units, version, policy, protect_clock):
    directives = units[(version, policy)]
    assert {key: directives.get(key) for key in ALWAYS} == ALWAYS
    assert [key for key in NEVER if key in directives] == []
    assert directives.get("ProtectClock") == (["yes"] if protect_clock else None)
    # Under DevicePolicy=auto no DeviceAllow= at all: any entry would make it an allow-list without /dev/nvidia*.
    assert ("DeviceAllow" in directives) == (policy == "closed")
    if policy == "closed":
        assert directives["DevicePolicy"] == ["closed"] and "char-nvidiactl rw" in directives["DeviceAllow"]

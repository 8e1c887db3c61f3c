# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What llmserve.sglang.nvidia_driver left on the three simulated hosts of molecule/nvidia_driver (see molecule.yml)."""
from __future__ import annotations

import pytest

DRIVER_PACKAGES = ("nvidia-kernel-open-dkms", "nvidia-driver-cuda", "libcuda1", "libnvidia-ml1", "nvidia-smi",
                   "nvidia-persistenced")
FABRICMANAGER = "nvidia-fabricmanager-580"
# nvdrv1: h200-deepseek-v3, pinned to 580.105.08 although 580.126.20 is offered, NVSwitches present.
# nvdrv2: field, branch 580 only (newest: 580.126.20, never 590.48.01), no NVSwitch, had a stray held fabric manager.
# nvdrv3: h100-llama70b, its simulated driver 570.133.20 loaded and wanted: untouched.
EXPECT = {
    "nvdrv1": {"managed": True, "version": "580.105.08", "fabricmanager": True, "gpus": 8, "nvswitches": 4},
    "nvdrv2": {"managed": True, "version": "580.126.20", "fabricmanager": False, "gpus": 8, "nvswitches": 0},
    "nvdrv3": {"managed": False, "loaded": "570.133.20", "gpus": 8, "nvswitches": 4},
}
PIN = "/etc/apt/preferences.d/llmserve-nvidia-driver.pref"


@pytest.fixture(name="want")
def fixture_want(host):
    return EXPECT[host.backend.get_hostname()]


@pytest.fixture(name="managed")
def fixture_managed(want):
    if not want["managed"]:
        pytest.skip("the role leaves this host's driver alone")
    return want


def held(host) -> set[str]:
    return set(host.check_output("apt-mark showhold").split())


def test_driver_packages_installed_at_the_pinned_version(host, managed):
    for name in DRIVER_PACKAGES:
        pkg = host.package(name)
        assert pkg.is_installed, name
        assert pkg.version == f"{managed['version']}-1", name


def test_driver_packages_are_held(host, managed):
    assert set(DRIVER_PACKAGES) <= held(host)


def test_apt_is_pinned_to_the_driver_version(host, managed):
    pin = host.file(PIN)
    assert pin.exists
    assert f"Pin: version {managed['version']}-*" in pin.content_string
    assert "Pin-Priority: 1001" in pin.content_string
    # With the pin, the candidate of every driver package is the installed version (no 580.126.20, no 590).
    policy = host.check_output("apt-cache policy nvidia-kernel-open-dkms libcuda1")
    assert policy.count(f"Candidate: {managed['version']}-1") == 2, policy


def test_an_upgrade_would_not_touch_the_driver(host, managed):
    sim = host.check_output("apt-get -s -o Debug::NoLocking=1 dist-upgrade")
    assert not [line for line in sim.splitlines() if line.startswith("Inst ") and "nvidia" in line], sim


def test_open_kernel_module_package_ran_its_postinst(host, managed):
    marker = host.file(f"/lib/modules/{host.check_output('uname -r')}/updates/dkms/nvidia.ko.dummy")
    assert marker.exists
    assert marker.content_string.split() == [managed["version"], "open"]


def test_kernel_headers_installed(host, managed):
    assert host.package(f"linux-headers-{host.check_output('uname -r')}").is_installed


def test_nouveau_blacklisted(host, managed):
    conf = host.file("/etc/modprobe.d/blacklist-nouveau.conf")
    assert conf.exists
    assert "blacklist nouveau" in conf.content_string.splitlines()
    assert "options nouveau modeset=0" in conf.content_string.splitlines()


def test_persistenced_enabled_with_persistence_mode(host, managed):
    assert host.service("nvidia-persistenced").is_enabled
    exec_start = host.check_output("systemctl show -p ExecStart --value nvidia-persistenced")
    assert "--persistence-mode" in exec_start and "--no-persistence-mode" not in exec_start, exec_start


def test_fabricmanager_present_exactly_with_nvswitch(host, managed):
    fabricmanager = host.package(FABRICMANAGER)
    if managed["fabricmanager"]:
        assert fabricmanager.is_installed
        assert fabricmanager.version == f"{managed['version']}-1"
        assert FABRICMANAGER in held(host)
        assert host.service("nvidia-fabricmanager").is_enabled
    else:
        assert not fabricmanager.is_installed
        assert FABRICMANAGER not in held(host)


def test_reboot_reported_pending_not_performed(host, managed):
    assert host.file("/run/reboot-required").exists
    assert host.file("/root/pid1-start").content_string.strip() == host.check_output("cut -d' ' -f22 /proc/1/stat")


def test_keyring_source_points_at_the_configured_repository(host, managed):
    source = host.file("/etc/apt/sources.list.d/cuda-debian12-x86_64.list").content_string
    assert source.strip() == "deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] file:/srv/nvidia-dummy-repo/ /"
    assert host.package("cuda-keyring").is_installed


def test_preloaded_driver_left_alone(host, want):
    if want["managed"]:
        pytest.skip("the role manages this host's driver")
    assert not host.package("cuda-keyring").is_installed
    for name in DRIVER_PACKAGES + (FABRICMANAGER,):
        assert not host.package(name).is_installed, name
    assert not host.file(PIN).exists
    assert not host.file("/run/reboot-required").exists


def test_the_pci_bus_is_the_simulated_hosts(host, want):
    # What the role read: the simulator's lspci, answering from the host profile (no fake sysfs anywhere).
    assert host.file("/usr/local/bin/lspci").linked_to == "/opt/sglang-sim/bin/sglang-sim-lspci"
    classes = [line.split()[1] for line in host.check_output("lspci -n -d 10de:").splitlines()]
    assert classes.count("0302:") == want["gpus"] and classes.count("0680:") == want["nvswitches"], classes


def test_preloaded_driver_still_answers(host, want):
    if want["managed"]:
        pytest.skip("the role manages this host's driver")
    versions = host.check_output("nvidia-smi --query-gpu=driver_version --format=csv,noheader").split()
    assert versions == [want["loaded"]] * want["gpus"]


def test_installed_driver_not_loaded_before_the_reboot(host, managed):
    # The packaged nvidia-smi cannot reach a driver: none is loaded until the host reboots.
    smi = host.run("nvidia-smi")
    assert smi.rc == 9 and "couldn't communicate with the NVIDIA driver" in smi.stdout, smi

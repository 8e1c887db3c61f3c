# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang-sim-lspci: the simulated hosts' PCI devices as lspci prints them.

Expected lines are real lspci output published for the same hardware (cited per test). Where pciutils is installed,
every option combination is also compared with the real lspci, fed the simulated devices as a config-space dump
(``lspci -F``) and the simulator's names as its ID database (``lspci -i``).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

import simlib

sys.path.insert(0, simlib.SIM_SRC)
from sglang_sim import hostspec, lspci, pci  # noqa: E402  pylint: disable=wrong-import-position

PROFILES = ("field", "h100-llama70b", "h200-deepseek-v3", "single-gpu", "single-gpu-hybrid")
HGX_H100 = """\
05:00.0 Bridge: NVIDIA Corporation GH100 [H100 NVSwitch] (rev a1)
06:00.0 Bridge: NVIDIA Corporation GH100 [H100 NVSwitch] (rev a1)
07:00.0 Bridge: NVIDIA Corporation GH100 [H100 NVSwitch] (rev a1)
08:00.0 Bridge: NVIDIA Corporation GH100 [H100 NVSwitch] (rev a1)
18:00.0 3D controller: NVIDIA Corporation GH100 [H100 SXM5 80GB] (rev a1)
2a:00.0 3D controller: NVIDIA Corporation GH100 [H100 SXM5 80GB] (rev a1)
3a:00.0 3D controller: NVIDIA Corporation GH100 [H100 SXM5 80GB] (rev a1)
5d:00.0 3D controller: NVIDIA Corporation GH100 [H100 SXM5 80GB] (rev a1)
9a:00.0 3D controller: NVIDIA Corporation GH100 [H100 SXM5 80GB] (rev a1)
ab:00.0 3D controller: NVIDIA Corporation GH100 [H100 SXM5 80GB] (rev a1)
ba:00.0 3D controller: NVIDIA Corporation GH100 [H100 SXM5 80GB] (rev a1)
db:00.0 3D controller: NVIDIA Corporation GH100 [H100 SXM5 80GB] (rev a1)
"""
# Option combinations compared with the real lspci.
COMMAND_LINES = (
    [], ["-n"], ["-nn"], ["-n", "-n"], ["-nnn"], ["-D"], ["-Dn"], ["-n", "-d", "10de:"], ["-nn", "-d", "10de:"],
    ["-nd10de:"], ["-d", "10de:2335"], ["-d", "10de::0302"], ["-n", "-d", "::0680"], ["-d", "*:*:03xx"],
    ["-d", "10de::0302:00"], ["-d", "10de::0302:01"], ["-d", "1af4:"], ["-s", "18:00.0"], ["-s", "2a:"],
    ["-s", "0000:05:00"], ["-s", ".0"], ["-s", "*:*.*"], ["-n", "-s", "db:00.0", "-d", "10de:"], ["-b", "-q", "-n"],
    ["-d", "10de"], ["-d", "zz:"], ["-d", "10de:12345"], ["-d", "10de:2335:0302:00:0"], ["-d", "10de::3x"],
    ["-d", "1:2:3:4:5"], ["-d", "x" * 70], ["-s", "1:2:3:4"], ["-s", "18:00.0:"], ["-s", "18:20.0"], ["-s", "18:00.8"],
    ["-s", "1.2.3"], ["-Z"], ["--bogus"], ["-n", "-d"], ["extra"], ["-n", "--", "-n"], ["-g"],
)


def host(profile: str, **overrides) -> hostspec.Host:
    return hostspec.Host(simlib.profile_host(profile, **overrides), "profile " + profile)


def run(profile: str, argv: list) -> tuple:
    """(rc, stdout, stderr) of the simulated lspci, in process."""
    try:
        return 0, lspci.render(pci.devices(host(profile)), argv), ""
    except lspci.LspciError as exc:
        return 1, "", (exc.message + "\n" if exc.message else "") + (lspci.HELP if exc.usage else "")


@pytest.mark.parametrize("profile", PROFILES)
def test_gpus_sit_where_nvidia_smi_says(make_sim, profile):
    sim = make_sim(profile)
    smi = sim.run("sglang_sim.smi", ["--query-gpu=pci.bus_id", "--format=csv,noheader"])
    listed = sim.run("sglang_sim.lspci", ["-D", "-n", "-d", "10de::0302"])
    assert listed.returncode == 0, listed.stderr
    slots = [line.split()[0] for line in listed.stdout.splitlines()]
    assert slots == [bus_id[4:].lower() for bus_id in smi.stdout.split()]
    assert len(slots) == simlib.profile_host(profile)["gpu"]["count"]


@pytest.mark.parametrize("profile, nvswitches", [("h100-llama70b", 4), ("h200-deepseek-v3", 4), ("field", 0),
                                                 ("single-gpu", 0), ("single-gpu-hybrid", 0)])
def test_nvswitches_only_on_hgx_profiles(profile, nvswitches):
    rc, out, _err = run(profile, ["-n", "-d", "10de:"])
    assert rc == 0
    assert sum(line.split()[1] == "0680:" for line in out.splitlines()) == nvswitches


def test_hgx_h100_is_a_real_hgx_h100():
    # `lspci -d 10de:` on an 8x H100 SXM node (project-codeflare/mlbatch, setup.RHOAI-v2.13/UPGRADE-*.md).
    assert run("h100-llama70b", ["-d", "10de:"]) == (0, HGX_H100, "")


@pytest.mark.parametrize("profile, line", [
    # lspci -Dnn on an HGX H100 (RHEL 9.4 notes, 0000:07:00.0 to 0a:00.0): the same switch, bus 05 here.
    ("h200-deepseek-v3", "05:00.0 Bridge [0680]: NVIDIA Corporation GH100 [H100 NVSwitch] [10de:22a3] (rev a1)"),
    # A dstack TDX host with 8x H200 lists 9a:00.0 as "GH100 [H200 SXM 141GB]"; -nn ids from a vfio guide.
    ("h200-deepseek-v3", "9a:00.0 3D controller [0302]: NVIDIA Corporation GH100 [H200 SXM 141GB] [10de:2335] (rev a1)"),
    # `lspci -nn | grep -i nvidia` on a GCP G4 node (1x RTX PRO 6000 Blackwell Server Edition at 05:00.0).
    ("field", "18:00.0 3D controller [0302]: NVIDIA Corporation GB202GL [RTX PRO 6000 Blackwell Server Edition] "
              "[10de:2bb5] (rev a1)"),
    # `lspci -nn | grep -i nvidia` on a 2x L4 server (01:00.0 and 41:00.0).
    ("single-gpu", "18:00.0 3D controller [0302]: NVIDIA Corporation AD104GL [L4] [10de:27b8] (rev a1)"),
])
def test_names_and_ids_of_real_cards(profile, line):
    rc, out, _err = run(profile, ["-nn", "-d", "10de:"])
    assert rc == 0 and line in out.splitlines(), out


def test_numeric_listing_is_what_the_role_parses():
    rc, out, _err = run("field", ["-n", "-d", "10de:"])
    assert rc == 0
    assert out.splitlines()[0] == "18:00.0 0302: 10de:2bb5 (rev a1)"
    assert len(out.splitlines()) == 8


def test_domains_shown_when_a_device_is_outside_domain_0():
    bus_ids = ["00000001:18:00.0"] + ["00000000:%02X:00.0" % bus for bus in (0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)]
    data = simlib.profile_host("h200-deepseek-v3")
    data["gpu"]["pci_bus_ids"] = bus_ids
    out = lspci.render(pci.devices(hostspec.Host(data)), ["-n", "-d", "::0680"])
    assert out.splitlines()[0] == "0000:05:00.0 0680: 10de:22a3 (rev a1)"


def test_errors_are_lspcis():
    assert run("field", ["-Z"])[2].startswith("lspci: invalid option -- 'Z'\nUsage: lspci [<switches>]\n")
    assert run("field", ["-n", "-d"])[2].startswith("lspci: option requires an argument -- 'd'\nUsage:")
    assert run("field", ["-d", "10de"]) == (1, "", "lspci: -d: At least two fields must be given\n")
    assert run("field", ["-s", "1:2:3:4"]) == (1, "", "lspci: -s: Too many fields\n")
    assert run("field", ["extra"]) == (1, "", lspci.HELP)


def test_what_is_not_simulated_is_refused():
    rc, out, err = run("h100-llama70b", ["-vv"])
    assert (rc, out) == (1, "") and "option -v is not simulated" in err


def test_custom_models_and_bad_pci_sections():
    unknown = simlib.profile_host("field")
    unknown["gpu"]["name"] = "NVIDIA GB300"
    with pytest.raises(hostspec.SimConfigError, match="set pci.gpu_device_id"):
        pci.devices(hostspec.Host(unknown))
    unknown["pci"] = {"gpu_device_id": "10de:31c2"}
    assert lspci.render(pci.devices(hostspec.Host(unknown)), ["-nn"]).startswith(
        "18:00.0 3D controller [0302]: NVIDIA Corporation Device [10de:31c2] (rev a1)\n")
    known = simlib.profile_host("field")
    known["gpu"]["name"] = "NVIDIA B200"   # the convergence benchmark's hosts (bench/bench_convergence.py)
    assert lspci.render(pci.devices(hostspec.Host(known)), ["-nn"]).startswith(
        "18:00.0 3D controller [0302]: NVIDIA Corporation GB100 [B200] [10de:2901] (rev a1)\n")
    with pytest.raises(hostspec.SimConfigError, match="no NVSwitch is known"):
        pci.devices(host("field", pci={"nvswitch_count": 2}))
    with pytest.raises(hostspec.SimConfigError, match="unknown pci keys"):
        host("field", pci={"nvswitches": 2})
    with pytest.raises(hostspec.SimConfigError, match="two simulated PCI devices at 0000:18:00.0"):
        pci.devices(host("h200-deepseek-v3", pci={"nvswitch_count": 1, "nvswitch_bus_ids": ["18:00.0"]}))


def test_command_line(make_sim):
    sim = make_sim("h200-deepseek-v3")
    done = sim.run("sglang_sim.lspci", ["-nn", "-s", "05:00.0"])
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout == "05:00.0 Bridge [0680]: NVIDIA Corporation GH100 [H100 NVSwitch] [10de:22a3] (rev a1)\n"
    assert sim.run("sglang_sim.lspci", ["--version"]).stdout == "lspci version 3.9.0\n"
    bad = sim.run("sglang_sim.lspci", ["-X"])
    assert (bad.returncode, bad.stdout) == (1, "") and bad.stderr.startswith("lspci: invalid option -- 'X'\n")
    os.remove(sim.host_path)
    gone = sim.run("sglang_sim.lspci", ["-n"])
    assert gone.returncode == 1 and "cannot read the simulated host file" in gone.stderr


# --- the same command lines through the real lspci, where pciutils is installed --------------------------------

def config_dump(devices: list) -> str:
    """``lspci -x`` text of the devices: the 64-byte header with ids, revision, prog-if and class, the rest 0."""
    text = []
    for device in devices:
        header = bytearray(64)
        header[0:4] = device.vendor.to_bytes(2, "little") + device.device.to_bytes(2, "little")
        header[8:12] = bytes([device.revision, device.prog_if]) + device.device_class.to_bytes(2, "little")
        text.append(device.slot(True) + " device\n")
        text += ["%02x: %s\n" % (offset, " ".join("%02x" % byte for byte in header[offset:offset + 16]))
                 for offset in range(0, 64, 16)]
        text.append("\n")
    return "".join(text)


def pci_ids() -> str:
    """An ID database (pci.ids format) holding the simulator's names."""
    lines = []
    for vendor, name in sorted(pci.VENDOR_NAMES.items()):
        lines.append("%04x  %s" % (vendor, name))
        lines += ["\t%04x  %s" % (device, text) for (owner, device), text in sorted(pci.DEVICE_NAMES.items())
                  if owner == vendor]
    for base, name in sorted(pci.BASE_CLASS_NAMES.items()):
        lines.append("C %02x  %s" % (base, name))
        lines += ["\t%02x  %s" % (code & 0xFF, text) for code, text in sorted(pci.CLASS_NAMES.items()) if code >> 8 == base]
    return "\n".join(lines) + "\n"


@pytest.fixture(name="real_lspci", scope="module")
def fixture_real_lspci():
    path = shutil.which("lspci", path="/usr/bin:/usr/sbin:/bin:/sbin")
    if not path:
        pytest.skip("pciutils is not installed (apt-get install pciutils): no real lspci to compare with")
    version = subprocess.run([path, "--version"], capture_output=True, text=True, check=False).stdout.split()[-1]
    return path, version


@pytest.mark.parametrize("profile", PROFILES)
def test_same_output_as_the_real_lspci(real_lspci, tmp_path, profile):
    path, version = real_lspci
    (tmp_path / "dump").write_text(config_dump(pci.devices(host(profile))), encoding="utf-8")
    (tmp_path / "pci.ids").write_text(pci_ids(), encoding="utf-8")
    for argv in COMMAND_LINES:
        # argv[0] "lspci", as when run from PATH: getopt's messages start with it.
        real = subprocess.run(["lspci", "-F", str(tmp_path / "dump"), "-i", str(tmp_path / "pci.ids")] + argv,
                              executable=path, capture_output=True, text=True, check=False, timeout=30)
        ours = run(profile, argv)
        assert (ours[0], ours[1]) == (real.returncode, real.stdout), argv
        if version == lspci.VERSION:    # the usage text is that version's
            # (its usage text names the ID database, here ours)
            assert ours[2] == real.stderr.replace(str(tmp_path / "pci.ids"), "/usr/share/misc/pci.ids.gz"), argv

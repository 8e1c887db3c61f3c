# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The simulated host's PCI bus: its GPUs and, on HGX baseboards, its NVSwitches, as lspci sees them.

Like the GPUs' memory, the PCI devices are a property of the host (host.json), so ``sglang-sim-lspci`` (installed
as ``lspci``) and ``sglang-sim-smi`` (installed as ``nvidia-smi``) agree: GPU ``i`` sits at nvidia-smi's
``pci.bus_id`` of GPU ``i`` (``00000000:18:00.0`` is lspci's ``18:00.0``). Only these devices are on the
simulated bus: no host bridges, NICs or disks.

Per GPU model (nvidia-smi's name): the PCI device id, class and revision the real card reports, and the name
pci.ids gives it. ``host.json``'s ``pci.nvswitch_count`` adds that many NVSwitches (class 0680, "Bridge") of the
GPU's HGX generation, at buses 05-08 as on an HGX H100/H200 baseboard; ``pci.gpu_device_id`` and
``pci.nvswitch_device_id`` name the ids of a model that is not in the table (lspci then prints "Device XXXX",
as it does for ids its pci.ids does not know).
"""
from __future__ import annotations

import re

from sglang_sim.hostspec import SimConfigError

NVIDIA = 0x10DE
VENDOR_NAMES = {NVIDIA: "NVIDIA Corporation"}
# pci.ids names (https://pci-ids.ucw.cz) of the devices the shipped profiles and the benchmark's hosts have.
DEVICE_NAMES = {
    (NVIDIA, 0x2330): "GH100 [H100 SXM5 80GB]",
    (NVIDIA, 0x2335): "GH100 [H200 SXM 141GB]",
    (NVIDIA, 0x27B8): "AD104GL [L4]",
    (NVIDIA, 0x2BB5): "GB202GL [RTX PRO 6000 Blackwell Server Edition]",
    (NVIDIA, 0x22A3): "GH100 [H100 NVSwitch]",
    (NVIDIA, 0x20B2): "GA100 [A100 SXM4 80GB]",
    (NVIDIA, 0x2901): "GB100 [B200]",
}
# Class names of pci.ids (subclass, else the base class).
CLASS_NAMES = {0x0300: "VGA compatible controller", 0x0302: "3D controller", 0x0680: "Bridge"}
BASE_CLASS_NAMES = {0x03: "Display controller", 0x06: "Bridge"}
GPU_CLASS = 0x0302          # data-centre GPUs are "3D controller"s (no VGA)
NVSWITCH_CLASS = 0x0680     # "Bridge" (other bridge device)
REVISION = 0xA1             # what every one of these reports ("(rev a1)")
# nvidia-smi's name of a GPU model -> its PCI device id.
GPU_DEVICE_IDS = {
    "NVIDIA H100 80GB HBM3": 0x2330,
    "NVIDIA H200": 0x2335,
    "NVIDIA L4": 0x27B8,
    "NVIDIA RTX PRO 6000 Blackwell Server Edition": 0x2BB5,
    "NVIDIA A100-SXM4-80GB": 0x20B2,
    "NVIDIA B200": 0x2901,
}
# GPU device id -> the NVSwitch of its HGX baseboard (third-generation NVSwitch on HGX H100/H200).
NVSWITCH_OF = {0x2330: 0x22A3, 0x2335: 0x22A3}
# Where an HGX H100/H200 baseboard's four NVSwitches sit; more switches take the next free buses.
NVSWITCH_BUSES = (0x05, 0x06, 0x07, 0x08)

_ADDRESS = re.compile(r"(?:(?P<domain>[0-9A-Fa-f]{1,8}):)?(?P<bus>[0-9A-Fa-f]{2}):(?P<dev>[0-9A-Fa-f]{2})[.](?P<func>[0-7])")


class PciDevice:
    """One function on the bus: address, ids, class and revision."""

    def __init__(self, address: tuple, vendor: int, device: int, device_class: int, revision: int = REVISION):
        self.domain, self.bus, self.dev, self.func = address
        self.vendor = vendor
        self.device = device
        self.device_class = device_class
        self.prog_if = 0
        self.revision = revision

    @property
    def address(self) -> tuple:
        """(domain, bus, device, function): lspci's sort order."""
        return (self.domain, self.bus, self.dev, self.func)

    def slot(self, domains: bool) -> str:
        """lspci's slot name: ``18:00.0``, with ``0000:`` in front when domains are shown."""
        text = "%02x:%02x.%d" % (self.bus, self.dev, self.func)
        return ("%04x:" % self.domain + text) if domains else text

    def class_name(self) -> str | None:
        """pci.ids name of the class, None when unknown."""
        return CLASS_NAMES.get(self.device_class) or BASE_CLASS_NAMES.get(self.device_class >> 8)

    def vendor_name(self) -> str | None:
        """pci.ids name of the vendor, None when unknown."""
        return VENDOR_NAMES.get(self.vendor)

    def device_name(self) -> str | None:
        """pci.ids name of the device, None when unknown."""
        return DEVICE_NAMES.get((self.vendor, self.device))


def parse_address(text: str, where: str) -> tuple:
    """(domain, bus, device, function) of ``00000000:18:00.0`` (nvidia-smi), ``0000:18:00.0`` or ``18:00.0``."""
    match = _ADDRESS.fullmatch(str(text).strip())
    if not match:
        raise SimConfigError("%s: %r is not a PCI address such as 00000000:18:00.0" % (where, text))
    return (int(match.group("domain") or "0", 16), int(match.group("bus"), 16), int(match.group("dev"), 16),
            int(match.group("func")))


def gpu_device_id(host) -> int:
    """The GPUs' PCI device id: host.json's pci.gpu_device_id, else the model's."""
    device = host.pci.get("gpu_device_id") or GPU_DEVICE_IDS.get(host.gpu_name)
    if device is None:
        raise SimConfigError("%s: no PCI device id is known for GPU %r (known: %s); set pci.gpu_device_id"
                             % (host.path, host.gpu_name, ", ".join(sorted(GPU_DEVICE_IDS))))
    return device


def nvswitch_device_id(host, gpu_device: int) -> int:
    """The NVSwitches' PCI device id: host.json's pci.nvswitch_device_id, else the one of the GPU's generation."""
    device = host.pci.get("nvswitch_device_id") or NVSWITCH_OF.get(gpu_device)
    if device is None:
        raise SimConfigError("%s: pci.nvswitch_count is %d but no NVSwitch is known for GPU %r (PCI id 10de:%04x, "
                             "not on an HGX baseboard with PCI-visible NVSwitches); set pci.nvswitch_device_id"
                             % (host.path, host.pci["nvswitch_count"], host.gpu_name, gpu_device))
    return device


def devices(host) -> list:
    """Every simulated PCI device of the host, in lspci's order (domain, bus, device, function)."""
    gpu_device = gpu_device_id(host)
    found = [PciDevice(parse_address(host.bus_id(index), "%s gpu %d bus id" % (host.path, index)), NVIDIA,
                       gpu_device, GPU_CLASS) for index in range(host.gpu_count)]
    count = host.pci["nvswitch_count"]
    if count:
        switch = nvswitch_device_id(host, gpu_device)
        given = host.pci["nvswitch_bus_ids"]
        if given and len(given) != count:
            raise SimConfigError("%s: pci.nvswitch_bus_ids lists %d addresses for pci.nvswitch_count %d"
                                 % (host.path, len(given), count))
        if given:
            addresses = [parse_address(bus, host.path + " pci.nvswitch_bus_ids") for bus in given]
        else:
            taken = {(device.domain, device.bus) for device in found}
            buses = [bus for bus in NVSWITCH_BUSES + tuple(range(0x09, 0x100)) if (0, bus) not in taken]
            addresses = [(0, bus, 0, 0) for bus in buses[:count]]
        found += [PciDevice(address, NVIDIA, switch, NVSWITCH_CLASS) for address in addresses]
    seen = set()
    for device in found:
        if device.address in seen:
            raise SimConfigError("%s: two simulated PCI devices at %s" % (host.path, device.slot(True)))
        seen.add(device.address)
    return sorted(found, key=lambda device: device.address)

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""``sglang-sim-lspci``, installed as ``lspci`` on simulated hosts: the simulated PCI devices as lspci prints them.

The devices are the host's (pci.py, from host.json): its GPUs and, on HGX profiles, its NVSwitches. The output is
that of pciutils 3.9.0 (Debian 12's lspci) for them, byte for byte:

    lspci -n              18:00.0 0302: 10de:2335 (rev a1)
    lspci -nn             18:00.0 3D controller [0302]: NVIDIA Corporation GH100 [H200 SXM 141GB] [10de:2335] (rev a1)
    lspci                 18:00.0 3D controller: NVIDIA Corporation GH100 [H200 SXM 141GB] (rev a1)

with lspci's option parsing (clustered flags, ``-d10de:``, ``-nn``), device selection (``-d
[<vendor>]:[<device>][:<class>[:<prog-if>]]`` with ``*`` and, in the class, ``x`` wildcards; ``-s
[[[[<domain>]:]<bus>]:][<slot>][.[<func>]]``), ``-D`` and the automatic domain column, and lspci's errors: an unknown
option or a missing argument prints ``lspci: invalid option -- 'Z'`` (or ``option requires an argument``) and the
usage text on stderr, exit 1; a bad ``-d``/``-s`` prints ``lspci: -d: Invalid vendor ID``, exit 1.

lspci options that show what is not simulated (``-v``, ``-k``, ``-x``, ``-t``, ``-m``, ``-P``, ``-M``, ``-Q``, ``-i``,
``-p``, ``-A``, ``-O``, ``-G``, ``-H``, ``-F``) are refused with a message that says so (exit 1) rather than answered
with invented config space, drivers or topology. ``-b`` and ``-q`` change nothing for these devices and are accepted.
"""
from __future__ import annotations

import sys

from sglang_sim import hostspec, pci
from sglang_sim.hostspec import SimConfigError

VERSION = "3.9.0"
# lspci 3.9.0's getopt string: "nvbxs:d:tPi:mgp:qkMDQ" plus the generic "A:GO:", "H:" (Intel conf) and "F:" (dump).
OPTIONS = "nvbxs:d:tPi:mgp:qkMDQA:GO:H:F:"
NOT_SIMULATED = "vxtPimpkMQAGOHF"
HELP = (
    "Usage: lspci [<switches>]\n"
    "\n"
    "Basic display modes:\n"
    "-mm\t\tProduce machine-readable output (single -m for an obsolete format)\n"
    "-t\t\tShow bus tree\n"
    "\n"
    "Display options:\n"
    "-v\t\tBe verbose (-vv or -vvv for higher verbosity)\n"
    "-k\t\tShow kernel drivers handling each device\n"
    "-x\t\tShow hex-dump of the standard part of the config space\n"
    "-xxx\t\tShow hex-dump of the whole config space (dangerous; root only)\n"
    "-xxxx\t\tShow hex-dump of the 4096-byte extended config space (root only)\n"
    "-b\t\tBus-centric view (addresses and IRQ's as seen by the bus)\n"
    "-D\t\tAlways show domain numbers\n"
    "-P\t\tDisplay bridge path in addition to bus and device number\n"
    "-PP\t\tDisplay bus path in addition to bus and device number\n"
    "\n"
    "Resolving of device ID's to names:\n"
    "-n\t\tShow numeric ID's\n"
    "-nn\t\tShow both textual and numeric ID's (names & numbers)\n"
    "-q\t\tQuery the PCI ID database for unknown ID's via DNS\n"
    "-qq\t\tAs above, but re-query locally cached entries\n"
    "-Q\t\tQuery the PCI ID database for all ID's via DNS\n"
    "\n"
    "Selection of devices:\n"
    "-s [[[[<domain>]:]<bus>]:][<slot>][.[<func>]]\tShow only devices in selected slots\n"
    "-d [<vendor>]:[<device>][:<class>]\t\tShow only devices with specified ID's\n"
    "\n"
    "Other options:\n"
    "-i <file>\tUse specified ID database instead of /usr/share/misc/pci.ids.gz\n"
    "-p <file>\tLook up kernel modules in a given file instead of default modules.pcimap\n"
    "-M\t\tEnable `bus mapping' mode (dangerous; root only)\n"
    "\n"
    "PCI access options:\n"
    "-A <method>\tUse the specified PCI access method (see `-A help' for a list)\n"
    "-O <par>=<val>\tSet PCI access parameter (see `-O help' for a list)\n"
    "-G\t\tEnable PCI access debugging\n"
    "-H <mode>\tUse direct hardware access (<mode> = 1 or 2)\n"
    "-F <file>\tRead PCI configuration dump from a given file\n"
)
BUF_SIZE = 64


class LspciError(Exception):
    """What lspci prints on stderr before exiting with status 1; ``usage`` adds the usage text."""

    def __init__(self, message: str | None, usage: bool = False):
        super().__init__(message)
        self.message = message
        self.usage = usage


class Filter:
    """pciutils' struct pci_filter: -1 is "any"; set by -s and -d, in the order given (lib/filter.c)."""

    def __init__(self):
        self.domain = self.bus = self.slot = self.func = -1
        self.vendor = self.device = -1
        self.device_class = -1
        self.device_class_mask = 0xFFFFFFFF
        self.prog_if = -1

    def parse_slot(self, text: str) -> str | None:
        """-s [[[[<domain>]:]<bus>]:][<slot>][.[<func>]]; an error message or None."""
        fields, error = _split_to_fields(text, ":", 3, True)
        if error:
            return error
        position = 0
        if fields[2] is not None:
            ok, self.domain, _mask = _parse_hex_field(fields[0], self.domain, 0x7FFFFFFF)
            if not ok:
                return "Invalid domain number"
            position += 1
        if fields[position + 1] is not None:
            ok, self.bus, _mask = _parse_hex_field(fields[position], self.bus, 0xFF)
            if not ok:
                return "Invalid bus number"
            position += 1
        device = fields[position]
        if _field_defined(device):
            parts, error = _split_to_fields(device, ".", 2, False)
            if error:
                return "Invalid slot/function number"
            ok, self.slot, _mask = _parse_hex_field(parts[0], self.slot, 0x1F)
            if not ok:
                return "Invalid slot number"
            ok, self.func, _mask = _parse_hex_field(parts[1], self.func, 7)
            if not ok:
                return "Invalid function number"
        return None

    def parse_id(self, text: str) -> str | None:
        """-d [<vendor>]:[<device>][:<class>[:<prog-if>]]; an error message or None."""
        fields, error = _split_to_fields(text, ":", 4, True)
        if error:
            return error
        if fields[1] is None:
            return "At least two fields must be given"
        ok, self.vendor, _mask = _parse_hex_field(fields[0], self.vendor, 0xFFFF)
        if not ok:
            return "Invalid vendor ID"
        ok, self.device, _mask = _parse_hex_field(fields[1], self.device, 0xFFFF)
        if not ok:
            return "Invalid device ID"
        ok, self.device_class, mask = _parse_hex_field(fields[2], self.device_class, 0xFFFF, wildcards=True)
        if not ok:
            return "Invalid class code"
        if mask is not None:
            self.device_class_mask = mask
        ok, self.prog_if, _mask = _parse_hex_field(fields[3], self.prog_if, 0xFF)
        if not ok:
            return "Invalid programming interface code"
        return None

    def match(self, device) -> bool:
        """pci_filter_match()."""
        for wanted, value in ((self.domain, device.domain), (self.bus, device.bus), (self.slot, device.dev),
                              (self.func, device.func), (self.device, device.device), (self.vendor, device.vendor)):
            if wanted >= 0 and wanted != value:
                return False
        if self.device_class >= 0 and (self.device_class ^ device.device_class) & self.device_class_mask:
            return False
        return not (self.prog_if >= 0 and self.prog_if != device.prog_if)


def _split_to_fields(text: str, separator: str, count: int, bounded: bool) -> tuple:
    """split_to_fields(): (fields padded with None to ``count``, error or None)."""
    if bounded and len(text) >= BUF_SIZE:
        return None, "Expression too long"
    fields = text.split(separator)
    if len(fields) > count:
        return None, "Too many fields"
    return fields + [None] * (count - len(fields)), None


def _field_defined(field: str | None) -> bool:
    return bool(field) and field != "*"


def _parse_hex_field(field: str | None, current: int, maximum: int, wildcards: bool = False) -> tuple:
    """parse_hex_field(): (ok, value, mask); an undefined field keeps ``current`` (and mask None)."""
    if not _field_defined(field):
        return True, current, None
    value, bound, mask = 0, 0, 0xFFFFFFFF
    for char in field:
        if char in "xX" and wildcards:
            value, bound, mask = value << 4, (bound << 4) | 1, (mask << 4) & 0xFFFFFFFF
        elif char in "0123456789abcdefABCDEF":
            digit = int(char, 16)
            value, bound, mask = (value << 4) | digit, (bound << 4) | digit, ((mask << 4) | 0xF) & 0xFFFFFFFF
        else:
            return False, current, None
        if bound > maximum:
            return False, current, None
    return True, value, mask


def _getopt(argv: list):
    """glibc getopt() over OPTIONS: yields (option, argument); non-options are collected at the end (permuted)."""
    rest = []
    position = 0
    while position < len(argv):
        arg = argv[position]
        if arg == "--":
            rest += argv[position + 1:]
            break
        if not arg.startswith("-") or arg == "-":
            rest.append(arg)
            position += 1
            continue
        index = 1
        while index < len(arg):
            char = arg[index]
            spec = OPTIONS.find(char)
            if char == ":" or spec < 0:
                raise LspciError("lspci: invalid option -- '%s'" % char, usage=True)
            if OPTIONS[spec + 1:spec + 2] == ":":
                if index + 1 < len(arg):
                    value = arg[index + 1:]
                elif position + 1 < len(argv):
                    position += 1
                    value = argv[position]
                else:
                    raise LspciError("lspci: option requires an argument -- '%s'" % char, usage=True)
                yield char, value
                break
            yield char, None
            index += 1
        position += 1
    if rest:
        raise LspciError(None, usage=True)   # lspci takes no arguments: the usage text alone


def _name_pair(device, numeric: int) -> str:
    """pci_lookup_name(VENDOR | DEVICE) at -n level ``numeric``."""
    ids = "%04x:%04x" % (device.vendor, device.device)
    if numeric == 1:
        return ids
    vendor, name = device.vendor_name(), device.device_name()
    if numeric >= 2:
        if vendor and name:
            return "%s %s [%s]" % (vendor, name, ids)
        return "%s Device [%s]" % (vendor, ids) if vendor else "Device [%s]" % ids
    if vendor and name:
        return "%s %s" % (vendor, name)
    return "%s Device %04x" % (vendor, device.device) if vendor else "Device %s" % ids


def _class_name(device, numeric: int) -> str:
    """pci_lookup_name(CLASS) at -n level ``numeric``."""
    code = "%04x" % device.device_class
    if numeric == 1:
        return code
    name = device.class_name()
    if numeric >= 2:
        return "%s [%s]" % (name, code) if name else "Class [%s]" % code
    return name or "Class %s" % code


def render(devices: list, argv: list) -> str:
    """lspci's standard output for these devices and this command line; raises LspciError."""
    numeric, domains, selection = 0, 0, Filter()
    for option, value in _getopt(argv):
        if option == "n":
            numeric += 1
        elif option == "D":
            domains = 2
        elif option in "sd":
            error = selection.parse_slot(value) if option == "s" else selection.parse_id(value)
            if error:
                raise LspciError("lspci: -%s: %s" % (option, error))
        elif option in NOT_SIMULATED:
            raise LspciError("sglang-sim-lspci: option -%s is not simulated (the simulated PCI bus has vendor, device, "
                             "class and revision only): use -n, -nn, -D, -d or -s" % option)
        elif option not in "bq":
            raise LspciError(None, usage=True)     # -g: in lspci's getopt string, handled by no case
    if any(device.domain for device in devices):
        domains = max(domains, 1)
    lines = []
    for device in devices:
        if not selection.match(device):
            continue
        line = "%s %s: %s" % (device.slot(bool(domains)), _class_name(device, numeric), _name_pair(device, numeric))
        if device.revision:
            line += " (rev %02x)" % device.revision
        lines.append(line + "\n")
    return "".join(lines)


def main(argv=None) -> int:
    """lspci's command line for the simulated devices."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv == ["--version"]:
        sys.stdout.write("lspci version %s\n" % VERSION)
        return 0
    try:
        found = pci.devices(hostspec.load_host())
    except SimConfigError as exc:
        sys.stderr.write("lspci: Cannot find any working access method.\nsglang-sim-lspci: %s\n" % exc)
        return 1
    try:
        text = render(found, argv)
    except LspciError as exc:
        sys.stderr.write((exc.message + "\n" if exc.message else "") + (HELP if exc.usage else ""))
        return 1
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

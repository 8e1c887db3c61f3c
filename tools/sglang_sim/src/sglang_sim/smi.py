# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""``sglang-sim-smi``, installed as ``nvidia-smi`` on simulated hosts: the simulated GPUs as nvidia-smi prints them.

Reads host.json and the live state files (gpu_state.py). Output is byte-for-byte the shape of a real R580
nvidia-smi: ``--query-gpu=<fields> --format=csv[,noheader][,nounits]`` (an unknown field prints ``Field "x" is
not a valid field to query.`` and exits 2), ``--query-compute-apps=...``, ``-L``, ``-i``, and the plain table
(tests/fixtures/nvidia_smi/table_h200_580_device.txt is a real one).

Per GPU: ``used`` = the simulated servers' memory on it (their state files, if their processes live) plus another
process's ``gpu_occupied_mib`` fault, listed as its own compute process (pid 90000 + index), plus, while a server
loads its weights and sizes its pools, the ``load_contention_mib`` neighbour it publishes (pid 91000 + index; not
listed, its memory only in ``used``, on the GPUs of ``load_contention_unlisted``); ``free = total - reserved - used``.
"""
from __future__ import annotations

import sys
import time

from sglang_sim import gpu_state, hostspec
from sglang_sim.hostspec import MIB, SimConfigError

OTHER_PROCESS_PID = 90000


class Gpu:
    """One simulated GPU as nvidia-smi reports it (MiB)."""

    def __init__(self, host, index: int, servers: list):
        self.host = host
        self.index = index
        # [{"used_bytes", "process_name", "pid"}, ...] of live servers and their load_contention neighbours
        self.servers = servers
        server_mib = sum(int(round(server.get("used_bytes", 0) / MIB)) for server in servers)
        self.other_mib = host.occupied_mib.get(index, 0)
        self.total = host.memory_total_mib
        self.reserved = host.memory_reserved_mib
        self.used = min(server_mib + self.other_mib, self.total - self.reserved)
        self.free = self.total - self.reserved - self.used
        self.server_mib = server_mib
        self.busy = any(server.get("used_bytes", 0) > 0 and not server.get("neighbour") for server in servers)

    def processes(self) -> list:
        """(pid, name, MiB) of the compute processes on this GPU."""
        rows = []
        if self.other_mib:
            rows.append((OTHER_PROCESS_PID + self.index, "/usr/bin/python3", self.other_mib))
        for server in self.servers:
            mib = int(round(server.get("used_bytes", 0) / MIB))
            if mib and not server.get("unlisted"):    # another container's process: counted in used, not listed
                rows.append((server["pid"], server.get("process_name", "python3"), mib))
        return rows

    @property
    def power_draw(self) -> float:
        """Watts: idle about a tenth of the limit, more with a model loaded."""
        return self.host.power_limit_w * (0.17 if self.busy else 0.1) + self.index * 0.37

    @property
    def mig_capable(self) -> bool:
        """Data-centre GPUs (H100, H200, A100, B200, RTX PRO 6000 server) have MIG; L4/A10-class do not."""
        name = self.host.gpu_name
        return any(key in name for key in ("H100", "H200", "H800", "A100", "A30", "B200", "B100", "GB200",
                                           "RTX PRO 6000"))


def _mib(value: int) -> tuple:
    return "%d MiB" % value, str(value)


def _watts(value: float) -> tuple:
    return "%.2f W" % value, "%.2f" % value


def _plain(value) -> tuple:
    return str(value), str(value)


# field -> (header, value function returning (with units, without units))
FIELDS = {
    "timestamp": ("timestamp", lambda g: _plain(time.strftime("%Y/%m/%d %H:%M:%S.000"))),
    "driver_version": ("driver_version", lambda g: _plain(g.host.driver_version)),
    "count": ("count", lambda g: _plain(g.host.gpu_count)),
    "name": ("name", lambda g: _plain(g.host.gpu_name)),
    "gpu_name": ("name", lambda g: _plain(g.host.gpu_name)),
    "index": ("index", lambda g: _plain(g.index)),
    "uuid": ("uuid", lambda g: _plain(g.host.uuid(g.index))),
    "gpu_uuid": ("uuid", lambda g: _plain(g.host.uuid(g.index))),
    "pci.bus_id": ("pci.bus_id", lambda g: _plain(g.host.bus_id(g.index))),
    "gpu_bus_id": ("pci.bus_id", lambda g: _plain(g.host.bus_id(g.index))),
    "persistence_mode": ("persistence_mode", lambda g: _plain("Enabled")),
    "compute_mode": ("compute_mode", lambda g: _plain("Default")),
    "pstate": ("pstate", lambda g: _plain("P0")),
    "mig.mode.current": ("mig.mode.current", lambda g: _plain("Disabled" if g.mig_capable else "[N/A]")),
    "mig.mode.pending": ("mig.mode.pending", lambda g: _plain("Disabled" if g.mig_capable else "[N/A]")),
    "memory.total": ("memory.total [MiB]", lambda g: _mib(g.total)),
    "memory.reserved": ("memory.reserved [MiB]", lambda g: _mib(g.reserved)),
    "memory.used": ("memory.used [MiB]", lambda g: _mib(g.used)),
    "memory.free": ("memory.free [MiB]", lambda g: _mib(g.free)),
    "utilization.gpu": ("utilization.gpu [%]", lambda g: ("0 %", "0")),
    "utilization.memory": ("utilization.memory [%]", lambda g: ("0 %", "0")),
    "temperature.gpu": ("temperature.gpu", lambda g: _plain(31 + g.index % 4)),
    "fan.speed": ("fan.speed [%]", lambda g: ("[N/A]", "[N/A]")),
    "power.draw": ("power.draw [W]", lambda g: _watts(g.power_draw)),
    "power.limit": ("power.limit [W]", lambda g: _watts(g.host.power_limit_w)),
    "ecc.mode.current": ("ecc.mode.current", lambda g: _plain("Enabled")),
}
APP_FIELDS = {
    "timestamp": ("timestamp", lambda g, p: _plain(time.strftime("%Y/%m/%d %H:%M:%S.000"))),
    "gpu_name": ("gpu_name", lambda g, p: _plain(g.host.gpu_name)),
    "gpu_bus_id": ("gpu_bus_id", lambda g, p: _plain(g.host.bus_id(g.index))),
    "gpu_serial": ("gpu_serial", lambda g, p: _plain("1654%09d" % g.index)),
    "gpu_uuid": ("gpu_uuid", lambda g, p: _plain(g.host.uuid(g.index))),
    "pid": ("pid", lambda g, p: _plain(p[0])),
    "process_name": ("process_name", lambda g, p: _plain(p[1])),
    "name": ("process_name", lambda g, p: _plain(p[1])),
    "used_memory": ("used_gpu_memory [MiB]", lambda g, p: _mib(p[2])),
    "used_gpu_memory": ("used_gpu_memory [MiB]", lambda g, p: _mib(p[2])),
}


def gpus(host, only=None) -> list:
    """The host's GPUs with the live servers' memory on them."""
    state = gpu_state.read_state(hostspec.state_dir())
    return [Gpu(host, index, state.get(index, [])) for index in range(host.gpu_count)
            if only is None or index in only]


def query(fields: list, rows: list, table: dict, options: set) -> tuple:
    """(exit code, text) of a --query-* with --format options {csv, noheader, nounits}."""
    for field in fields:
        if field not in table:
            return 2, 'Field "%s" is not a valid field to query.\n\n' % field
    lines = []
    if "noheader" not in options:
        lines.append(", ".join(table[field][0] for field in fields))
    index = 1 if "nounits" in options else 0
    for row in rows:
        lines.append(", ".join(table[field][1](*row)[index] for field in fields))
    return 0, "".join(line + "\n" for line in lines)


def _name(name: str) -> str:
    return name if len(name) <= 27 else name[:24] + "..."


def table(host, devices: list) -> str:
    """The plain ``nvidia-smi`` table (R580 layout)."""
    rule = "+-----------------------------------------+------------------------+----------------------+"
    lines = [time.asctime() + "       ",
             "+" + "-" * 89 + "+",
             "| NVIDIA-SMI %-22s Driver Version: %-14s CUDA Version: %-9s|" % (
                 host.driver_version, host.driver_version, host.cuda_version),
             rule,
             "| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |",
             "| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |",
             "|                                         |                        |               MIG M. |",
             "|=========================================+========================+======================|"]
    for gpu in devices:
        lines.append("| %3d  %-27s    %-3s |   %s Off | %20s |" % (
            gpu.index, _name(host.gpu_name), "On", host.bus_id(gpu.index), "0"))
        lines.append("| N/A   %2dC    P0 %15s / %4dW | %7dMiB / %6dMiB | %6d%%      Default |" % (
            31 + gpu.index % 4, "%dW" % gpu.power_draw, host.power_limit_w, gpu.used, gpu.total, 0))
        lines.append("|                                         |                        | %20s |" % (
            "Disabled" if gpu.mig_capable else "N/A"))
        lines.append(rule)
    lines += ["", "+" + "-" * 89 + "+",
              "| Processes:%s|" % (" " * 78),
              "|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |",
              "|        ID   ID                                                               Usage      |",
              "|" + "=" * 89 + "|"]
    processes = [(gpu, process) for gpu in devices for process in gpu.processes()]
    if not processes:
        lines.append("|  No running processes found%s|" % (" " * 61))
    for gpu, (pid, name, mib) in processes:
        name = name if len(name) <= 32 else "..." + name[-29:]
        lines.append("| %4d   N/A  N/A %15d      C   %-36s %6dMiB |" % (gpu.index, pid, name, mib))
    lines.append("+" + "-" * 89 + "+")
    return "".join(line + "\n" for line in lines)


def main(argv=None) -> int:
    """nvidia-smi's command line, for the options the collection and people use."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        host = hostspec.load_host()
    except SimConfigError as exc:
        sys.stdout.write("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure "
                         "that the latest NVIDIA driver is installed and running.\n\n")
        sys.stderr.write("sglang-sim-smi: %s\n" % exc)
        return 9
    options, gpu_query, app_query, only, listing = set(), None, None, None, False
    position = 0
    while position < len(argv):
        arg = argv[position]
        if arg.startswith("--query-gpu="):
            gpu_query = arg.split("=", 1)[1]
        elif arg.startswith("--query-compute-apps="):
            app_query = arg.split("=", 1)[1]
        elif arg.startswith("--format="):
            options = set(part.strip() for part in arg.split("=", 1)[1].split(","))
        elif arg in ("-L", "--list-gpus"):
            listing = True
        elif arg in ("-i", "--id") and position + 1 < len(argv):
            position += 1
            only = {int(part) for part in argv[position].split(",")}
        elif arg.startswith("--id="):
            only = {int(part) for part in arg.split("=", 1)[1].split(",")}
        else:
            sys.stdout.write("Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n\n")
            return 2
        position += 1
    devices = gpus(host, only)
    if listing:
        sys.stdout.write("".join("GPU %d: %s (UUID: %s)\n" % (gpu.index, host.gpu_name, host.uuid(gpu.index))
                                 for gpu in devices))
        return 0
    if gpu_query is not None or app_query is not None:
        if "csv" not in options:
            sys.stdout.write("Missing or invalid --format argument. Please run 'nvidia-smi -h' for help.\n\n")
            return 2
        if gpu_query is not None:
            code, text = query(gpu_query.split(","), [(gpu,) for gpu in devices], FIELDS, options)
        else:
            rows = [(gpu, process) for gpu in devices for process in gpu.processes()]
            code, text = query(app_query.split(","), rows, APP_FIELDS, options)
        sys.stdout.write(text)
        return code
    sys.stdout.write(table(host, devices))
    return 0


if __name__ == "__main__":
    sys.exit(main())

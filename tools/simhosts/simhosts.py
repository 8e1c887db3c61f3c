# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Simulated GPU hosts: systemd-nspawn containers in their own network namespaces, reached over ssh.

    python3 tools/simhosts/simhosts.py up --count 4 --profile field [--wheelhouse DIR] [--prefix sim]
    python3 tools/simhosts/simhosts.py up --count 2 --profile h200-deepseek-v3,field ...    # one profile per host
    python3 tools/simhosts/simhosts.py down [--prefix sim | --all] [--purge]
    python3 tools/simhosts/simhosts.py status
    python3 tools/simhosts/simhosts.py ssh sim1 [COMMAND...]

Everything it creates is written into a state file before it is created, so `down` removes what a crashed
`up` left behind and never touches anything else. Python standard library only; run as root.
See tools/simhosts/README.md.
"""
from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import ipaddress
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
STATE_DIR = Path(os.environ.get("SIM_STATE_DIR", "/var/lib/llmserve-sim"))
CACHE_DIR = Path(os.environ.get("SIM_CACHE_DIR", "/var/cache/llmserve-sim"))
DEFAULT_PREFIX = "sim"
DEFAULT_INVENTORY = REPO / "inventories" / "sim" / "hosts.yml"

# What the hosts carry. Changing the list (or LAYOUT) changes the cache key, so the next `up` builds a new tree.
PACKAGES = ("python3", "python3-venv", "python3-pip", "systemd", "systemd-sysv", "dbus", "openssh-server",
            "iproute2", "procps", "sudo", "acl", "ca-certificates", "python3-apt",
            # The headroom watch reads /metrics with it (role sglang_service, sglang_service_kv_watch).
            "python3-prometheus-client")
LAYOUT = "4"  # bump when customize_rootfs() changes
# Controller commands and the Debian packages that provide them.
CONTROLLER_TOOLS = {"systemd-nspawn": "systemd-container", "debootstrap": "debootstrap", "ssh": "openssh-client",
                    "ssh-keygen": "openssh-client", "ip": "iproute2"}

NET = ipaddress.ip_network("198.18.0.0/15")  # RFC 2544 benchmarking range: never routed anywhere real
MAX_SLOT = 511  # slot s uses 198.18.0.0 + 256*s: a /30 whose .1 is the controller and .2 the host
SIM_VENV = "/opt/sglang-sim"
SIM_WHEELHOUSE_IN_HOST = "/var/cache/sglang-sim/wheelhouse"
SIM_LAYER_LAYOUT = "3"  # bump when ensure_sim_layer() puts other things into the layer
# The simulator's commands that stand in for the real ones (the GPUs' tools), linked into /usr/local/bin.
SIM_COMMANDS = {"nvidia-smi": "sglang-sim-smi", "lspci": "sglang-sim-lspci"}
SIM_TMPFILES = "/etc/tmpfiles.d/sglang-sim.conf"
BOOT_TIMEOUT = 60.0
STOP_TIMEOUT = 15.0
PRUNE_AFTER = 7 * 86400  # cached layers no host has used for a week are removed
# What the inventory tells Ansible; the tool itself adds BatchMode and a connect timeout.
INVENTORY_SSH_ARGS = "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR"
SSH_OPTS = tuple(INVENTORY_SSH_ARGS.split()) + ("-o", "BatchMode=yes", "-o", "ConnectTimeout=3")


class SimError(Exception):
    """A failure with a message meant for the person who ran the command."""


def log(msg: str) -> None:
    print(f"simhosts: {msg}", file=sys.stderr, flush=True)


def run(cmd: list[str], check: bool = True, capture: bool = True, timeout: float | None = None,
        **kwargs) -> subprocess.CompletedProcess:
    """Run a command; on failure raise SimError carrying its output."""
    try:
        proc = subprocess.run(cmd, check=False, text=True, timeout=timeout,
                              stdout=subprocess.PIPE if capture else None,
                              stderr=subprocess.STDOUT if capture else None, **kwargs)
    except subprocess.TimeoutExpired as exc:
        raise SimError(f"timed out after {timeout:.0f} s: {' '.join(cmd)}") from exc
    if check and proc.returncode != 0:
        out = (proc.stdout or "").strip()
        raise SimError(f"command failed (rc={proc.returncode}): {' '.join(cmd)}" + (f"\n{out[-4000:]}" if out else ""))
    return proc


@contextlib.contextmanager
def flock(path: Path):
    """An exclusive lock held for the duration of the block (blocks other simhosts runs, never deadlocks a crash)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"waiting for another simhosts run (lock {path})")
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# --- controller prerequisites ---------------------------------------------------------------------------

def ensure_controller_tools() -> None:
    missing = sorted({pkg for tool, pkg in CONTROLLER_TOOLS.items() if shutil.which(tool) is None})
    if not missing:
        return
    log(f"installing {' '.join(missing)} (apt)")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    run(["apt-get", "update", "-qq"], env=env)
    run(["apt-get", "install", "-y", "-qq", "--no-install-recommends"] + missing, env=env)


def debian_mirror_and_suite() -> tuple[str, str]:
    """The controller's own Debian mirror and release: the containers are built from what it uses."""
    suite = ""
    with contextlib.suppress(OSError):
        for line in Path("/etc/os-release").read_text(encoding="utf-8").splitlines():
            if line.startswith("VERSION_CODENAME="):
                suite = line.split("=", 1)[1].strip().strip('"')
    suite = os.environ.get("SIM_SUITE") or suite or "bookworm"
    if os.environ.get("SIM_MIRROR"):
        return os.environ["SIM_MIRROR"], suite
    deb822 = Path("/etc/apt/sources.list.d/debian.sources")
    if deb822.exists():
        for stanza in re.split(r"\n\s*\n", deb822.read_text(encoding="utf-8")):
            fields = dict(re.findall(r"^([A-Za-z-]+):\s*(.*)$", stanza, re.M))
            if suite in fields.get("Suites", "").split() and fields.get("URIs"):
                return fields["URIs"].split()[0], suite
    for listing in [Path("/etc/apt/sources.list")] + sorted(Path("/etc/apt/sources.list.d").glob("*.list")):
        with contextlib.suppress(OSError):
            for line in listing.read_text(encoding="utf-8").splitlines():
                words = re.sub(r"\[[^]]*\]", "", line).split()
                if len(words) >= 3 and words[0] == "deb" and words[2] == suite:
                    return words[1], suite
    return "http://deb.debian.org/debian", suite


# --- the root filesystem, built once ------------------------------------------------------------------

def rootfs_key(suite: str) -> str:
    return hashlib.sha256(f"{suite}|{','.join(sorted(PACKAGES))}|{LAYOUT}".encode()).hexdigest()[:12]


def tar_create(tree: Path, tarball: Path, members: list[str] | None = None) -> None:
    tmp = tarball.with_name(tarball.name + ".tmp")
    run(["tar", "--numeric-owner", "--xattrs", "--xattrs-include=*", "-C", str(tree), "-cf", str(tmp)]
        + (members or ["."]))
    os.replace(tmp, tarball)


def tar_extract(tarball: Path, tree: Path) -> None:
    run(["tar", "--numeric-owner", "--xattrs", "--xattrs-include=*", "-xpf", str(tarball), "-C", str(tree)])


def mask(tree: Path, *units: str) -> None:
    for unit in units:
        link = tree / "etc/systemd/system" / unit
        with contextlib.suppress(FileNotFoundError):
            link.unlink()
        link.symlink_to("/dev/null")


def customize_rootfs(tree: Path) -> None:
    """What every host shares: sshd for key-only root login, a volatile journal, no timers that want a network."""
    for key in (tree / "etc/ssh").glob("ssh_host_*"):
        key.unlink()  # generated per host
    (tree / "etc/ssh/sshd_config.d").mkdir(parents=True, exist_ok=True)
    (tree / "etc/ssh/sshd_config.d/llmserve-sim.conf").write_text(
        "# llmserve-sim: key-only root login, one host key generated per host.\n"
        "HostKey /etc/ssh/ssh_host_ed25519_key\nPermitRootLogin prohibit-password\nPasswordAuthentication no\n"
        "UseDNS no\n", encoding="utf-8")
    (tree / "etc/systemd/journald.conf.d").mkdir(parents=True, exist_ok=True)
    (tree / "etc/systemd/journald.conf.d/llmserve-sim.conf").write_text(
        "[Journal]\nStorage=volatile\nRuntimeMaxUse=64M\n", encoding="utf-8")
    mask(tree, "apt-daily.timer", "apt-daily-upgrade.timer", "dpkg-db-backup.timer", "e2scrub_all.timer",
         "fstrim.timer", "console-getty.service", "systemd-networkd-wait-online.service",
         "systemd-remount-fs.service")  # nspawn mounts the root; remounting it failed now and then
    (tree / "etc/fstab").write_text("# llmserve-sim: systemd-nspawn mounts everything\n", encoding="utf-8")
    (tree / "etc/machine-id").write_text("", encoding="utf-8")  # written per host
    for pattern in ("var/cache/apt/archives/*.deb", "var/lib/apt/lists/*_*", "var/log/*.log"):
        for path in tree.glob(pattern):
            path.unlink()


def ensure_rootfs() -> Path:
    """The cached tarball of a fresh debootstrap tree; built under a lock if it is not there yet."""
    mirror, suite = debian_mirror_and_suite()
    tarball = CACHE_DIR / f"rootfs-{suite}-{rootfs_key(suite)}.tar"
    if tarball.exists():
        return tarball
    with flock(CACHE_DIR / ".build.lock"):
        if tarball.exists():
            return tarball
        build = CACHE_DIR / f"build-{tarball.stem}"
        remove_tree(build)
        log(f"debootstrap {suite} from {mirror} into {build} (once; about 80 s)")
        started = time.monotonic()
        run(["debootstrap", "--variant=minbase", "--include=" + ",".join(PACKAGES), suite, str(build), mirror],
            timeout=1800)
        customize_rootfs(build)
        tar_create(build, tarball)
        remove_tree(build)
        log(f"cached {tarball} ({tarball.stat().st_size >> 20} MiB) in {time.monotonic() - started:.0f} s")
    return tarball


def ensure_lower(tarball: Path) -> Path:
    """The tarball unpacked once into CACHE_DIR/layers/: the read-only lower layer every host's overlay shares.

    Unpacking ~14,000 files takes 5-13 s per copy on this kind of disk; an overlay mount takes milliseconds.
    """
    tree = CACHE_DIR / "layers" / tarball.stem
    if tree.is_dir():
        return tree
    with flock(CACHE_DIR / ".build.lock"):
        if not tree.is_dir():
            tmp = tree.with_name(tree.name + ".tmp")
            remove_tree(tmp)
            tmp.mkdir(parents=True)
            tar_extract(tarball, tmp)
            os.replace(tmp, tree)
    return tree


def mount_overlay(lowers: list[Path], home: Path) -> Path:
    """HOME/root = the lower layers (first on top) plus HOME/upper, where everything the host writes lands."""
    root, upper, work = home / "root", home / "upper", home / "work"
    for path in (root, upper, work):
        path.mkdir(parents=True, exist_ok=True)
    lowerdir = ":".join(str(p) for p in lowers)
    run(["mount", "-t", "overlay", "llmserve-sim", "-o", f"lowerdir={lowerdir},upperdir={upper},workdir={work}", str(root)])
    return root


def unmount_under(path: Path) -> None:
    for point in mounts_under(path):
        if run(["umount", point], check=False).returncode != 0:
            run(["umount", "-l", point], check=False)


def remove_tree(path: Path) -> None:
    """rm -rf that first unmounts what is mounted below (a killed debootstrap leaves /proc, /sys, /dev there)."""
    unmount_under(path)
    left = mounts_under(path)
    if left:
        raise SimError(f"still mounted under {path}: {left}; not removing it")
    shutil.rmtree(path, ignore_errors=True)
    if path.exists():
        raise SimError(f"could not remove {path}")


def wheelhouse_key(wheelhouse: Path) -> str:
    digest = hashlib.sha256(f"sim-layer-{SIM_LAYER_LAYOUT}".encode())
    for wheel in sorted(wheelhouse.glob("*.whl")):
        digest.update(wheel.name.encode() + b"\0" + hashlib.sha256(wheel.read_bytes()).digest())
    return digest.hexdigest()[:12]


def ensure_sim_layer(base: Path, wheelhouse: Path) -> Path:
    """A small layer over the base tree: the simulator's venv, its wheelhouse, nvidia-smi and lspci.

    Built once per (base tree, wheelhouse content) by installing the wheels inside a container of the tree. The
    stand-in ``sglang`` distribution is not in the layer: each host gets the version of its profile (PROFILE_INSTALL).
    """
    if not wheelhouse.is_dir():
        raise SimError(f"SIM_WHEELHOUSE={wheelhouse} is not a directory")
    if not any(wheelhouse.glob("sglang_sim-*.whl")) or not any(wheelhouse.glob("sglang-*.whl")):
        raise SimError(f"SIM_WHEELHOUSE={wheelhouse} must hold sglang_sim-*.whl and the stand-in sglang-*.whl wheels "
                       "(`make wheelhouse` builds them)")
    layer = CACHE_DIR / "layers" / f"sim-{base.name}-{wheelhouse_key(wheelhouse)}"
    if layer.is_dir():
        return layer
    with flock(CACHE_DIR / ".build.lock"):
        if layer.is_dir():
            return layer
        build = CACHE_DIR / f"build-{layer.name}"
        remove_tree(build)
        log(f"installing the simulator from {wheelhouse} into a layer (once per wheelhouse content)")
        cgroups = [str(p) for p in cgroup_dirs("build")]
        root = mount_overlay([base], build)
        try:
            inner = root / SIM_WHEELHOUSE_IN_HOST.lstrip("/")
            inner.mkdir(parents=True)
            for wheel in wheelhouse.glob("*.whl"):
                shutil.copy2(wheel, inner)
            script = (f"set -e; python3 -m venv {SIM_VENV}; "
                      f"{SIM_VENV}/bin/pip install -q --no-cache-dir --disable-pip-version-check --no-index "
                      f"--find-links {SIM_WHEELHOUSE_IN_HOST} sglang-sim; "
                      + "".join(f"test -x {SIM_VENV}/bin/{tool} || {{ echo 'the wheel provides no {tool}'; exit 1; }}; "
                                for tool in ["sglang-sim-profile", *SIM_COMMANDS.values()])
                      + "".join(f"ln -sfn {SIM_VENV}/bin/{tool} /usr/local/bin/{name}; " for name, tool in SIM_COMMANDS.items())
                      # The simulated GPUs' live memory, which the server writes and nvidia-smi reads, lives in
                      # /run/sglang-sim: made at boot, as a driver makes /dev/nvidia*, writable by any server user.
                      + f"echo 'd /run/sglang-sim 1777 root root -' > {SIM_TMPFILES}")
            run(nspawn_cmd(cgroups) + ["-D", str(root), "--private-network", "--", "/bin/sh", "-c", script], timeout=600)
        finally:
            remove_cgroups(cgroups)
            unmount_under(build)
        # Only these paths of what the install wrote become the layer (not pip's logs or caches).
        tmp = layer.with_name(layer.name + ".tmp")
        remove_tree(tmp)
        tmp.mkdir(parents=True)
        packed = build / "layer.tar"
        tar_create(build / "upper", packed, [f".{SIM_VENV}", f".{SIM_WHEELHOUSE_IN_HOST}"]
                   + [f"./usr/local/bin/{name}" for name in SIM_COMMANDS] + [f".{SIM_TMPFILES}"])
        tar_extract(packed, tmp)
        os.replace(tmp, layer)
        remove_tree(build)
    return layer


# --- state ---------------------------------------------------------------------------------------------

class State:
    """STATE_DIR/state.json: every host and every resource, recorded before it is created."""

    def __init__(self) -> None:
        self.path = STATE_DIR / "state.json"
        self.lock = threading.Lock()
        self.data = {"version": 1, "hosts": {}, "inventories": {}}
        if self.path.exists():
            self.data.update(json.loads(self.path.read_text(encoding="utf-8")))

    @property
    def hosts(self) -> dict:
        return self.data["hosts"]

    def save(self) -> None:
        with self.lock:
            STATE_DIR.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(".tmp")
            tmp.write_text(json.dumps(self.data, indent=1, sort_keys=True), encoding="utf-8")
            os.replace(tmp, self.path)

    def update_host(self, host: str, **fields) -> None:
        with self.lock:
            self.hosts.setdefault(host, {}).update(fields)
        self.save()

    def drop_host(self, name: str) -> None:
        with self.lock:
            self.hosts.pop(name, None)
        self.save()


def slot_network(slot: int) -> ipaddress.IPv4Network:
    return ipaddress.ip_network(f"{NET.network_address + 256 * slot}/30")


def controller_addresses() -> list[ipaddress.IPv4Interface]:
    out = run(["ip", "-4", "-o", "addr", "show"]).stdout
    return [ipaddress.ip_interface(m) for m in re.findall(r"\binet (\S+)", out)]


def allocate_slot(state: State, index: int) -> int:
    taken = {h["slot"] for h in state.hosts.values() if "slot" in h}
    foreign = controller_addresses()
    for slot in [index] + list(range(1, MAX_SLOT + 1)):
        if slot in taken or not 1 <= slot <= MAX_SLOT:
            continue
        if any(iface.network.overlaps(slot_network(slot)) for iface in foreign):
            continue
        return slot
    raise SimError("no free /30 left in 198.18.0.0/15")


# --- processes, mounts, network ------------------------------------------------------------------------

def proc_start_time(pid: int) -> str | None:
    """The process's start time (a pid reused by another process has a different one); None when gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return None if fields[0] in ("Z", "X") else fields[19]


def ours_alive(entry: dict) -> bool:
    pid = entry.get("pid")
    return bool(pid) and proc_start_time(pid) == entry.get("pid_start")


def processes_of(tree: Path, netns: str | None, cgroups: list[str]) -> list[int]:
    """Live processes of the host: in its cgroups, in its network namespace, or with its tree as root directory."""
    found = set()
    for path in map(Path, cgroups):
        for procs in path.rglob("cgroup.procs") if path.is_dir() else []:
            with contextlib.suppress(OSError, ValueError):
                found.update(int(pid) for pid in procs.read_text(encoding="utf-8").split())
    netns_ino = None
    if netns and netns_exists(netns):
        netns_ino = os.stat(Path("/run/netns", netns)).st_ino
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or proc.name == str(os.getpid()):
            continue
        with contextlib.suppress(OSError):
            mine = os.readlink(proc / "root") == str(tree)
            if netns_ino is not None and not mine:
                mine = os.stat(proc / "ns" / "net").st_ino == netns_ino
            if mine:
                found.add(int(proc.name))
    return sorted(pid for pid in found if proc_start_time(pid) and pid != os.getpid())


def mounts_under(path: Path) -> list[str]:
    prefix = str(path).rstrip("/") + "/"
    found = []
    for line in Path("/proc/mounts").read_text(encoding="utf-8").splitlines():
        point = line.split()[1].encode().decode("unicode_escape")
        if point == str(path) or point.startswith(prefix):
            found.append(point)
    return sorted(found, key=len, reverse=True)


def netns_exists(name: str) -> bool:
    return Path("/run/netns", name).exists()


def link_exists(name: str) -> bool:
    return Path("/sys/class/net", name).exists()


def ssh_key() -> Path:
    key = STATE_DIR / "ssh" / "id_ed25519"
    if not key.exists():
        key.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "llmserve-sim", "-f", str(key)])
    return key


def ssh_cmd(entry: dict, command: str, timeout: float = 30, stdin: str | None = None) -> subprocess.CompletedProcess:
    return run(["ssh", "-i", str(ssh_key()), *SSH_OPTS, f"root@{entry['address']}", command],
               check=False, timeout=timeout, input=stdin)


# --- cgroups: each container in its own, or their systemds trample each other's units ---------------------

def systemd_is_init() -> bool:
    return Path("/run/systemd/system").is_dir()


def cgroup_dirs(label: str) -> list[Path]:
    """Where a container's nspawn should start when PID 1 is not systemd: one cgroup per writable hierarchy.

    With --keep-unit nspawn makes supervisor/ and payload/ cgroups beside itself; two containers started from
    the same cgroup share payload/, and one container's systemd then removes the other's unit cgroups
    (units fail at random with "Failed at step CGROUP ... No such file or directory"). systemd needs name=systemd
    (cgroup v1) or the unified hierarchy.
    """
    if systemd_is_init():
        return []  # nspawn asks systemd for a delegated scope of its own
    own = dict(line.split(":", 2)[1:] for line in Path("/proc/self/cgroup").read_text(encoding="utf-8").splitlines())
    dirs = []
    for line in Path("/proc/mounts").read_text(encoding="utf-8").splitlines():
        fields = line.split()
        if fields[2] == "cgroup2" and "" in own:
            dirs.append(Path(fields[1] + own[""]) / "llmserve-sim" / label)
        elif fields[2] == "cgroup" and "name=systemd" in fields[3].split(",") and "name=systemd" in own:
            dirs.append(Path(fields[1] + own["name=systemd"]) / "llmserve-sim" / label)
    return dirs


def nspawn_cmd(cgroups: list[str]) -> list[str]:
    """systemd-nspawn, started inside the given cgroups (created here) when there are any."""
    flags = ["-q", "--register=no", "--link-journal=no", "--resolv-conf=off", "--timezone=off"]
    if not cgroups:
        return ["systemd-nspawn"] + flags
    for path in cgroups:
        Path(path).mkdir(parents=True, exist_ok=True)
    script = 'for cg in "$@"; do [ "$cg" = -- ] && break; echo $$ > "$cg/cgroup.procs" || exit 1; shift; done; shift; exec "$@"'
    return ["/bin/sh", "-c", script, "sh", *cgroups, "--", "systemd-nspawn", "--keep-unit"] + flags


def remove_cgroups(cgroups: list[str]) -> None:
    """rmdir (the only way to remove a cgroup) from the leaves up; a cgroup with live processes stays."""
    for path in map(Path, cgroups):
        if not path.is_dir():
            continue
        for sub in sorted((p for p in path.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True) + [path]:
            with contextlib.suppress(OSError):
                sub.rmdir()
        with contextlib.suppress(OSError):
            path.parent.rmdir()  # llmserve-sim/, once empty


# --- one host ------------------------------------------------------------------------------------------

def host_paths(name: str) -> tuple[Path, Path]:
    home = STATE_DIR / "hosts" / name
    return home, home / "root"


def teardown_host(state: State, name: str) -> None:
    """Remove whatever the state records for the host, tolerating what is already gone."""
    entry = dict(state.hosts.get(name, {}))
    home = Path(entry.get("home") or host_paths(name)[0])
    tree = home / "root"
    if ours_alive(entry):
        os.kill(entry["pid"], signal.SIGTERM)  # nspawn asks the container's systemd to power off
        deadline = time.monotonic() + STOP_TIMEOUT
        while ours_alive(entry) and time.monotonic() < deadline:
            time.sleep(0.1)
        if ours_alive(entry):
            log(f"{name}: no clean shutdown within {STOP_TIMEOUT:.0f} s, killing")
            with contextlib.suppress(ProcessLookupError):
                os.killpg(entry["pid"], signal.SIGKILL)
    for attempt in range(50):
        pids = processes_of(tree, entry.get("netns"), entry.get("cgroups", []))
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL if attempt else signal.SIGTERM)
        time.sleep(0.1)
    remove_cgroups(entry.get("cgroups", []))
    unmount_under(home)
    if entry.get("netns") and netns_exists(entry["netns"]):
        run(["ip", "netns", "delete", entry["netns"]])
    if entry.get("veth") and link_exists(entry["veth"]):
        # Deleting the namespace deletes the pair too, a moment later: only an interface that stays is an error.
        if run(["ip", "link", "delete", entry["veth"]], check=False).returncode != 0 and link_exists(entry["veth"]):
            raise SimError(f"{name}: cannot delete interface {entry['veth']}")
    remove_tree(home)
    state.drop_host(name)


def host_healthy(entry: dict, want: dict) -> bool:
    if any(entry.get(k) != v for k, v in want.items()):
        return False
    if entry.get("status") != "up" or not ours_alive(entry):
        return False
    return ssh_cmd(entry, "true", timeout=10).returncode == 0


def write_host_files(name: str, tree: Path, address: str, key: Path) -> None:
    (tree / "etc/hostname").write_text(name + "\n", encoding="utf-8")
    (tree / "etc/hosts").write_text(
        f"127.0.0.1\tlocalhost\n127.0.1.1\t{name}\n{address}\t{name}\n"
        "::1\tlocalhost ip6-localhost ip6-loopback\n", encoding="utf-8")
    (tree / "etc/machine-id").write_text(uuid.uuid4().hex + "\n", encoding="utf-8")
    run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"root@{name}", "-f",
         str(tree / "etc/ssh/ssh_host_ed25519_key")])
    dot_ssh = tree / "root/.ssh"
    dot_ssh.mkdir(mode=0o700, exist_ok=True)
    (dot_ssh / "authorized_keys").write_text(key.with_suffix(".pub").read_text(encoding="utf-8"), encoding="utf-8")
    os.chmod(dot_ssh / "authorized_keys", 0o600)


def make_network(entry: dict) -> None:
    netns, veth, peer = entry["netns"], entry["veth"], entry["veth"] + "p"
    network = slot_network(entry["slot"])
    outer, inner = network.network_address + 1, network.network_address + 2
    run(["ip", "netns", "add", netns])
    run(["ip", "link", "add", veth, "type", "veth", "peer", "name", peer])
    run(["ip", "link", "set", peer, "netns", netns])
    run(["ip", "-n", netns, "link", "set", peer, "name", "eth0"])
    run(["ip", "-n", netns, "addr", "add", f"{inner}/30", "dev", "eth0"])
    run(["ip", "-n", netns, "link", "set", "lo", "up"])
    run(["ip", "-n", netns, "link", "set", "eth0", "up"])
    run(["ip", "-n", netns, "route", "add", "default", "via", str(outer)])
    run(["ip", "addr", "add", f"{outer}/30", "dev", veth])
    run(["ip", "link", "set", veth, "up"])
    # The hosts reach each other through this machine (the nodes of a multi-node server), and only they: forwarding
    # is switched on for the hosts' own interfaces, not for the machine's.
    Path(f"/proc/sys/net/ipv4/conf/{veth}/forwarding").write_text("1\n", encoding="utf-8")


def console_tail(home: Path, lines: int = 60) -> str:
    try:
        return "\n".join((home / "console.log").read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no console output)"


def boot(entry: dict) -> None:
    home, tree = Path(entry["home"]), Path(entry["home"]) / "root"
    cmd = nspawn_cmd(entry["cgroups"]) + ["-D", str(tree), "-M", entry["name"], "--boot", "--console=pipe",
                                          f"--network-namespace-path=/run/netns/{entry['netns']}"]
    with open(home / "console.log", "ab") as console:
        # A session of its own: it outlives this command, and a signal to its group reaches only it.
        proc = subprocess.Popen(  # pylint: disable=consider-using-with
            cmd, stdin=subprocess.DEVNULL, stdout=console, stderr=subprocess.STDOUT, start_new_session=True, close_fds=True)
    entry["pid"], entry["pid_start"] = proc.pid, proc_start_time(proc.pid)


def wait_for_ssh(entry: dict) -> None:
    home = Path(entry["home"])
    deadline = time.monotonic() + BOOT_TIMEOUT
    while True:
        if not ours_alive(entry):
            raise SimError(f"{entry['name']}: systemd-nspawn exited during boot; console:\n{console_tail(home)}")
        if ssh_cmd(entry, "true", timeout=5).returncode == 0:
            break
        if time.monotonic() > deadline:
            raise SimError(f"{entry['name']}: no ssh on {entry['address']} within {BOOT_TIMEOUT:.0f} s; console:\n"
                           f"{console_tail(home)}")
        time.sleep(0.2)
    res = ssh_cmd(entry, "systemctl is-system-running --wait", timeout=BOOT_TIMEOUT)
    if res.stdout.strip() != "running":
        failed = ssh_cmd(entry, "systemctl --failed --no-legend --plain", timeout=10).stdout.strip()
        log(f"warning: {entry['name']} is {res.stdout.strip()!r}; failed units: {failed or 'none'}")


# Run on a new host with `sh -s PROFILE`: the profile (host.json, models), then SGLang of the profile's version into
# the simulator's venv, installed by pip as on a real host (the stand-in distribution sglang, from the wheelhouse),
# for the host's "existing" server (`serve`): python -m sglang.launch_server there runs the version host.json names,
# and the venv has its sglang-<version>.dist-info like a real SGLang venv.
PROFILE_INSTALL = f"""set -eu
{SIM_VENV}/bin/sglang-sim-profile install "$1" --root /
version=$({SIM_VENV}/bin/python -c 'from sglang_sim.hostspec import load_host; print(load_host().host_sglang_version)')
{SIM_VENV}/bin/pip install -q --no-cache-dir --disable-pip-version-check --no-index \\
  --find-links {SIM_WHEELHOUSE_IN_HOST} "sglang==$version"
"""


def create_host(state: State, name: str, index: int, prefix: str, want: dict, layers: list[Path],
                key: Path, profile: str | None) -> None:
    started = time.monotonic()
    home, tree = host_paths(name)
    with state.lock:
        slot = allocate_slot(state, index)
        state.hosts[name] = {"name": name, "prefix": prefix, "slot": slot, "status": "allocating"}
    address = str(slot_network(slot).network_address + 2)
    entry = {"name": name, "prefix": prefix, "slot": slot, "address": address, "home": str(home),
             "netns": f"llmsim-{name}", "veth": f"llmsim{slot}", "status": "creating",
             "cgroups": [str(p) for p in cgroup_dirs(name)], **want}
    for what, exists in (("network namespace", netns_exists(entry["netns"])), ("interface", link_exists(entry["veth"])),
                         ("interface", link_exists(entry["veth"] + "p"))):
        if exists:
            state.drop_host(name)
            raise SimError(f"{name}: a {what} named like ours exists but was not created by simhosts; remove it by hand")
    state.update_host(name, **entry)  # recorded before anything is made
    remove_tree(home)  # left by a run whose state was lost: the state directory is ours alone
    home.mkdir(parents=True)
    mount_overlay(layers, home)
    write_host_files(name, tree, address, key)
    make_network(entry)
    boot(entry)
    state.update_host(name, pid=entry["pid"], pid_start=entry["pid_start"])
    wait_for_ssh(entry)
    if profile:
        res = ssh_cmd(entry, f"sh -s {profile}", stdin=PROFILE_INSTALL, timeout=300)
        if res.returncode != 0:
            raise SimError(f"{name}: installing profile {profile} failed (rc={res.returncode}):\n{res.stdout}")
    state.update_host(name, status="up")
    log(f"{name}: up at {address} in {time.monotonic() - started:.1f} s")


# --- inventory -----------------------------------------------------------------------------------------

def yaml_str(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid YAML double-quoted scalar


def write_inventory(path: Path, hosts: list[dict], key: Path) -> None:
    lines = ["---", "# Generated by tools/simhosts (make sim-up); removed by make sim-down. Do not edit.", "sim:", "  hosts:"]
    for entry in hosts:
        lines += [f"    {entry['name']}:", f"      ansible_host: {entry['address']}"]
        if entry.get("profile"):
            lines.append(f"      sim_profile: {yaml_str(entry['profile'])}")
    lines += ["  vars:",
              "    ansible_user: root",
              f"    ansible_ssh_private_key_file: {yaml_str(str(key))}",
              f"    ansible_ssh_common_args: {yaml_str(INVENTORY_SSH_ARGS)}",
              "    ansible_python_interpreter: /usr/bin/python3",
              f"    sim_simulator_installed: {'true' if any(e.get('sim_layer') for e in hosts) else 'false'}",
              f"    sim_wheelhouse: {yaml_str(SIM_WHEELHOUSE_IN_HOST)}",
              # The group the collection's playbooks run on by default.
              "sglang_servers:", "  children:", "    sim:"]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
    os.replace(tmp, path)


# --- commands ------------------------------------------------------------------------------------------

def require_root() -> None:
    if os.geteuid() != 0:
        raise SimError("must run as root (network namespaces, veths and systemd-nspawn need it)")


def host_names(state: State, prefix: str) -> list[str]:
    def index(name: str) -> int:
        return int(name[len(prefix):]) if name[len(prefix):].isdigit() else 0
    return sorted((n for n, h in state.hosts.items() if h.get("prefix") == prefix), key=index)


def cmd_up(args: argparse.Namespace) -> None:
    started = time.monotonic()
    require_root()
    if not re.fullmatch(r"[a-z][a-z0-9-]{0,15}", args.prefix):
        raise SimError(f"prefix {args.prefix!r}: use 1-16 characters of a-z, 0-9, '-', starting with a letter")
    if not 1 <= args.count <= 64:
        raise SimError(f"count {args.count}: choose 1..64")
    # One profile for every host, or one per host in order (host i gets the i-th): "h200-deepseek-v3,field,field".
    profiles = [p.strip() for p in (args.profile or "").split(",")]
    if len(profiles) not in (1, args.count) or not all(profiles):
        raise SimError(f"--profile {args.profile!r}: give one profile, or a comma-separated list of {args.count}")
    inventory = Path(args.inventory).resolve() if args.inventory else None
    if inventory is None:
        if args.prefix != DEFAULT_PREFIX:
            raise SimError(f"prefix {args.prefix!r} needs --inventory (SIM_INVENTORY): only prefix 'sim' "
                           f"writes {DEFAULT_INVENTORY}")
        inventory = DEFAULT_INVENTORY
    # One run at a time: builds, pruning and every host change happen under this lock.
    with flock(STATE_DIR / ".lock"):
        ensure_controller_tools()
        rootfs = ensure_rootfs()
        base = ensure_lower(rootfs)
        layers, want = [base], {"rootfs": rootfs.name, "sim_layer": None, "profile": None, "layers": [str(base)]}
        wheelhouse = args.wheelhouse or os.environ.get("SIM_WHEELHOUSE")
        if wheelhouse:
            layer = ensure_sim_layer(base, Path(wheelhouse).resolve())
            layers.insert(0, layer)
            want.update(sim_layer=layer.name, layers=[str(p) for p in layers])
        else:
            log("warning: SIM_WHEELHOUSE is not set (make sim-up WHEELHOUSE=DIR): hosts get no simulator, "
                "no nvidia-smi, no lspci and no profile")
        key = ssh_key()
        state = State()
        state.data["inventories"][args.prefix] = str(inventory)
        state.save()
        names = [f"{args.prefix}{i}" for i in range(1, args.count + 1)]
        wants = {n: dict(want, profile=profiles[min(i, len(profiles) - 1)] if want["sim_layer"] else None)
                 for i, n in enumerate(names)}
        for name in names:
            owner = state.hosts.get(name, {}).get("prefix")
            if owner not in (None, args.prefix):
                raise SimError(f"host {name} belongs to prefix {owner!r}; choose another prefix")
        extra = [n for n in host_names(state, args.prefix) if n not in names]
        keep = {n for n in names if n in state.hosts and host_healthy(state.hosts[n], wants[n])}
        rebuild = [n for n in names if n in state.hosts and n not in keep]
        for name in extra + rebuild:
            log(f"{name}: {'removing (beyond --count)' if name in extra else 'recreating (down, broken or outdated)'}")
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(lambda n: teardown_host(state, n), extra + rebuild))
        todo = [(i, n) for i, n in enumerate(names, 1) if n not in keep]
        for name in sorted(keep):
            log(f"{name}: already up at {state.hosts[name]['address']}, kept")
        with ThreadPoolExecutor(max_workers=8) as pool:
            futures = [pool.submit(create_host, state, n, i, args.prefix, wants[n], layers, key, wants[n]["profile"])
                       for i, n in todo]
        errors = [f.exception() for f in futures if f.exception()]
        hosts = [state.hosts[n] for n in names if state.hosts.get(n, {}).get("status") == "up"]
        write_inventory(inventory, hosts, key)
        prune_cache(state, rootfs, layers)
        if errors:
            raise SimError("\n".join(str(e) for e in errors) + "\n(re-run to retry; `down` removes everything)")
    log(f"{len(names)} host(s) up in {time.monotonic() - started:.1f} s; inventory: {inventory}")


def prune_cache(state: State, rootfs: Path, layers: list[Path]) -> None:
    """Remove cached trees and tarballs that no host uses and no `up` asked for in PRUNE_AFTER seconds."""
    for layer in layers:
        os.utime(layer)  # last asked for now
    used = {str(p) for p in layers} | {p for h in state.hosts.values() for p in h.get("layers", [])}
    with flock(CACHE_DIR / ".build.lock"):
        for tree in (CACHE_DIR / "layers").glob("*"):
            if str(tree) not in used and time.time() - tree.stat().st_mtime > PRUNE_AFTER and not mounts_under(tree):
                log(f"pruning unused {tree}")
                remove_tree(tree)
        for tarball in CACHE_DIR.glob("rootfs-*.tar"):
            if tarball != rootfs and not (CACHE_DIR / "layers" / tarball.stem).exists():
                log(f"pruning unused {tarball}")
                tarball.unlink()


def cmd_down(args: argparse.Namespace) -> None:
    started = time.monotonic()
    require_root()
    with flock(STATE_DIR / ".lock"):
        state = State()
        prefixes = [args.prefix]
        if args.all:
            prefixes = sorted({h["prefix"] for h in state.hosts.values() if h.get("prefix")} | set(state.data["inventories"]))
        for prefix in prefixes:
            names = host_names(state, prefix)
            with ThreadPoolExecutor(max_workers=8) as pool:
                futures = [pool.submit(teardown_host, state, n) for n in names]
            errors = [f.exception() for f in futures if f.exception()]
            if errors:
                raise SimError("\n".join(str(e) for e in errors))
            inventory = state.data["inventories"].pop(prefix, None)
            if inventory:
                with contextlib.suppress(FileNotFoundError):
                    Path(inventory).unlink()
            state.save()
            log(f"prefix {prefix!r}: removed {len(names)} host(s)" + (f" and {inventory}" if inventory else ""))
        with contextlib.suppress(OSError):
            (STATE_DIR / "hosts").rmdir()
        if args.purge:
            if state.hosts:
                raise SimError(f"--purge: hosts of other prefixes remain ({', '.join(sorted(state.hosts))}); use --all")
            remove_tree(CACHE_DIR)
            for child in STATE_DIR.iterdir():
                if child.is_dir():
                    remove_tree(child)
                elif child.name != ".lock":
                    child.unlink()
            log(f"purged {CACHE_DIR} and {STATE_DIR}")
    log(f"down in {time.monotonic() - started:.1f} s")


def cmd_status(args: argparse.Namespace) -> None:
    del args
    state = State()
    if not state.hosts:
        print("no simulated hosts")
    for name in sorted(state.hosts):
        entry = state.hosts[name]
        alive = "running" if ours_alive(entry) else "NOT RUNNING"
        print(f"{name:12} {entry.get('address', '?'):15} {entry.get('status', '?'):9} {alive:12} "
              f"profile={entry.get('profile') or '-'} pid={entry.get('pid', '-')}")
    for prefix, path in sorted(state.data["inventories"].items()):
        print(f"inventory[{prefix}]: {path}")


def cmd_ssh(args: argparse.Namespace) -> None:
    entry = State().hosts.get(args.host)
    if not entry:
        raise SimError(f"no simulated host {args.host!r} (see `status`)")
    os.execvp("ssh", ["ssh", "-i", str(ssh_key()), *SSH_OPTS, f"root@{entry['address']}", *args.command])


# Run on the host with `sh -s PROFILE [extra flags]`: the profile's default launch args, as a transient unit. The
# command is SGLang's own, from the simulator's venv, where `up` installed SGLang of the profile's version.
SERVE_SCRIPT = """set -eu
systemctl stop sglang.service 2>/dev/null || true
systemctl reset-failed sglang.service 2>/dev/null || true
profile=$1
shift
# shellcheck disable=SC2046
systemd-run --quiet --unit=sglang.service --description="SGLang server (simulated host)" \\
  /opt/sglang-sim/bin/python -m sglang.launch_server $(/opt/sglang-sim/bin/sglang-sim-profile args "$profile") "$@"
"""

# Run on the host with `python3 - SECONDS`: wait for a real generation, not only /health.
READY_PROBE = """import subprocess, sys, time, urllib.request
deadline = time.time() + float(sys.argv[1])
while time.time() < deadline:
    try:
        urllib.request.urlopen("http://127.0.0.1:30000/health_generate", timeout=5)
        sys.exit(0)
    except Exception:
        if subprocess.run(["systemctl", "is-active", "--quiet", "sglang.service"]).returncode != 0:
            sys.exit(2)  # the server exited: no point waiting
        time.sleep(0.5)
sys.exit(1)
"""


def cmd_serve(args: argparse.Namespace) -> None:
    """Start the profile's default SGLang server as a transient sglang.service (the host's "existing" server)."""
    state = State()
    names = args.hosts or host_names(state, args.prefix)
    if not names:
        raise SimError(f"no simulated hosts with prefix {args.prefix!r}: run `up` first")
    extra = f" --mem-fraction-static {args.mem_fraction_static}" if args.mem_fraction_static else ""
    for name in names:
        entry = state.hosts.get(name)
        if not entry or not entry.get("profile"):
            raise SimError(f"{name}: not a simulated host with a profile")
        started = ssh_cmd(entry, f"sh -s {entry['profile']}{extra}", stdin=SERVE_SCRIPT)
        if started.returncode != 0:
            raise SimError(f"{name}: could not start sglang.service: {started.stdout.strip()}")
        ready = ssh_cmd(entry, f"python3 - {args.timeout}", stdin=READY_PROBE, timeout=args.timeout + 30)
        if ready.returncode != 0:
            journal = ssh_cmd(entry, "journalctl -u sglang.service -n 30 --no-pager -o cat").stdout
            why = "exited" if ready.returncode == 2 else f"not ready within {args.timeout:.0f} s"
            raise SimError(f"{name}: sglang.service {why}; last lines:\n{journal}")
        log(f"{name}: sglang.service ready ({entry['profile']}{extra})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="simhosts", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="create (or keep) N hosts and write the inventory")
    up.add_argument("--count", "-n", type=int, default=int(os.environ.get("SIM_COUNT", "4")))
    up.add_argument("--profile", default=os.environ.get("SIM_PROFILE", "field"),
                    help="host profile of every host, or a comma-separated list with one per host (default: field)")
    up.add_argument("--prefix", default=os.environ.get("SIM_PREFIX", DEFAULT_PREFIX))
    up.add_argument("--wheelhouse", help="directory with the simulator's wheel (default: $SIM_WHEELHOUSE)")
    up.add_argument("--inventory", default=os.environ.get("SIM_INVENTORY"),
                    help=f"inventory file to write (default for prefix 'sim': {DEFAULT_INVENTORY})")
    up.set_defaults(func=cmd_up)
    down = sub.add_parser("down", help="remove the hosts of a prefix and everything they created")
    down.add_argument("--prefix", default=os.environ.get("SIM_PREFIX", DEFAULT_PREFIX))
    down.add_argument("--all", action="store_true", help="every prefix")
    down.add_argument("--purge", action="store_true", help="also remove the ssh key, state and rootfs cache")
    down.set_defaults(func=cmd_down)
    sub.add_parser("status", help="list the hosts").set_defaults(func=cmd_status)
    serve = sub.add_parser("serve", help="start the profile's default SGLang server as sglang.service and wait for it")
    serve.add_argument("hosts", nargs="*", help="host names (default: every host of the prefix)")
    serve.add_argument("--prefix", default=os.environ.get("SIM_PREFIX", DEFAULT_PREFIX))
    serve.add_argument("--mem-fraction-static", type=float, help="override the profile's value")
    serve.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for a real generation")
    serve.set_defaults(func=cmd_serve)
    ssh = sub.add_parser("ssh", help="ssh into a host as root")
    ssh.add_argument("host")
    ssh.add_argument("command", nargs=argparse.REMAINDER)
    ssh.set_defaults(func=cmd_ssh)
    args = parser.parse_args(argv)
    try:
        args.func(args)
    except SimError as exc:
        log(f"error: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

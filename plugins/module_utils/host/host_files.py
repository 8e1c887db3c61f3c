# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Reading files on the managed host as root without letting the served process steer it (docs/DESIGN.md,
"Trust"). The SGLang server runs model code as an unprivileged user; root reads what it needs in two ways:

- :func:`read_trusted`: a file root relies on (the installed SGLang's metadata): every directory from ``/`` down and
  the file itself belong to root and nobody else can write them, symlinks included; anything else is refused.
- :func:`read_as_user`: data the service user may have written (a model's ``config.json``, in a directory the
  server downloaded into): read only when that user could read it anyway, so that a symlink planted in a
  user-writable directory cannot make root read (and report) a file only root may see. Never executed.

Both refuse a FIFO or a device without blocking (O_NONBLOCK, and only a regular file is opened), and a file larger
than MAX_BYTES. I/O: ``os.lstat``, ``os.stat``, ``os.readlink`` and reads of the checked files; nothing is written.
"""
from __future__ import annotations

import glob
import os
import pwd
import shlex
import stat
from typing import Any, Callable, Collection, Iterable

from ansible_collections.llmserve.sglang.plugins.module_utils.host import host_commands

MAX_BYTES = 16 * 2 ** 20   # a config.json or a METADATA file is kilobytes; anything this large is not one


class UntrustedPath(OSError):
    """A path root will not rely on, or a file the service user could not read; the message says which and why."""


def _check_root_owned(path: str, info: os.stat_result) -> None:
    if info.st_uid != 0:
        raise UntrustedPath("%s belongs to uid %d, not root" % (path, info.st_uid))
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not stat.S_ISLNK(info.st_mode):
        raise UntrustedPath("%s is writable by group or others (mode %o)" % (path, stat.S_IMODE(info.st_mode)))


def trusted_realpath(path: str, _depth: int = 0) -> str:
    """The real path of ``path`` after checking that root alone controls every component on the way, the targets of
    its symlinks included. Raises UntrustedPath (or FileNotFoundError)."""
    if _depth > 16:
        raise UntrustedPath("%s: too many symlinks" % path)
    if not os.path.isabs(path):
        raise UntrustedPath("%s is not an absolute path" % path)
    current = "/"
    _check_root_owned(current, os.lstat(current))
    for part in [p for p in os.path.normpath(path).split("/") if p]:
        candidate = os.path.join(current, part)
        info = os.lstat(candidate)
        _check_root_owned(candidate, info)
        if stat.S_ISLNK(info.st_mode):
            target = os.readlink(candidate)
            candidate = trusted_realpath(target if os.path.isabs(target) else os.path.join(current, target),
                                         _depth + 1)
        current = candidate
    return current


# O_NONBLOCK: a FIFO (or a device) in place of a file must never block the open; regular files read the same.
_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
_MAX_SYMLINKS = 40


def _read_fd(fd: int, path: str, max_bytes: int) -> tuple[bytes, os.stat_result]:
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        raise UntrustedPath("%s is not a regular file" % path)
    if info.st_size > max_bytes:
        raise UntrustedPath("%s is larger than %d bytes" % (path, max_bytes))
    chunks: list[bytes] = []
    left = max_bytes + 1
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    if left <= 0:
        raise UntrustedPath("%s grew beyond %d bytes while it was read" % (path, max_bytes))
    return b"".join(chunks), info


def _read_regular(path: str, max_bytes: int) -> tuple[bytes, os.stat_result]:
    fd = os.open(path, _OPEN_FLAGS)
    try:
        return _read_fd(fd, path, max_bytes)
    finally:
        os.close(fd)


def read_walking(path: Any, max_bytes: int = MAX_BYTES,
                 may: Callable[[os.stat_result, str, str], None] | None = None) -> tuple[bytes, os.stat_result]:
    """(bytes, os.stat_result) of the regular file ``path``, opened one component at a time from ``/`` with
    O_NOFOLLOW, each relative to the directory already opened: the kernel follows no symlink, each one is read and
    resolved here (at most 40), so that nothing can be swapped in between a check and the open. A FIFO, a device,
    a directory or a file over ``max_bytes`` is refused without blocking. ``may(info, what, shown)``, when given,
    is asked for every directory entered (``what`` "search") and the file ("read"), and raises to refuse it."""
    if not isinstance(path, str) or not os.path.isabs(path):
        raise UntrustedPath("%s is not an absolute path" % (path,))
    parts = [part for part in path.split("/") if part and part != "."]
    shown, links = "/", 0
    fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
    try:
        while parts:
            part = parts.pop(0)
            entry = os.lstat(part, dir_fd=fd)
            here = os.path.normpath(os.path.join(shown, part))
            if stat.S_ISLNK(entry.st_mode):
                links += 1
                if links > _MAX_SYMLINKS:
                    raise UntrustedPath("%s: too many symlinks" % path)
                target = os.readlink(part, dir_fd=fd)
                parts = [p for p in target.split("/") if p and p != "."] + parts
                if target.startswith("/"):
                    root = os.open("/", os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
                    os.close(fd)
                    fd, shown = root, "/"
                continue
            if parts:
                if not stat.S_ISDIR(entry.st_mode):
                    raise UntrustedPath("%s: %s is not a directory" % (path, here))
                child = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0),
                                dir_fd=fd)
                os.close(fd)
                fd, shown = child, here
                if may is not None:
                    may(os.fstat(fd), "search", shown)
                continue
            # The last component: only a regular file is opened at all (a device's open can act).
            if not stat.S_ISREG(entry.st_mode):
                raise UntrustedPath("%s is not a regular file" % path)
            child = os.open(part, _OPEN_FLAGS, dir_fd=fd)
            try:
                data, info = _read_fd(child, path, max_bytes)
            finally:
                os.close(child)
            if may is not None:
                may(info, "read", path)
            return data, info
        raise UntrustedPath("%s is not a regular file" % path)
    finally:
        os.close(fd)


def read_trusted(path: str, max_bytes: int = MAX_BYTES) -> tuple[bytes, os.stat_result]:
    """(bytes, os.stat_result) of a file that root alone controls (see the module docstring)."""
    real = trusted_realpath(path)
    data, info = _read_regular(real, max_bytes)
    _check_root_owned(real, info)
    return data, info


def _user_can(info: os.stat_result, uid: int, gids: Collection[int], bit_user: int, bit_group: int,
              bit_other: int) -> bool:
    if info.st_uid == uid:
        return bool(info.st_mode & bit_user)
    if info.st_gid in gids:
        return bool(info.st_mode & bit_group)
    return bool(info.st_mode & bit_other)


def read_as_user(path: str, uid: int, gids: Collection[int],
                 max_bytes: int = MAX_BYTES) -> tuple[bytes, os.stat_result]:
    """(bytes, os.stat_result) of ``path`` when the user ``uid`` (groups ``gids``) could read it: every directory on
    the way, those reached through symlinks included, searchable by that user, the file readable by it and a regular
    file (read_walking: no symlink followed by the kernel, no blocking open, bounded size)."""
    def may(info: os.stat_result, what: str, shown: str) -> None:
        bits = (stat.S_IXUSR, stat.S_IXGRP, stat.S_IXOTH) if what == "search" else \
            (stat.S_IRUSR, stat.S_IRGRP, stat.S_IROTH)
        if not _user_can(info, uid, gids, *bits):
            if what == "search":
                raise UntrustedPath("%s: uid %d cannot reach it (%s is not searchable for it)" % (path, uid, shown))
            raise UntrustedPath("%s: uid %d cannot read it" % (path, uid))

    return read_walking(path, max_bytes, may)


def service_user(name: str | None) -> tuple[int | None, set[int]]:
    """(uid, gids) of a unit's User= (root when none); (None, set()) when no such user exists."""
    try:
        entry = pwd.getpwnam(name or "root")
    except KeyError:
        return None, set()
    return entry.pw_uid, {entry.pw_gid} | set(os.getgrouplist(entry.pw_name, entry.pw_gid))


def installed_distribution(venv: str, name: str) -> dict[str, Any] | None:
    """{version, metadata (its path), stat (os.stat_result)} of the distribution ``name`` installed in the virtualenv
    ``venv``, read from its ``*.dist-info/METADATA`` under root's control; None when it is not installed. Raises
    UntrustedPath when the venv or the metadata is not root's alone, or when several versions are installed."""
    pattern = os.path.join(venv, "lib", "python3*", "site-packages", "%s-*.dist-info" % name.replace("-", "_"))
    found: list[dict[str, Any]] = []
    for dist_info in sorted(glob.glob(pattern)):
        data, info = read_trusted(os.path.join(dist_info, "METADATA"))
        fields = dict(line.split(": ", 1) for line in data.decode("utf-8", "replace").splitlines()
                      if ": " in line and not line.startswith(" "))
        if fields.get("Name", "").lower().replace("_", "-") == name.lower() and fields.get("Version"):
            found.append({"version": fields["Version"].strip(), "metadata": os.path.join(dist_info, "METADATA"),
                          "stat": info})
    if len(found) > 1:
        raise UntrustedPath("%s holds several %s distributions (%s): a broken upgrade; reinstall it"
                            % (venv, name, ", ".join(item["version"] for item in found)))
    return found[0] if found else None


def process_argv(pid: int) -> list[str]:
    """The command line of process ``pid`` (``/proc/<pid>/cmdline`` split at NUL), as words; only parsed, never run."""
    with open("/proc/%d/cmdline" % pid, "rb") as handle:
        raw = handle.read()
    return [word.decode("utf-8", "replace") for word in raw.split(b"\0") if word]


def unit_pids(control_group: str, roots: Iterable[str] = ("/sys/fs/cgroup", "/sys/fs/cgroup/unified",
                                                          "/sys/fs/cgroup/systemd")) -> set[int] | None:
    """The processes of a unit (systemd's ControlGroup property, ``/system.slice/sglang.service``) from its
    cgroup.procs (cgroup v2, or v1's named hierarchies); None when none can be read."""
    for root in roots:
        try:
            with open(root + control_group + "/cgroup.procs", encoding="ascii") as handle:
                pids = {int(line) for line in handle if line.strip()}
            if pids:
                return pids
        except (OSError, ValueError):
            continue
    return None


def unit_variables(state: dict[str, Any], names: Collection[str]) -> tuple[dict[str, str], str | None]:
    """The values a unit's configuration gives the environment variables ``names``: systemd's Environment= property,
    then each EnvironmentFile= over it, as systemd reads them (``state``: `systemctl show` with Environment and
    EnvironmentFiles). Returns ({name: value} of those it sets, None), or (what was found, why the rest is unknown):
    a file that root alone does not control is not read. Only ``names`` are read: the files hold the unit's secrets."""
    found = {name: value for name, value in (item.split("=", 1) for item in shlex.split(state.get("Environment") or "")
                                             if "=" in item) if name in names}
    for path in host_commands.environment_files(state.get("EnvironmentFiles")):
        path = path.lstrip("-")
        try:
            data, _info = read_trusted(path)
        except FileNotFoundError:
            continue
        except OSError as exc:
            return found, "refusing to read %s: %s" % (path, exc)
        text = data.decode("utf-8", "replace")
        for name in names:
            value = host_commands.environment_variable(text, name)
            if value is not None:
                found[name] = value
    return found, None


def process_gone(pid: int, proc: str = "/proc") -> bool:
    """Whether process ``pid`` has exited: no /proc entry, or a zombie (state Z or X) that its parent has not
    reaped yet, whose command line reads empty."""
    try:
        with open(os.path.join(proc, str(pid), "stat"), encoding="ascii", errors="replace") as handle:
            state = handle.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state in ("Z", "X")


def process_start_time(pid: int, proc: str = "/proc") -> float:
    """When process ``pid`` started, in seconds since the epoch (from /proc/<pid>/stat and the boot time)."""
    with open(os.path.join(proc, str(pid), "stat"), encoding="ascii", errors="replace") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    with open(os.path.join(proc, "stat"), encoding="ascii", errors="replace") as handle:
        boot = next(int(line.split()[1]) for line in handle if line.startswith("btime "))
    # Field 22 of stat (the 20th after the command's closing parenthesis): start time in clock ticks after boot.
    return boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")


def write_root_owned(atomic_move: Callable[[str, str], None], path: str, text: str, mode: int, tag: str) -> None:
    """Write ``text`` to ``path`` as root's alone with ``mode``: a temporary file beside it (named with ``tag``), then
    ``atomic_move`` (AnsibleModule.atomic_move: the rename, SELinux contexts kept)."""
    tmp = "%s.%s.%d" % (path, tag, os.getpid())
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.chmod(tmp, mode)
    os.chown(tmp, 0, 0)
    atomic_move(tmp, path)
    os.chmod(path, mode)

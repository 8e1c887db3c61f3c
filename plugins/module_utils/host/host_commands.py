# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Commands the modules run on the managed host: in the C locale (their output is parsed), and systemctl show."""
from __future__ import annotations

from typing import Any

# Parsed output must not be translated or formatted for a locale.
C_LOCALE = {"LC_ALL": "C", "LANG": "C", "LANGUAGE": "C"}


class SystemctlError(RuntimeError):
    """systemctl is missing or `systemctl show` failed; the message says which."""


def parse_show(text: str) -> dict[str, str]:
    """`systemctl show` output (KEY=VALUE lines) as a dict; a property that systemd prints once per entry
    (EnvironmentFiles=) keeps every entry, one per line."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        if "=" in line:
            key, value = line.split("=", 1)
            out[key] = out[key] + "\n" + value if key in out else value
    return out


def environment_files(value: str | None) -> list[str]:
    """The paths of a unit's EnvironmentFiles property (``/etc/sglang/a.env (ignore_errors=no)``, one per line)."""
    return [line.rsplit(" (ignore_errors=", 1)[0] for line in (value or "").splitlines() if line.strip()]


def environment_variable(text: str, name: str) -> str | None:
    """The value an EnvironmentFile (``text``) gives ``name``, as systemd reads it (KEY=VALUE lines, ``#`` and ``;``
    comments, one pair of quotes around the value, the last assignment wins); None when it does not set it."""
    found = None
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#;" or "=" not in line:
            continue
        key, value = (part.strip() for part in line.split("=", 1))
        if key == name:
            found = value[1:-1] if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"" else value
    return found


def unit_properties(module: Any, unit: str, names: list[str]) -> dict[str, str]:
    """The properties ``names`` of ``unit`` (`systemctl show --property=...`) as a dict of strings, through an
    AnsibleModule's run_command. Raises SystemctlError when systemctl is missing or fails."""
    systemctl = module.get_bin_path("systemctl")
    if not systemctl:
        raise SystemctlError("systemctl is not installed")
    rc, out, err = module.run_command([systemctl, "show", unit, "--property=" + ",".join(names)],
                                      environ_update=C_LOCALE)
    if rc != 0:
        raise SystemctlError("systemctl show %s failed (rc %d): %s" % (unit, rc, err.strip()))
    return parse_show(out)


def list_units(module: Any, pattern: str) -> list[str]:
    """The names of the loaded units that match ``pattern`` (`systemctl list-units --all`), [] when none."""
    systemctl = module.get_bin_path("systemctl")
    if not systemctl:
        raise SystemctlError("systemctl is not installed")
    rc, out, err = module.run_command([systemctl, "list-units", "--all", "--plain", "--no-legend", pattern],
                                      environ_update=C_LOCALE)
    if rc != 0:
        raise SystemctlError("systemctl list-units %s failed (rc %d): %s" % (pattern, rc, err.strip()))
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def unit_journal(module: Any, unit: str, since: float, grep: str, lines: int) -> tuple[str | None, str | None]:
    """(text, error) of the lines of ``unit``'s journal since the Unix time ``since`` that match the PCRE2 ``grep``,
    the newest ``lines`` of them, each with its time (``--output short-unix``), through an AnsibleModule's
    run_command; text None and the reason when journalctl is missing or fails (a journalctl without --grep)."""
    journalctl = module.get_bin_path("journalctl")
    if not journalctl:
        return None, "journalctl is not installed"
    rc, out, err = module.run_command([journalctl, "--unit", unit, "--since", "@%d" % int(since), "--grep", grep,
                                       "--lines", str(lines), "--output", "short-unix", "--no-pager", "--quiet"],
                                      environ_update=C_LOCALE)
    # journalctl exits 1 when --grep matched nothing
    if rc != 0 and not (rc == 1 and not err.strip()):
        return None, "journalctl failed (rc %d): %s" % (rc, " ".join(err.split())[:200])
    return out, None

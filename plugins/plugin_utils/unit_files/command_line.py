# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""SGLang's command line, written: server arguments as an argv list (:func:`cli_args`) and an argv as one systemd
``ExecStart=`` value (:func:`exec_start`). Pure and stdlib only; the filters sglang_cli_args and sglang_exec_start
(plugins/filter/, a file each) and the sglang_service role's units (plugin_utils/unit_files/service_units.py) use it."""
from __future__ import annotations

import json
import math
import re
from typing import Any

from ansible_collections.llmserve.sglang.plugins.module_utils import checks

_FLAG_NAME = re.compile(r"^[a-z0-9]+(?:[_-][a-z0-9]+)*$")
# systemd treats these as prefixes of the executable (systemd.service, "Command lines"); quoting does not help.
_EXEC_PREFIXES = "@-:+!|"
_C_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\r": "\\r", "\a": "\\a", "\b": "\\b",
              "\f": "\\f", "\v": "\\v"}
_NEEDS_QUOTES = re.compile(r"""[\s"'\\;]|[\x00-\x1f\x7f]""")


class CommandLineError(checks.InvalidInput):
    """Server arguments or a command that cannot be written; the message names the filter, the flag and the value."""


def _scalar(flag: str, value: Any, where: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, float):
        if not math.isfinite(value):
            raise CommandLineError("sglang_cli_args: %s %s is %r, not a finite number" % (flag, where, value))
        return repr(float(value))
    if isinstance(value, str):
        return str(value)
    if isinstance(value, dict):
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    raise CommandLineError("sglang_cli_args: %s %s is a %s; give a string, number, boolean, list or dict"
                           % (flag, where, type(value).__name__))


def cli_args(server_args: Any) -> list[str]:
    """{'tp_size': 8, 'enable_dp_attention': True, 'cuda_graph_bs': [1, 2, 4]} ->
    ['--tp-size', '8', '--enable-dp-attention', '--cuda-graph-bs', '1', '2', '4']."""
    if server_args is None:
        return []
    if not isinstance(server_args, dict):
        raise CommandLineError("sglang_cli_args expects a dictionary of server arguments, got %s"
                               % type(server_args).__name__)
    argv: list[str] = []
    for key, value in server_args.items():
        if not isinstance(key, str) or not _FLAG_NAME.match(key):
            raise CommandLineError(
                "sglang_cli_args: %r is not a valid SGLang flag name: use lowercase letters, digits and single '_' "
                "or '-' between them, without the leading '--' (e.g. tp_size or mem-fraction-static)" % (key,))
        flag = "--" + key.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            argv.append(flag)
        elif isinstance(value, (list, tuple)):
            if not value:
                continue
            items: list[str] = []
            for i, item in enumerate(value):
                if item is None or isinstance(item, (list, tuple)):
                    raise CommandLineError("sglang_cli_args: %s item %d is %r; list items must be strings, numbers, "
                                           "booleans or dicts" % (flag, i, item))
                items.append(_scalar(flag, item, "item %d" % i))
            argv.append(flag)
            argv.extend(items)
        else:
            argv.extend([flag, _scalar(flag, value, "value")])
    return argv


def systemd_quote(word: Any) -> str:
    """One argument for a systemd command line (systemd.service "Command lines", systemd.syntax "Quoting"):
    '%' -> '%%' (specifiers are expanded before unquoting, inside quotes too), '$' -> '$$' (environment
    substitution), and double quotes with C escapes around any word holding whitespace, quotes, backslashes,
    ';' or control characters (or an empty one)."""
    word = str(word).replace("%", "%%").replace("$", "$$")
    if word and not _NEEDS_QUOTES.search(word):
        return word
    out: list[str] = []
    for ch in word:
        if ch in _C_ESCAPES:
            out.append(_C_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7f:
            out.append("\\x%02x" % ord(ch))
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def exec_start(value: Any, command: Any = None) -> str:
    """A dict of server arguments (rendered with :func:`cli_args`) or an argv list, after `command` (the executable
    and its first arguments), as one string for ExecStart=."""
    if isinstance(value, dict) or value is None:
        args = cli_args(value)
    elif isinstance(value, (list, tuple)):
        args = list(value)
    else:
        raise CommandLineError("sglang_exec_start expects server arguments (a dictionary) or an argv list, got %s"
                               % type(value).__name__)
    head: list[Any]
    if command is None:
        head = []
    elif isinstance(command, str):
        head = [command]
    elif isinstance(command, (list, tuple)):
        head = list(command)
    else:
        raise CommandLineError("sglang_exec_start: command must be a list of strings (the executable and its "
                               "arguments), got %s" % type(command).__name__)
    argv = head + args
    if not argv:
        raise CommandLineError("sglang_exec_start: nothing to run: give command or an argv list")
    for i, word in enumerate(argv):
        if not isinstance(word, (str, int, float)) or isinstance(word, bool):
            raise CommandLineError("sglang_exec_start: argument %d is %r; arguments must be strings or numbers"
                                   % (i, word))
    exe = str(argv[0])
    if not exe or exe[0] in _EXEC_PREFIXES:
        raise CommandLineError("sglang_exec_start: the executable %r is empty or starts with one of %s, which "
                               "systemd reads as ExecStart= prefixes; give an absolute path" % (exe, _EXEC_PREFIXES))
    return " ".join(systemd_quote(w) for w in argv)

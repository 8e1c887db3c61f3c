# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang_cli_args (dict -> argv) and sglang_exec_start (argv -> ExecStart=) with awkward values. The ExecStart
strings are read back with the rules of systemd.service(5) "Command lines" / systemd.syntax(7) "Quoting" (specifiers,
then word splitting with quotes and C escapes, then $$), and, where systemd-analyze exists, checked by systemd."""
from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.llmserve.sglang.plugins.filter import sglang_cli_args as cli_args
from ansible_collections.llmserve.sglang.plugins.filter import sglang_exec_start as exec_start

sglang_cli_args = cli_args.FilterModule().filters()["sglang_cli_args"]
sglang_exec_start = exec_start.FilterModule().filters()["sglang_exec_start"]


def test_basic_mapping():
    args = {"model_path": "/models/Kimi-K2.5", "tp_size": 8, "mem_fraction_static": 0.88,
            "enable_dp_attention": False, "trust_remote_code": True, "max_total_tokens": None,
            "cuda_graph_bs": [1, 2, 4], "json_model_override_args": {"rope_scaling": {"type": "yarn", "factor": 2}},
            "kv-cache-dtype": "fp8_e4m3", "chunked_prefill_size": -1, "disable_radix_cache": 0}
    assert sglang_cli_args(args) == [
        "--model-path", "/models/Kimi-K2.5", "--tp-size", "8", "--mem-fraction-static", "0.88",
        "--trust-remote-code", "--cuda-graph-bs", "1", "2", "4",
        "--json-model-override-args", '{"rope_scaling":{"type":"yarn","factor":2}}',
        "--kv-cache-dtype", "fp8_e4m3", "--chunked-prefill-size", "-1", "--disable-radix-cache", "0"]


def test_values():
    assert sglang_cli_args({"x": 1e-05}) == ["--x", "1e-05"]
    assert sglang_cli_args({"x": 0.1 + 0.2}) == ["--x", "0.30000000000000004"]   # repr round-trips
    assert sglang_cli_args({"x": "a b 'c' \"d\""}) == ["--x", "a b 'c' \"d\""]
    assert sglang_cli_args({"x": ""}) == ["--x", ""]
    assert sglang_cli_args({"x": []}) == []
    assert sglang_cli_args({"x": [True, "y", {"k": "v"}]}) == ["--x", "true", "y", '{"k":"v"}']
    assert sglang_cli_args({"x": {"ünï": "çødé"}}) == ["--x", '{"ünï":"çødé"}']
    assert sglang_cli_args({}) == [] and sglang_cli_args(None) == []


@pytest.mark.parametrize("key", ["--tp-size", "Tp_size", "tp size", "", "tp__size", "_tp", "tp-", "tp=8", 8])
def test_bad_keys(key):
    with pytest.raises(AnsibleFilterError, match="is not a valid SGLang flag name"):
        sglang_cli_args({key: 1})


@pytest.mark.parametrize("value,message", [
    ({"x": [1, [2]]}, "--x item 1 is \\[2\\]"),
    ({"x": [None]}, "--x item 0 is None"),
    ({"x": float("nan")}, "--x value is nan, not a finite number"),
    ({"x": {1, 2}}, "--x value is a set"),
    ("tp_size=8", "expects a dictionary of server arguments, got str"),
    ([["--tp-size", "8"]], "expects a dictionary of server arguments, got list"),
])
def test_bad_values(value, message):
    with pytest.raises(AnsibleFilterError, match=message):
        sglang_cli_args(value)


# ------------------------------------------------------------------------------------------------------------------
# ExecStart
# ------------------------------------------------------------------------------------------------------------------

_CUNESCAPE = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "\\": "\\", '"': '"',
              "'": "'", "s": " "}


def systemd_argv(line):
    """What systemd makes of an ExecStart= value: % specifiers (%% -> %, others refused), words split on unquoted
    whitespace with "..." or '...' around whole words and C escapes, then environment substitution ($$ -> $; a
    lone $VAR would be substituted, which the filter must never leave)."""
    def specifier(m):
        if m.group(1) != "%":
            raise AssertionError("unescaped specifier %%%s in %r" % (m.group(1), line))
        return "%"
    line = re.sub(r"%(.)", specifier, line)
    words, i = [], 0
    while i < len(line):
        if line[i] in " \t":
            i += 1
            continue
        assert not (line[i] == ";" and line[i + 1:i + 2] in ("", " ", "\t")), "lone ; separates commands: %r" % line
        quote = line[i] if line[i] in "\"'" else None
        i += 1 if quote else 0
        word = []
        while i < len(line):
            ch = line[i]
            if quote and ch == quote:
                i += 1
                assert i == len(line) or line[i] in " \t", "closing quote not followed by whitespace in %r" % line
                break
            if not quote and ch in " \t":
                break
            if ch == "\\":
                nxt = line[i + 1]
                if nxt == "x":
                    word.append(chr(int(line[i + 2:i + 4], 16)))
                    i += 4
                    continue
                assert nxt in _CUNESCAPE, "unknown escape \\%s in %r" % (nxt, line)
                word.append(_CUNESCAPE[nxt])
                i += 2
                continue
            if not quote:
                assert ch not in "\"'", "quote inside an unquoted word in %r" % line
            word.append(ch)
            i += 1
        else:
            assert not quote, "unbalanced quote in %r" % line
        words.append("".join(word))
    out = []
    for w in words:
        assert not re.search(r"(?<!\$)\$(?!\$)(\{|[A-Za-z_])", w.replace("$$", "")), "variable left in %r" % w
        out.append(w.replace("$$", "$"))
    return out


AWKWARD = [
    "/models/My Model (v2)",
    "100%",
    "%n %i %%",
    "$HOME",
    "${HOME}/x",
    "$$",
    'say "hi"',
    "it's",
    "back\\slash\\",
    "tab\there",
    "new\nline",
    "bell\x07",
    ";",
    "a;b",
    "",
    "ünïcødé ✓",
    '{"rope_scaling":{"type":"yarn","factor":2},"note":"50% $off"}',
]


@pytest.mark.parametrize("word", AWKWARD)
def test_exec_start_round_trip(word):
    argv = ["/opt/sglang/venv/bin/python", "-m", "sglang.launch_server", "--served-model-name", word]
    line = sglang_exec_start(argv)
    assert "\n" not in line
    assert systemd_argv(line) == argv


def test_exec_start_from_server_args():
    server_args = {"model_path": "/models/My Model", "tp_size": 8, "trust_remote_code": True,
                   "chat_template": "100% $x", "json_model_override_args": {"a": "b c"}, "enable_dp_attention": False}
    line = sglang_exec_start(server_args, command=["/opt/venv/bin/python", "-m", "sglang.launch_server"])
    assert line == ('/opt/venv/bin/python -m sglang.launch_server --model-path "/models/My Model" --tp-size 8 '
                    '--trust-remote-code --chat-template "100%% $$x" --json-model-override-args "{\\"a\\":\\"b c\\"}"')
    assert systemd_argv(line) == ["/opt/venv/bin/python", "-m", "sglang.launch_server"] + sglang_cli_args(server_args)
    assert sglang_exec_start(server_args, command="/usr/bin/sglang-serve").startswith("/usr/bin/sglang-serve --model")


@pytest.mark.parametrize("value,command,message", [
    ({}, None, "nothing to run"),
    (["-m", "x"], None, "starts with one of"),
    (["@/bin/python"], None, "starts with one of"),
    ({"tp_size": 1}, ["", "x"], "is empty or starts with"),
    (["/bin/x", None], None, "argument 1 is None"),
    ("python -m x", None, "expects server arguments"),
    ({"tp_size": 1}, {"a": 1}, "command must be a list"),
])
def test_exec_start_errors(value, command, message):
    with pytest.raises(AnsibleFilterError, match=message):
        sglang_exec_start(value, command=command)


@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="systemd-analyze is not installed")
def test_systemd_accepts_the_line(tmp_path):
    """systemd itself parses the unit: no 'Unbalanced quoting', unknown escape or unresolvable specifier."""
    argv = ["/bin/echo"] + AWKWARD + [json.dumps({"a": "%i $HOME \\ \" '"})]
    unit = tmp_path / "llmserve-quoting-test.service"
    unit.write_text("[Unit]\nDescription=quoting test\n\n[Service]\nExecStart=%s\n" % sglang_exec_start(argv))
    proc = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "quoting" not in proc.stderr.lower() and "escape" not in proc.stderr.lower(), proc.stderr

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""unit_files/command_line.py directly (tests/unit/plugins/filter/test_sglang_cli_args.py: through the filters, and
the line systemd itself reads back)."""
from __future__ import annotations

import pytest

from ansible_collections.llmserve.sglang.plugins.plugin_utils.unit_files.command_line import (
    CommandLineError, cli_args, exec_start, systemd_quote)


def test_server_arguments_as_flags():
    assert cli_args({"tp_size": 8, "enable_dp_attention": True, "disable_radix_cache": False, "chunked_prefill_size": None,
                     "cuda_graph_bs": [1, 2, 4], "mem-fraction-static": 0.9, "json_model_override_args": {"a": 1},
                     "empty": []}) == [
        "--tp-size", "8", "--enable-dp-attention", "--cuda-graph-bs", "1", "2", "4", "--mem-fraction-static", "0.9",
        "--json-model-override-args", '{"a":1}']
    assert cli_args(None) == []


@pytest.mark.parametrize("server_args, message", [
    ([1], "expects a dictionary of server arguments, got list"),
    ({"--tp": 8}, "is not a valid SGLang flag name"),
    ({"tp_size": float("nan")}, "--tp-size value is nan, not a finite number"),
    ({"cuda_graph_bs": [1, None]}, "--cuda-graph-bs item 1 is None"),
    ({"model": object()}, "--model value is a object"),
])
def test_arguments_that_cannot_be_written_are_refused_by_name(server_args, message):
    with pytest.raises(CommandLineError, match=message.replace("(", r"\(")):
        cli_args(server_args)


@pytest.mark.parametrize("word, quoted", [
    ("plain", "plain"), ("50%", "50%%"), ("$HOME", "$$HOME"), ("two words", '"two words"'), ("", '""'),
    ('say "hi"', '"say \\"hi\\""'), ("a;b", '"a;b"'), ("tab\there", '"tab\\there"')])
def test_one_argument_as_systemd_reads_it(word, quoted):
    assert systemd_quote(word) == quoted


def test_an_exec_start_line_from_arguments_or_an_argv():
    assert exec_start({"tp_size": 2}, ["/opt/sglang/bin/python", "-m", "sglang.launch_server"]) == \
        "/opt/sglang/bin/python -m sglang.launch_server --tp-size 2"
    assert exec_start(["/usr/bin/env", "A=b c"]) == '/usr/bin/env "A=b c"'


@pytest.mark.parametrize("value, command, message", [
    ("x", None, "expects server arguments"), ({}, None, "nothing to run"), ({}, 5, "command must be a list"),
    ([True], None, "argument 0 is True"), (["-/bin/true"], None, "which systemd reads as ExecStart= prefixes")])
def test_an_exec_start_that_cannot_be_written_is_refused(value, command, message):
    with pytest.raises(CommandLineError, match=message):
        exec_start(value, command)

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""server_args: one reading of SGLang's arguments from a command line and from the startup log, one secrets policy,
the probe URL, the running --mem-fraction-static and the fingerprint's memory subset."""
from __future__ import annotations

import pytest

from ansible_collections.llmserve.sglang.plugins.module_utils.service import server_args as sa
from ansible_collections.llmserve.sglang.plugins.module_utils.startup.startup_log import parse_startup_log

ARGV = ["/opt/sglang/venv/bin/python", "-m", "sglang.launch_server", "--model-path", "/models/k", "--tp", "8",
        "--trust-remote-code", "--cuda-graph-bs", "1", "2", "4", "--mem-fraction-static", "0.88",
        "--api-key", "s3cret", "--port=30000", "--admin-api-key=adm"]


def test_argv_flags_values_lists_aliases_and_secrets():
    args = sa.from_argv(ARGV)
    assert args == {"model_path": "/models/k", "tp_size": "8", "trust_remote_code": True,
                    "cuda_graph_bs": ["1", "2", "4"], "mem_fraction_static": "0.88", "port": "30000",
                    "api_key": sa.REDACTED, "admin_api_key": sa.REDACTED}
    assert "s3cret" not in repr(args) and "adm" not in repr(args).replace("admin", "")
    memory = sa.memory_args(args)
    assert memory["cuda_graph_bs"] == [1, 2, 4] and memory["tp_size"] == 8
    assert set(memory) == set(sa.MEMORY_ARGS)


def test_argv_must_be_a_list():
    with pytest.raises(sa.ServerArgsError, match="list of words"):
        sa.from_argv("--tp-size 8")


@pytest.mark.parametrize("name, expected", [
    ("--tp-size", "tp_size"), ("TP-SIZE", "tp_size"), ("tp", "tp_size"), ("context_len", "context_length"),
    ("--speculative-algo", "speculative_algorithm"), ("mem-fraction-static", "mem_fraction_static"),
])
def test_canonical_names(name, expected):
    assert sa.canonical(name) == expected


def test_the_same_args_read_the_same_from_argv_and_from_the_log():
    line = ("[2026-01-01 00:00:00] server_args=ServerArgs(model_path='/models/k', tp_size=8, cuda_graph_bs=[4, 2, 1], "
            "mem_fraction_static=0.88, port=30000, api_key='s3cret', admin_api_key=None, trust_remote_code=True)")
    logged = sa.from_log_line(line)
    assert logged["api_key"] == sa.REDACTED and logged["admin_api_key"] is None
    assert sa.memory_args(logged) == sa.memory_args(sa.from_argv(ARGV))
    assert sa.mem_fraction_static(logged) == sa.mem_fraction_static(sa.from_argv(ARGV)) == 0.88
    assert sa.probe_url(logged) == sa.probe_url(sa.from_argv(ARGV)) == "http://127.0.0.1:30000"


@pytest.mark.parametrize("args, url", [
    ({}, "http://127.0.0.1:30000"), ({"host": "0.0.0.0", "port": "31000"}, "http://127.0.0.1:31000"),
    ({"host": "::"}, "http://127.0.0.1:30000"), ({"host": "::1", "port": 8000}, "http://[::1]:8000"),
    ({"host": "10.0.0.5"}, "http://10.0.0.5:30000"),
])
def test_probe_url(args, url):
    assert sa.probe_url(args) == url


@pytest.mark.parametrize("value, expected", [(None, None), ("0.9125", 0.9125), (0.88, 0.88), ("0.8", 0.8)])
def test_mem_fraction_static(value, expected):
    assert sa.mem_fraction_static({"mem_fraction_static": value}) == expected


@pytest.mark.parametrize("value, match", [("lots", "number"), ("1.5", r"\(0, 1\)"), (True, "number"), ("0", r"\(0, 1\)")])
def test_mem_fraction_static_rejects(value, match):
    with pytest.raises(sa.ServerArgsError, match=match):
        sa.mem_fraction_static({"mem_fraction_static": value})


# ----------------------------------------------------------------------------------------------------------
# The startup log's ServerArgs(...) repr, without eval
# ----------------------------------------------------------------------------------------------------------

def test_repr_literals_and_unknown_objects():
    line = ("[2026-01-01 00:00:00] server_args=ServerArgs(model_path='a\\'b', n=-3, f=1.5e-3, none=None, t=True, "
            "lst=[1, 'x', [2]], tup=(1, 2), d={'k': 'v', 1: None}, s={'a'}, "
            "obj=AttentionConfig(backend=None, flash=3), enum=<Mode.FAST: 1>, path=PosixPath('/x'), inf=inf, "
            "last='ok')")
    args = sa.from_log_line(line)
    assert args["model_path"] == "a'b"
    assert (args["n"], args["f"], args["none"], args["t"]) == (-3, 1.5e-3, None, True)
    assert args["lst"] == [1, "x", [2]] and args["tup"] == [1, 2]
    assert args["d"] == {"k": "v", "1": None} and args["s"] == ["a"]
    assert args["obj"] == "AttentionConfig(backend=None, flash=3)"
    assert args["enum"] == "<Mode.FAST: 1>" and args["path"] == "PosixPath('/x')" and args["inf"] == "inf"
    assert args["last"] == "ok"


def test_repr_is_never_evaluated():
    args = sa.from_log_line("server_args=ServerArgs(model_path=__import__('os').system('false'), tp_size=2)")
    assert args == {"model_path": "__import__('os').system('false')", "tp_size": 2}


def test_repr_secrets_are_redacted():
    # SGLang prints its API keys in this line (sgl-project/sglang#37457): they must not reach Ansible's output.
    args = sa.from_log_line("server_args=ServerArgs(model_path='m', api_key='sk-live-123', admin_api_key=None, "
                            "ssl_keyfile_password='pw', tp_size=8)")
    assert args == {"model_path": "m", "api_key": "[REDACTED]", "admin_api_key": None,
                    "ssl_keyfile_password": "[REDACTED]", "tp_size": 8}
    facts = parse_startup_log("[2026-01-01 00:00:00] server_args=ServerArgs(model_path='m', api_key='sk-live-123')\n"
                              "[2026-01-01 00:00:01] Load weight begin. avail mem=78.58 GB\n")
    assert "sk-live-123" not in repr(facts)


def test_repr_truncated_line():
    args = sa.from_log_line("server_args=ServerArgs(model_path='m', tp_size=8, mem_fraction_static=0.9, chunk")
    assert args == {"model_path": "m", "tp_size": 8, "mem_fraction_static": 0.9}
    assert sa.from_log_line("no args here") == {}


@pytest.mark.parametrize("args, match", [
    (["--tp", "8"], "server_args"), ({"tp": "eight"}, "tp_size"), ({"tp": 1.5}, "integer"), ({"tp": True}, "tp_size"),
    ({"hicache_ratio": float("inf")}, "finite"), ({"enable_dp_attention": "maybe"}, "boolean"),
    ({"cuda_graph_bs": 8}, "list"),
])
def test_memory_args_rejects(args, match):
    with pytest.raises(sa.ServerArgsError, match=match):
        sa.memory_args(args)


def test_text_a_server_printed_loses_its_secrets_and_any_hf_token():
    text = "api_key='sk-1' HF_TOKEN=hf_%s other=hf_%s short=hf_abc" % ("a1" * 17, "Q" * 34)
    assert sa.redact_text(text, ["sk-1", "", None]) == \
        "api_key='********' HF_TOKEN=******** other=******** short=hf_abc"
    # a longer secret that holds a shorter one is masked whole
    assert sa.redact_text("k=abc-long", ["abc", "abc-long"]) == "k=********"

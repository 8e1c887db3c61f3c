# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang_ready through ansible-runner on localhost: a server that generates, one that refuses the API key, none."""
from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "sim"))
import simlib  # noqa: E402  pylint: disable=wrong-import-position


@pytest.fixture(name="server")
def fixture_server(tmp_path):
    sim = simlib.Sim(str(tmp_path / "host"), simlib.profile_host("single-gpu"))
    server = sim.start(simlib.launch_args("single-gpu", api_key="k3y"))
    try:
        yield server
    finally:
        server.stop()


def test_ready_once_the_server_generates(ansible, server):
    result = ansible.module("sglang_ready", {"url": server.url, "api_key": "k3y", "timeout": 60, "interval": 0.5})
    assert not result["failed"], result
    assert result["ready"] is True and result["reason"] is None and result["changed"] is False
    assert "k3y" not in str(result.get("invocation"))


def test_a_wrong_api_key_is_not_ready(ansible, server):
    assert server.wait_ready(), server.log
    result = ansible.module("sglang_ready", {"url": server.url, "api_key": "wrong", "timeout": 2, "interval": 0.5})
    assert result["ready"] is False and result["reason"] == "timeout" and "401" in result["detail"], result


def test_no_server_is_a_timeout_not_a_failure(ansible):
    result = ansible.module("sglang_ready", {"url": "http://127.0.0.1:%d" % simlib.free_port(), "timeout": 1.5,
                                             "interval": 0.5})
    assert not result["failed"] and result["ready"] is False and result["reason"] == "timeout", result


def test_bad_options_fail(ansible):
    result = ansible.module("sglang_ready", {"timeout": 0})
    assert result["failed"] and "timeout and interval must be > 0" in result["msg"]

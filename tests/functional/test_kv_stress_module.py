# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""kv_stress through ansible-runner on localhost, against a local simulated field server and its nvidia-smi."""
from __future__ import annotations

import os
import shlex
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "sim"))
import simlib  # noqa: E402  pylint: disable=wrong-import-position


@pytest.fixture
def field_server(tmp_path):
    """(simulated field server at 0.88 with an API key, path of an nvidia-smi showing its GPUs)."""
    sim = simlib.Sim(str(tmp_path / "host"), simlib.profile_host("field"))
    server = sim.start(simlib.launch_args("field", api_key="k3y"))
    smi = tmp_path / "nvidia-smi"
    exports = "".join("export %s=%s\n" % (name, shlex.quote(sim.env[name]))
                      for name in ("PYTHONPATH", "SGLANG_SIM_HOST", "SGLANG_SIM_STATE"))
    smi.write_text("#!/bin/sh\n%sexec %s -m sglang_sim.smi \"$@\"\n" % (exports, shlex.quote(sys.executable)))
    smi.chmod(0o755)
    try:
        assert server.wait_ready(), server.log
        yield server, str(smi)
    finally:
        server.stop()


def test_kv_stress_module_holds_on_the_field_host(ansible, field_server):
    server, smi = field_server
    result = ansible.module("kv_stress", {"url": server.url, "api_key": "k3y", "duration": 1, "request_timeout": 30,
                                          "nvidia_smi": smi, "prefer": "nvidia_smi", "seed": 5})
    assert not result["failed"], result
    assert result["changed"] is False and result["held"] is True and result["failure_reason"] is None
    assert result["fill_reached"] >= 0.9 and result["pool_tokens"] == 159282
    assert result["samples"] >= 2 and len(result["min_free_gib_per_gpu"]) == 8
    assert result["min_free_gib"] < 7.42 - 2.5                   # 7.42 GiB free idle, a prefill chunk cached under load
    assert "k3y" not in str(result.get("invocation"))


def test_kv_stress_module_fails_cleanly_without_a_server(ansible):
    result = ansible.module("kv_stress", {"url": "http://127.0.0.1:%d" % simlib.free_port(), "rounds": 1,
                                          "request_timeout": 5})
    assert result["failed"] and "cannot read the server info" in result["msg"]


def test_kv_stress_module_is_skipped_in_check_mode(ansible, field_server):
    server, smi = field_server
    play = [{"hosts": "localhost", "gather_facts": False,
             "tasks": [{"name": "module under test", "llmserve.sglang.kv_stress": {
                 "url": server.url, "api_key": "k3y", "rounds": 1, "nvidia_smi": smi}}]}]
    runner = ansible._run(playbook=play, cmdline="--check")  # pylint: disable=protected-access
    assert runner.status == "successful", runner.stdout.read()
    assert runner.stats["skipped"] == {"localhost": 1} and not runner.stats["ok"], runner.stats

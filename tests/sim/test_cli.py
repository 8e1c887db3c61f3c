# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The simulator's command lines and HTTP surface: flags, API key, endpoints, profiles, the sglang package."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import simlib


def test_unknown_flag_is_an_argparse_error(make_sim):
    done = make_sim("single-gpu").run("sglang.launch_server", simlib.launch_args("single-gpu") + ["--no-such-flag"])
    assert done.returncode == 2
    assert "launch_server.py: error: unrecognized arguments: --no-such-flag" in done.stderr


def test_sglang_flag_spellings_and_abbreviations(make_sim):
    sim = make_sim("field")
    args = simlib.launch_args("field", tp_size=None) + ["--tp", "8", "--model", simlib.launch_args("field")[1],
                                                        "--kv-cache-dtype", "bf16", "--cuda-graph-max-bs", "32",
                                                        "--enable-metrics"]
    server = sim.start(args)
    assert server.wait_ready(), server.log
    status, info = simlib.request(server.url + "/server_info")
    assert status == 200 and info["tp_size"] == 8 and info["cuda_graph_max_bs"] == 32
    assert info["cuda_graph_bs"][-1] == 32 and info["speculative_num_draft_tokens"] == 4
    assert info["version"] == "0.5.9" and info["internal_states"][0]["memory_usage"]["weight"] == 72.33
    status, metrics = simlib.request(server.url + "/metrics")
    assert status == 200 and "sglang:max_total_num_tokens{" in metrics


def test_api_key_guards_everything_but_health(make_sim):
    server = make_sim("single-gpu").start(simlib.launch_args("single-gpu") + ["--api-key", "sekrit"])
    assert server.wait_ready(), server.log
    body = {"text": "hi", "sampling_params": {"max_new_tokens": 3}}
    assert simlib.request(server.url + "/generate", body) == (401, {"error": "Unauthorized"})
    assert simlib.request(server.url + "/v1/models")[0] == 401
    assert simlib.request(server.url + "/model_info", headers={"Authorization": "Bearer wrong"})[0] == 401
    assert simlib.request(server.url + "/health")[0] == 200
    assert simlib.request(server.url + "/health_generate")[0] == 200
    status, result = simlib.request(server.url + "/generate", body, headers={"Authorization": "Bearer sekrit"})
    assert status == 200 and result["meta_info"]["completion_tokens"] == 3


def test_endpoints_have_sglangs_shapes(make_sim):
    server = make_sim("single-gpu").start(simlib.launch_args("single-gpu"))
    assert server.wait_ready(), server.log
    url = server.url
    status, info = simlib.request(url + "/get_model_info")
    assert status == 200 and info["is_generation"] is True and info["architectures"] == ["LlamaForCausalLM"]
    status, models = simlib.request(url + "/v1/models")
    assert models["data"][0]["id"] == "llama-3.1-8b" and models["data"][0]["max_model_len"] == 131072
    status, batch = simlib.request(url + "/generate", {"text": ["a b c d", "e"], "sampling_params": {
        "max_new_tokens": 5}})
    assert status == 200 and [item["meta_info"]["completion_tokens"] for item in batch] == [5, 5]
    assert batch[0]["meta_info"]["prompt_tokens"] == 2 and batch[0]["meta_info"]["finish_reason"]["type"] == "length"
    status, chat = simlib.request(url + "/v1/chat/completions", {
        "model": "llama-3.1-8b", "messages": [{"role": "user", "content": "Hello there"}], "max_tokens": 7})
    assert status == 200 and chat["object"] == "chat.completion" and chat["usage"]["completion_tokens"] == 7
    assert chat["choices"][0]["message"]["role"] == "assistant"
    status, load = simlib.request(url + "/get_load")
    assert status == 200 and load[0]["num_reqs"] == 0
    assert simlib.request(url + "/no/such/path")[0] == 404


def test_port_is_closed_while_loading(make_sim):
    """SGLang listens only once the schedulers are up (the realistic scale takes long enough to see it); SIGTERM
    while loading ends the process by the signal and frees the simulated GPUs."""
    sim = make_sim("single-gpu", time_scale="realistic")
    server = sim.start(simlib.launch_args("single-gpu"))
    deadline = time.time() + 10
    while "Load weight begin." not in server.log and time.time() < deadline:
        time.sleep(0.05)
    assert simlib.request(server.url + "/health", timeout=2)[0] == 0
    assert sim.state_files() == [os.path.join(sim.state_dir, "gpus-%d.json" % server.proc.pid)]
    server.stop()
    assert server.proc.returncode == -signal.SIGTERM
    assert not sim.state_files()


def test_sigterm_while_serving_is_a_clean_exit(make_sim):
    sim = make_sim("single-gpu")
    server = sim.start(simlib.launch_args("single-gpu"))
    assert server.wait_ready(), server.log
    server.stop()
    assert server.proc.returncode == 0 and "INFO:     Shutting down" in server.log
    assert not sim.state_files()


def test_profile_install_is_idempotent(make_sim, tmp_path):
    sim = make_sim("field")
    root = str(tmp_path / "root")
    first = json.loads(sim.run("sglang_sim.profiles", ["install", "field", "--root", root]).stdout)
    assert first["changed"] and first["host_json"] == os.path.join(root, "etc/sglang-sim/host.json")
    assert os.path.isfile(os.path.join(root, "models/field/draft/model.safetensors.index.json"))
    with open(first["host_json"], encoding="utf-8") as handle:
        host = json.load(handle)
    assert "/models/field/model" in host["default_launch_args"]
    assert "/models/field/draft" in host["default_launch_args"]
    again = json.loads(sim.run("sglang_sim.profiles", ["install", "field", "--root", root]).stdout)
    assert again["changed"] is False
    listing = sim.run("sglang_sim.profiles", ["list"]).stdout
    assert all(name in listing for name in ("field", "h100-llama70b", "h200-deepseek-v3", "single-gpu",
                                            "single-gpu-hybrid"))


def test_sglang_package_reports_the_hosts_version(make_sim):
    sim = make_sim("single-gpu")
    done = sim.run("sglang_sim", ["--help"])
    assert done.returncode == 0 and "--mem-fraction-static" in done.stdout
    code = "import sglang; print(sglang.__version__)"
    version = subprocess.run([sys.executable, "-c", code], env=sim.env, capture_output=True, text=True,
                             timeout=30, check=True).stdout.strip()
    assert version == "0.5.5.post3"
    missing = dict(sim.env, SGLANG_SIM_HOST=os.path.join(sim.directory, "missing.json"))
    fallback = subprocess.run([sys.executable, "-c", code], env=missing, capture_output=True, text=True,
                              timeout=30, check=True).stdout.strip()
    assert fallback == "0.5.9"

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Hybrid linear-attention (Gated DeltaNet / Mamba-state) models: Qwen3-Next and Qwen3.5.

The arithmetic is SGLang's ``handle_max_mamba_cache`` of each release (memory.Server._mamba_budget); the reference
numbers are a real boot of Qwen/Qwen3.5-9B, TP2 on two RTX 4090 at --mem-fraction-static 0.8 (an SGLang source
build of April 2026, era F arithmetic):

    Load weight begin. avail mem=22.93 GB
    Load weight end. elapsed=5.54 s, type=Qwen3_5ForConditionalGeneration, avail mem=14.08 GB, mem usage=8.85 GB.
    Mamba Cache is allocated. max_mamba_cache_size: 186, conv_state size: 0.10GB, ssm_state size: 4.38GB
    KV Cache is allocated. #tokens: 327310, K size: 2.50 GB, V size: 2.50 GB
    max_total_num_tokens=327310, ... max_running_requests=62, context_len=262144, ...
"""
from __future__ import annotations

import copy
import json
import os
import re
import sys

import pytest

import simlib

from ansible_collections.llmserve.sglang.plugins.module_utils.startup.startup_log import parse_startup_log

if simlib.SIM_SRC not in sys.path:
    sys.path.insert(0, simlib.SIM_SRC)

from sglang_sim import args as server_args  # noqa: E402  (needs SIM_SRC on sys.path)
from sglang_sim import hostspec, logs, memory  # noqa: E402
from sglang_sim.hostspec import GIB, SimConfigError  # noqa: E402
from sglang_sim.model import Model, load_model  # noqa: E402

PROFILE = "single-gpu-hybrid"
MODEL_DIR = os.path.join(simlib.PROFILES, PROFILE, "model")
REAL_MAMBA_LINE = ("Mamba Cache is allocated. max_mamba_cache_size: 186, conv_state size: 0.10GB, "
                   "ssm_state size: 4.38GB ")
REAL_TOKENS = 327310
# Qwen3-Next-80B-A3B's text geometry (hidden 2048, 48 layers, 2 KV heads of 256, GDN 16 x 128 keys, 32 x 128 values).
QWEN3_NEXT = {"architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "hidden_size": 2048,
              "num_hidden_layers": 48, "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256,
              "full_attention_interval": 4, "linear_num_key_heads": 16, "linear_num_value_heads": 32,
              "linear_key_head_dim": 128, "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
              "max_position_embeddings": 262144, "vocab_size": 151936, "torch_dtype": "bfloat16"}


def _host(version="0.5.17", count=1, total_mib=81559, context_mib=500):
    return hostspec.Host({"gpu": {"name": "NVIDIA H100 80GB HBM3", "count": count, "memory_total_mib": total_mib},
                          "sglang_version": version, "cuda_context_mib": context_mib}, "test host")


def _model(config=None, total_size=19005230284):
    if config is None:
        return load_model(MODEL_DIR)
    return Model("/models/test", copy.deepcopy(config), total_size)


def _server(version="0.5.17", argv=(), model=None, host=None):
    """A memory.Server (not started) for the Qwen3.5-9B profile model, or ``model``, with these flags."""
    model = model or _model()
    host = host or _host(version)
    args = server_args.parse(["--model-path", MODEL_DIR] + list(argv))
    server_args.resolve(args, host, model, memory.era(version) == memory.ERA_CURRENT)
    return memory.Server(host, model, None, args)


# -- model.py ------------------------------------------------------------------------------------------------------

def test_qwen35_9b_geometry_and_state_per_request():
    model = _model()
    assert model.hybrid_gdn and model.qwen3_5 and model.is_multimodal
    assert model.architecture == "Qwen3_5ForConditionalGeneration" and model.num_layers == 32
    assert model.full_attention_layer_ids == [3, 7, 11, 15, 19, 23, 27, 31]
    assert (model.num_full_attention_layers, model.num_linear_layers) == (8, 24)
    assert (model.num_kv_heads, model.head_dim, model.config_mamba_ssm_dtype) == (4, 256, "float32")
    # conv_dim = 2 * 128 * 16 + 128 * 32 = 8192; conv (8192/tp, 3) bf16, ssm (32/tp, 128, 128) fp32, x 24 layers.
    assert model.mamba_state_shapes(2) == ((4096, 3), (16, 128, 128))
    assert model.mamba_state_bytes(2) == (4096 * 3 * 2 * 24, 16 * 128 * 128 * 4 * 24)
    assert model.mamba_bytes_per_request(1) == 51511296 == 2 * model.mamba_bytes_per_request(2)
    assert model.mamba_bytes_per_request(1, ssm_bytes=2) == (8192 * 3 * 2 + 32 * 128 * 128 * 2) * 24


def test_qwen3_next_top_level_config_and_group_padding():
    model = _model(QWEN3_NEXT)
    assert model.hybrid_gdn and not model.qwen3_5 and not model.is_multimodal
    assert (model.num_full_attention_layers, model.num_linear_layers) == (12, 36)
    assert model.config_mamba_ssm_dtype is None
    # 16 key heads over 32 ranks: Mamba2StateShape pads the groups to 32 (0.5.4+), 0.5.2-0.5.3 do not.
    assert model.mamba_state_shapes(32)[0] == ((4096 + 2 * 32 * 128) // 32, 3)
    assert model.mamba_state_shapes(32, pad_groups=False)[0] == ((4096 + 2 * 16 * 128) // 32, 3)
    with pytest.raises(SimConfigError, match="does not split over 3 ranks"):
        model.mamba_state_shapes(3)


def test_non_linear_hybrids_and_inconsistent_layouts_are_refused():
    sliding = {"model_type": "gpt_oss", "num_hidden_layers": 2, "num_attention_heads": 8,
               "layer_types": ["sliding_attention", "full_attention"]}
    with pytest.raises(SimConfigError, match="hybrid sliding-window/linear-attention models are not simulated"):
        _model(sliding)
    shuffled = dict(QWEN3_NEXT, layer_types=["full_attention"] + ["linear_attention"] * 47)
    with pytest.raises(SimConfigError, match="disagrees with SGLang's layout"):
        _model(shuffled)
    missing = {key: value for key, value in QWEN3_NEXT.items() if key != "linear_value_head_dim"}
    with pytest.raises(SimConfigError, match="linear_value_head_dim"):
        _model(missing)


# -- the real Qwen3.5-9B TP2 boot (era F, 0.5.17+) -------------------------------------------------------------------

def test_real_qwen35_9b_tp2_log_numbers():
    server = _server("0.5.17", ["--tp-size", "2", "--mem-fraction-static", "0.8", "--disable-overlap-schedule"])
    replica = server.replicas[0]
    assert server.cell == 2 * 256 * 2 * 8 * 2          # 2 KV heads per rank, K+V of 256, 8 full layers, bf16
    assert server.mamba_per_req == 25755648
    rest = server._mamba_budget(replica, 14.08 - 22.93 * (1 - 0.8), [0, 1])
    assert replica.mamba_slots == 186
    conv, ssm = server.mamba_pool_sizes(replica)
    assert logs.mamba_line(server.release, replica.mamba_slots, conv, ssm) == REAL_MAMBA_LINE
    tokens = int(rest * GIB) // server.cell
    # 328,234: +0.28 %. P and A are logged to 0.01 GB; the real KV budget was about 14 MiB smaller.
    assert abs(tokens - REAL_TOKENS) / REAL_TOKENS < 0.005
    # Request slots: K // 3 without the extra buffer (the real build's 62); 0.5.17's auto picks extra_buffer with the
    # overlap schedule: K // 5.
    assert replica.mamba_slots // server.mamba_ratio() == 62
    assert _server("0.5.17", ["--tp-size", "2"]).mamba_ratio() == 5


def test_real_qwen35_9b_tp2_boot_through_plan():
    """The whole startup on two 24 GB GPUs whose P and A log as the real ones (22.93 / 14.08)."""
    host = hostspec.Host({"gpu": {"name": "NVIDIA GeForce RTX 4090", "count": 2, "memory_total_mib": 24564},
                          "sglang_version": "0.5.17", "cuda_context_mib": 24564 - 23480,
                          "memory": {"graph_mib_base": 64, "graph_kib_per_token": 4096}}, "rtx4090 x2")
    model = _model(total_size=2 * int(8.85 * GIB))
    args = server_args.parse(["--model-path", MODEL_DIR, "--tp-size", "2", "--mem-fraction-static", "0.8",
                              "--disable-overlap-schedule"])
    server_args.resolve(args, host, model, True)
    plan = memory.plan(host, model, None, args)
    assert plan.failure is None
    replica = plan.replicas[0]
    assert (round(replica.p / GIB, 2), round(replica.a / GIB, 2)) == (22.93, 14.08)
    assert replica.mamba_slots == 186 and replica.max_running_requests == 62
    assert abs(replica.tokens - REAL_TOKENS) / REAL_TOKENS < 0.005
    for rank in plan.ranks:
        steps = {name: size for name, size, _before, _after in rank.steps}
        assert steps["mamba"] == 187 * 25755648        # K + 1 slots, really allocated
        assert steps["kv"] == (replica.tokens + 1) * plan.cell
    # The Mamba pool (K + 1 slots) and the KV pool fit in the static budget A - P * (1 - f): the headroom rule holds.
    assert 187 * 25755648 + replica.tokens * plan.cell <= replica.a - replica.p * (1 - 0.8)


# -- the other releases ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("version, argv, slots", [
    # ratio split: K = int(rest * r / (1 + r) // per_req); 0.5.17+ leave room for the padding slot.
    ("0.5.5", [], lambda budget, per: int(budget // per)),
    ("0.5.8", [], lambda budget, per: int(budget // per)),
    ("0.5.9", [], lambda budget, per: int(budget // per)),
    ("0.5.13", [], lambda budget, per: int(budget // per)),
    ("0.5.17", [], lambda budget, per: int((budget - per) // per)),
    # --max-mamba-cache-size: overwritten by the ratio split with radix cache up to 0.5.6, used from 0.5.7.
    ("0.5.5", ["--max-mamba-cache-size", "100"], lambda budget, per: int(budget // per)),
    ("0.5.7", ["--max-mamba-cache-size", "100"], lambda budget, per: 100),
    ("0.5.17", ["--max-mamba-cache-size", "100"], lambda budget, per: 100),
    # Radix cache off: --max-running-requests, else 512 up to 0.5.8, else the ratio split.
    ("0.5.5", ["--disable-radix-cache"], lambda budget, per: 512),
    ("0.5.8", ["--disable-radix-cache"], lambda budget, per: 512),
    ("0.5.9", ["--disable-radix-cache"], lambda budget, per: int(budget // per)),
    ("0.5.17", ["--disable-radix-cache", "--max-running-requests", "40"], lambda budget, per: 40),
    # 0.5.2-0.5.3 always turn the radix cache off: 512 unless told.
    ("0.5.3", [], lambda budget, per: 512),
    ("0.5.3", ["--max-running-requests", "64"], lambda budget, per: 64),
])
def test_mamba_cache_size_per_release(version, argv, slots):
    model = _model(QWEN3_NEXT, total_size=30 * GIB)
    server = _server(version, argv + ["--mem-fraction-static", "0.85"], model=model)
    replica = server.replicas[0]
    rest = 50.0
    per = server.mamba_per_req
    after = server._mamba_budget(replica, rest, [0])
    expected = slots(rest * 0.9 / 1.9 * GIB, per)
    assert replica.mamba_slots == expected
    padding = 1 if version == "0.5.17" else 0
    assert after == pytest.approx(rest - (expected + padding) * per / GIB)


@pytest.mark.parametrize("version, argv, ratio", [
    ("0.5.3", [], 1), ("0.5.5", [], 3), ("0.5.5", ["--disable-radix-cache"], 1),
    ("0.5.7", [], 5),                                   # 0.5.7 adds the overlap extra buffer's 2 unconditionally
    ("0.5.8", [], 3), ("0.5.8", ["--mamba-scheduler-strategy", "extra_buffer"], 5),
    ("0.5.9", [], 3), ("0.5.9", ["--mamba-scheduler-strategy", "extra_buffer", "--disable-overlap-schedule"], 5),
    ("0.5.10", ["--mamba-scheduler-strategy", "extra_buffer", "--disable-overlap-schedule"], 4),
    ("0.5.13", [], 3),                                  # auto = no_buffer up to 0.5.13
    ("0.5.14", [], 5), ("0.5.14", ["--disable-overlap-schedule"], 3),
    ("0.5.17", ["--page-size", "16", "--disable-overlap-schedule"], 4),
])
def test_request_slots_per_mamba_slot(version, argv, ratio):
    model = _model(QWEN3_NEXT, total_size=30 * GIB)
    assert _server(version, argv, model=model).mamba_ratio() == ratio


def test_ssm_dtype_from_flag_and_from_config_from_0_5_9():
    bf16 = copy.deepcopy(QWEN3_NEXT)
    bf16["mamba_ssm_dtype"] = "bfloat16"
    model = _model(bf16)
    fp32_bytes = _model(QWEN3_NEXT).mamba_bytes_per_request(1)
    assert _server("0.5.9", model=model).mamba_per_req < fp32_bytes              # the config's bf16 counts
    assert _server("0.5.8", model=model).mamba_per_req == fp32_bytes             # 0.5.8: the flag's float32
    assert _server("0.5.9", ["--mamba-ssm-dtype", "float32"], model=model).mamba_per_req == fp32_bytes
    per_layer = 8192 * 3 * 2 + 32 * 128 * 128 * 2
    assert _server("0.5.17", ["--mamba-ssm-dtype", "float16"]).mamba_per_req == per_layer * 24


def test_no_mamba_slot_fails_as_sglang_does():
    # 0.5.17: the pool gets no slot -> _handle_max_mamba_cache's RuntimeError, an init failure.
    host = _host()
    model = _model()
    args = server_args.parse(["--model-path", MODEL_DIR, "--mem-fraction-static", "0.2"])
    server_args.resolve(args, host, model, True)
    plan = memory.plan(host, model, None, args)
    assert plan.failure is not None and plan.failure.kind == "init_oom"
    assert plan.failure.detail["error"].startswith(
        "RuntimeError: Not enough GPU memory for hybrid (mamba/linear-attention) state cache. Computed "
        "max_mamba_cache_size=")
    # Slots, but too few for one request: resolve_max_num_reqs' RuntimeError.
    args = server_args.parse(["--model-path", MODEL_DIR, "--mem-fraction-static", "0.8",
                              "--max-mamba-cache-size", "4"])
    server_args.resolve(args, host, model, True)
    plan = memory.plan(host, model, None, args)
    assert plan.failure.kind == "init_oom"
    assert plan.failure.detail["error"] == memory.mamba_too_small_message(4, 5, 0)


def test_unsupported_hybrid_setups_are_refused():
    model = _model()
    args = server_args.parse(["--model-path", MODEL_DIR, "--speculative-algorithm", "NEXTN"])
    server_args.resolve(args, _host(), model, True)
    with pytest.raises(SimConfigError, match="speculative decoding .* is not simulated"):
        memory.check_supported(_host(), model, None, args)
    args = server_args.parse(["--model-path", MODEL_DIR])
    with pytest.raises(SimConfigError, match="needs SGLang >= 0.5.9"):
        memory.check_supported(_host("0.5.8"), model, None, args)
    memory.check_supported(_host("0.5.2"), _model(QWEN3_NEXT), None, args)     # Qwen3-Next: 0.5.2+
    with pytest.raises(SimConfigError, match="pipeline parallelism"):
        memory.check_supported(_host(), model, None, server_args.parse(["--model-path", MODEL_DIR, "--pp-size", "2"]))


# -- the single-gpu-hybrid profile ----------------------------------------------------------------------------------

def test_profile_starts_with_sglangs_hybrid_lines(make_sim):
    sim = make_sim(PROFILE)
    server = sim.start(simlib.launch_args(PROFILE))
    assert server.wait_ready(), server.log
    log = server.log
    mamba = re.findall(r"\] Mamba Cache is allocated\. max_mamba_cache_size: (\d+), conv_state size: "
                       r"([\d.]+)GB, ssm_state size: ([\d.]+)GB \n", log)
    assert len(mamba) == 1
    slots = int(mamba[0][0])
    per_req = _model().mamba_bytes_per_request(1)
    assert float(mamba[0][1]) + float(mamba[0][2]) == pytest.approx((slots + 1) * per_req / GIB, abs=0.011)
    assert log.index("Mamba Cache is allocated") < log.index("KV Cache is allocated") \
        < log.index(logs.HYBRID_BACKEND_LINE) < log.index("Capture target decode CUDA graph begin")
    assert "max_running_requests is capped to %d by the mamba state cache" % (slots // 5) in log
    facts = parse_startup_log(log)
    assert facts["failure"] is None and facts["ready"] and facts["format"] == "current"
    assert facts["kv_tokens"] == facts["max_total_num_tokens"] > 0
    scheduler = re.search(r"max_total_num_tokens=(\d+), .*max_running_requests=(\d+), context_len=262144", log)
    assert int(scheduler.group(2)) == slots // 5
    status, info = simlib.request(server.url + "/get_server_info")
    assert status == 200 and info["max_total_num_tokens"] == int(scheduler.group(1))
    assert simlib.request(server.url + "/health_generate")[0] == 200


def test_profile_fails_without_a_mamba_slot(make_sim):
    server = make_sim(PROFILE).start(simlib.launch_args(PROFILE, mem_fraction_static=0.2))
    assert server.wait_exit(30) not in (None, 0)
    assert "RuntimeError: Not enough GPU memory for hybrid (mamba/linear-attention) state cache." in server.log
    assert "Received sigquit from a child process. It usually means the child failed." in server.log


def test_oracle_accounts_for_the_mamba_pool(make_sim):
    sim = make_sim(PROFILE)
    result = json.loads(sim.run("sglang_sim.oracle", simlib.launch_args(PROFILE) + [
        "--safety-gib", "1", "--resolution", "0.005"]).stdout)
    best = result["max_mem_fraction_static"]
    assert best is not None and 0.5 < best < 1 and result["max_kv_tokens"] > 0
    assert result["max_mamba_cache_size_at_max"] > 0 and result["mamba_cache_per_req_bytes"] == 51511296
    assert result["given"]["starts"] and result["given"]["keeps_safety"]
    # The same plan: at the maximum the Mamba pool is allocated and the margin holds; one step up it does not.
    host = hostspec.Host(simlib.profile_host(PROFILE), "profile")
    model = _model()
    args = server_args.parse(simlib.launch_args(PROFILE))
    server_args.resolve(args, host, model, True)
    for fraction, keeps in ((best, True), (round(best + 0.005, 3), False)):
        args.mem_fraction_static = fraction
        plan = memory.plan(host, model, None, args)
        assert plan.survives_stress(GIB) is keeps, fraction
    args.mem_fraction_static = best
    plan = memory.plan(host, model, None, args)
    assert plan.replicas[0].tokens == result["max_kv_tokens"]
    assert any(name == "mamba" and size == (result["max_mamba_cache_size_at_max"] + 1) * 51511296
               for name, size, _before, _after in plan.ranks[0].steps)

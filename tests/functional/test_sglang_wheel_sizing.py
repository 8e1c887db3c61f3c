# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""kv_capacity's pools against SGLang's own sizing code, executed from the released wheels (sglang_wheels).

Memory is stubbed: the free memory before the weights (P) and at the pool (A) are given, SGLang's functions
compute the tokens. What is executed, per release: the profile (profile_max_num_token and its cell) and the
hybrid sliding-window split (classic set_num_token_hybrid, 0.5.8 - 0.5.9 set_num_tokens_hybrid_swa, 0.5.10
_resolve_memory_pool_config, >= 0.5.11 the pool configurators, with the SWA request cap from 0.5.14), and whether
post-capture KV sizing is planned (post_capture_kv_sizing_planned, 0.5.20+), and what --kv-cache-dtype auto
becomes for a checkpoint with fp8 KV scales. The glue between them is read, not
executed, and written out below where it is used: in init_memory_pool the --max-total-tokens cap and the page
floor before the split, the classic allocator's ``assert not self.is_hybrid`` for a page size > 1, and the
configurators' --max-total-tokens constraint path. Wheels: .tmp/sglang-wheels, about 180 MB on a first run; a
release that cannot be downloaded is skipped, saying so.
"""
from __future__ import annotations

import ast
import json
import sys

import pytest

from conftest import FIXTURES, _collections_path
from sglang_wheels import Obj, Stub, element_size_torch, functions, load, source

sys.path.insert(0, _collections_path())
from ansible_collections.llmserve.sglang.plugins.module_utils.capacity.kv_base import KvModelError  # noqa: E402
from ansible_collections.llmserve.sglang.plugins.module_utils.capacity.kv_capacity_report import capacity  # noqa: E402
from ansible_collections.llmserve.sglang.plugins.module_utils.capacity.kv_cell import resolve_kv_cache_dtype  # noqa: E402
from ansible_collections.llmserve.sglang.plugins.module_utils.capacity.kv_shape import model_shape  # noqa: E402
from ansible_collections.llmserve.sglang.plugins.module_utils.capacity.kv_versions import compare_versions  # noqa: E402

GIB = 1 << 30
# Shaped like gpt-oss-120b: 36 layers alternating sliding/full, 8 KV heads of 64, window 128, bf16.
GPT_OSS_LIKE = {"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "num_hidden_layers": 36,
                "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64, "hidden_size": 2880,
                "sliding_window": 128, "layer_types": ["sliding_attention", "full_attention"] * 18,
                "torch_dtype": "bfloat16"}
FULL_IDS = [i for i in range(36) if i % 2]
SWA_IDS = [i for i in range(36) if not i % 2]
P, A = 78.9, 66.0


def _model_config():
    return Obj(full_attention_layer_ids=FULL_IDS, swa_attention_layer_ids=SWA_IDS, num_hidden_layers=36,
               head_dim=64, v_head_dim=64, swa_head_dim=64, swa_v_head_dim=64, is_hybrid_swa=True,
               hf_config=Obj(architectures=["GptOssForCausalLM"]), context_len=131072, attention_arch="MHA",
               get_num_kv_heads=lambda tp: 8 // tp, get_swa_num_kv_heads=lambda tp: 8 // tp)


def _server_args(page, f, **kw):
    args = dict(page_size=page, swa_full_tokens_ratio=0.8, max_total_tokens=None, mem_fraction_static=f,
                max_running_requests=None, disable_radix_cache=False, chunked_prefill_size=8192,
                speculative_num_draft_tokens=None, speculative_algorithm=None, disable_overlap_schedule=False,
                disaggregation_mode="null", max_mamba_cache_size=None, kv_cache_dtype="auto")
    args.update(kw)
    return Obj(**args)


def _runner(cls, page, f, **kw):
    """A ModelRunner without __init__: only what the sizing reads."""
    attrs = dict(
        server_args=_server_args(page, f, **kw), model_config=_model_config(), page_size=page, mem_fraction_static=f,
        is_draft_worker=False, mambaish_config=None, use_mla_backend=False, num_effective_layers=36,
        kv_cache_dtype="bf16", sliding_window_size=128, is_hybrid=True, is_hybrid_swa=True, device="cuda",
        gpu_id=0, pp_size=1, dp_size=1, start_layer=0, end_layer=36,
        spec_algorithm=Obj(is_none=lambda: True, is_eagle=lambda: False, is_standalone=lambda: False))
    # some of these are properties of ModelRunner: a subclass overrides them
    props = {k: v for k, v in attrs.items() if isinstance(getattr(cls, k, None), property)}
    runner = type("Runner", (cls,), props).__new__(type("Runner", (cls,), props)) if props else cls.__new__(cls)
    runner.__dict__.update({k: v for k, v in attrs.items() if k not in props})
    return runner


def _names():
    world = Obj(world_size=1, cpu_group=None)
    return dict(torch=element_size_torch(2), get_available_gpu_memory=lambda *a, **k: A,
                get_world_group=lambda: world, get_attention_tp_size=lambda: 1, is_float4_e2m1fn_x2=lambda d: False)


def sglang_pools(version, page, f, **kw):
    """(full tokens, SWA tokens) as SGLang `version` sizes them for GPT_OSS_LIKE at P, A, f."""
    rel = tuple(int(x) for x in version.split(".post")[0].split(".")[:3])
    if rel < (0, 5, 7):
        ns = load(version, "sglang/srt/model_executor/model_runner.py", **_names())
        runner = _runner(ns["ModelRunner"], page, f, **kw)
        if not hasattr(runner, "set_num_token_hybrid"):   # no sliding-window pools in this release
            return runner.profile_max_num_token(P) // page * page, None
        runner.model = Obj(model=Obj(layers=[Obj(layer_id=i, self_attn=Obj(attn=Obj(
            sliding_window_size=None if i in FULL_IDS else 128))) for i in range(36)]))
        runner.max_total_num_tokens = runner.profile_max_num_token(P)
        runner.max_total_num_tokens = runner.max_total_num_tokens // page * page  # init_memory_pool
        runner.set_num_token_hybrid()
        assert page == 1, "assert not self.is_hybrid"  # init_memory_pool, the paged allocator
        return runner.full_max_total_num_tokens, runner.swa_max_total_num_tokens
    if rel < (0, 5, 10):
        ns = load(version, "sglang/srt/model_executor/model_runner_kv_cache_mixin.py", **_names())
        runner = _runner(ns["ModelRunnerKVCacheMixin"], page, f, **kw)
        if rel < (0, 5, 8):   # ModelConfig._derive_hybrid_model: is_hybrid_model decides, no --hybrid-kvcache-ratio
            hybrid = functions(version, "sglang/srt/configs/model_config.py", "is_hybrid_model")["is_hybrid_model"]
            if hybrid(["GptOssForCausalLM"], None, 131072, None) is None:
                runner.model_config.full_attention_layer_ids = []   # what model_runner then sets
                return runner.profile_max_num_token(P) // page * page, None
        runner.max_total_num_tokens = runner.profile_max_num_token(P)
        runner.max_total_num_tokens = runner.max_total_num_tokens // page * page  # init_memory_pool
        runner.set_num_tokens_hybrid_swa()
        if rel < (0, 5, 8):
            assert page == 1, "assert not self.is_hybrid_swa"  # _init_pools, the paged allocator
        return runner.full_max_total_num_tokens, runner.swa_max_total_num_tokens
    if rel < (0, 5, 11):
        ns = load(version, "sglang/srt/model_executor/model_runner_kv_cache_mixin.py", **_names())
        runner = _runner(ns["ModelRunnerKVCacheMixin"], page, f, **kw)
        config = runner._resolve_memory_pool_config(P)
        return config.full_max_total_num_tokens, config.swa_max_total_num_tokens
    return _configurator_pools(version, page, f, **kw)


def _configurator_pools(version, page, f, **kw):
    common = functions(version, "sglang/srt/utils/common.py", "ceil_align", "ceil_div")
    names = dict(_names(), ceil_align=common["ceil_align"],
                 envs=Obj(SGLANG_SWA_EVICTION_INTERVAL=Obj(get=lambda: 128)), is_deepseek_v4=lambda c: False)
    args = _server_args(page, f, **kw)
    ns = load(version, "sglang/srt/model_executor/pool_configurator.py", **names)
    runner = _runner(Obj, page, f, **kw)
    runner.ps = Obj(attn_dp_size=1, attn_tp_size=1)   # 0.5.16+: the parallel sizes
    window = functions(version, "sglang/srt/models/gpt_oss.py", "get_attention_sliding_window_size")
    runner.sliding_window_size = window["get_attention_sliding_window_size"](Obj(sliding_window=128))
    # later releases read the server arguments by group
    groups = dict(get_schedule=lambda: args, get_spec=lambda: args, get_disagg=lambda: args,
                  get_memory=lambda: Obj(disable_radix_cache=args.disable_radix_cache, enable_unified_memory=False),
                  get_parallel=lambda: Obj(attn_tp_size=1, attn_dp_size=1))
    ns.update({name: group for name, group in groups.items() if name in ns})
    if "get_schedule" in ns:
        runner.__dict__.update(layer_info=_model_config(), kv_cache_dtype_str="bfloat16", attn_dp_size=1,
                               fused_entry_bytes=lambda kind: None, spec_aux_config=None)
        ns["_dflash_draft_cell_size"] = lambda kvc: 0
    configurator = ns["create_memory_pool_configurator"](runner)
    pools = configurator.calculate_pool_sizes(int((A - P * (1 - f)) * GIB), page)
    capped = min(pools.max_total_num_tokens, args.max_total_tokens or pools.max_total_num_tokens) // page * page
    if capped != pools.max_total_num_tokens:   # _apply_token_constraints, then the constraint path
        pools = configurator.calculate_pool_sizes_from_max_tokens(capped, page)
    return pools.full_max_total_num_tokens, pools.swa_max_total_num_tokens


def collection_pools(version, page, f, **kw):
    r = capacity(GPT_OSS_LIKE, f, P, A, page_size=page, sglang_version=version, **kw)
    return r["max_total_num_tokens"], r["swa_max_total_num_tokens"]


@pytest.mark.parametrize("version", ["0.4.6.post5", "0.5.2", "0.5.5.post3", "0.5.7", "0.5.8", "0.5.9", "0.5.10",
                                     "0.5.14", "0.5.23"])
@pytest.mark.parametrize("page", [1, 64])
@pytest.mark.parametrize("f", [0.85, 0.8317])
def test_hybrid_swa_pools_match_sglang(version, page, f):
    try:
        expected = sglang_pools(version, page, f)
    except AssertionError as exc:   # SGLang does not start: neither may the collection give a figure
        assert compare_versions(version, "0.5.7") < 0 and page > 1, exc
        with pytest.raises(KvModelError, match="SGLang %s does not start with this" % version):
            collection_pools(version, page, f)
        return
    assert collection_pools(version, page, f) == expected


# --disable-radix-cache --max-running-requests N: the SWA pool from a request cap from 0.5.14 (0.5.13: the ratio).
@pytest.mark.parametrize("version", ["0.5.13", "0.5.14", "0.5.16", "0.5.18", "0.5.20", "0.5.21", "0.5.23"])
@pytest.mark.parametrize("page,requests,extra", [
    (1, 32, {}), (64, 256, {}), (1, 32, {"disable_overlap_schedule": True}), (16, 32, {"max_total_tokens": 20000}),
    (1, 10 ** 6, {}),
])
def test_swa_request_cap_matches_sglang(version, page, requests, extra):
    kw = dict(extra, max_running_requests=requests, disable_radix_cache=True, chunked_prefill_size=8192)
    try:
        expected = sglang_pools(version, page, 0.85, **kw)
    except RuntimeError as exc:   # "SWA pool cap ... leaves no room for the full KV pool"
        r = capacity(GPT_OSS_LIKE, 0.85, P, A, page_size=page, sglang_version=version, **kw)
        assert r["max_total_num_tokens"] == 0 and "does not start with this" in r["issues"][0], (exc, r)
        return
    assert collection_pools(version, page, 0.85, **kw) == expected


# A budget of `full` tokens: the SWA pool is 0.8 of it, refused from 0.5.16 when <= window (127) + page.
@pytest.mark.parametrize("version", ["0.5.14", "0.5.15", "0.5.16", "0.5.23"])
@pytest.mark.parametrize("full", [150, 160, 170])
def test_an_swa_pool_below_one_request_matches_sglang(version, full):
    f = 1 - (A - full * (2048 * 18 + 0.8 * 2048 * 18) / GIB) / P
    try:
        expected = sglang_pools(version, 1, f)
    except ValueError as exc:   # "SWA pool (N tokens) cannot hold even one request"
        r = capacity(GPT_OSS_LIKE, f, P, A, sglang_version=version)
        assert r["max_total_num_tokens"] == 0 and "does not start with this" in r["issues"][0], (exc, r)
        return
    assert collection_pools(version, 1, f) == expected


def _post_capture_planned(version, env_on, mla):
    """post_capture_kv_sizing_planned of arg_groups/overrides.py (0.5.20+) for a CUDA server with graphs and prefill
    capture on; the prefill-buffer ceiling registry is left out (identity: no model registers one here)."""
    envs = Obj(SGLANG_ENABLE_POST_CAPTURE_KV_SIZING=Obj(get=lambda: env_on),
               SGLANG_MOONCAKE_CUSTOM_MEM_POOL=Obj(get=lambda: None), MOONCAKE_PROTOCOL=Obj(get=lambda: "rdma"))
    model = Obj(is_hybrid_swa=False, hf_config=Obj(architectures=["LlamaForCausalLM"]))
    ns = load(version, "sglang/srt/arg_groups/overrides.py", resolving_view=lambda sa: sa, envs=envs,
              Backend=Obj(DISABLED="disabled"), use_mla_backend=lambda sa: mla, model_config_of=lambda sa: model,
              ResolvedView=type("ResolvedView", (), {}), ResolvingConfig=type("ResolvingConfig", (), {}),
              prefill_buffer_ceiling_of=lambda record, tokens: tokens)
    cfg = Obj(enable_kv_cache_sharding=False, device="cuda", dcp_size=1, prefill_only_disable_kv_cache=False,
              enable_memory_saver=False, disaggregation_transfer_backend="nixl", enable_unified_memory=False,
              disaggregation_mode="null", chunked_prefill_size=8192, enable_dynamic_chunking=False, pp_size=1,
              max_prefill_tokens=16384, kv_cache_dtype="auto",
              cuda_graph_config=Obj(decode=Obj(backend="full"), prefill=Obj(backend="full", bs=(8192,))))
    # its late import of configs.model_config, answered without SGLang installed
    names = ("sglang", "sglang.srt", "sglang.srt.configs", "sglang.srt.configs.model_config")
    fakes = {name: type(sys)(name) for name in names}
    fakes["sglang.srt.configs.model_config"].__dict__.update(is_deepseek_v4=lambda c: False,
                                                             is_minimax_sparse=lambda c: False)
    saved = {name: sys.modules.get(name) for name in fakes}
    sys.modules.update(fakes)
    try:
        return ns["post_capture_kv_sizing_planned"](cfg)
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name)
            else:
                sys.modules[name] = module


@pytest.mark.parametrize("version", ["0.5.20", "0.5.23"])
@pytest.mark.parametrize("env_on", [True, False])
@pytest.mark.parametrize("config", ["llama", "deepseek"])
def test_post_capture_sizing_is_refused_where_sglang_plans_it(version, env_on, config):
    model = json.loads((FIXTURES / "configs" / ("llama-3.1-8b.json" if config == "llama" else "deepseek-v3.json"))
                       .read_text())
    planned = _post_capture_planned(version, env_on, config == "deepseek")
    env = {"SGLANG_ENABLE_POST_CAPTURE_KV_SIZING": "1" if env_on else "0"}
    if planned:
        with pytest.raises(KvModelError, match="after CUDA-graph capture"):
            capacity(model, 0.85, P, A, sglang_version=version, environment=env)
    else:
        assert capacity(model, 0.85, P, A, sglang_version=version, environment=env)["max_total_num_tokens"] > 0
    assert planned is (env_on and config == "llama")   # the case covers both answers


def _auto_kv_dtype(version):
    """What SGLang `version` makes of --kv-cache-dtype auto for a bf16 model whose quant_config says
    kv_cache_quant_algo FP8: its own `if self.server_args.kv_cache_dtype == "auto":` statement, executed (0.5.23:
    configure_kv_cache_dtype of mem_cache/kv_cache_dtype.py)."""
    torch = Obj(float8_e4m3fn="fp8_e4m3", float8_e5m2="fp8_e5m2", bfloat16="bfloat16", float16="float16",
                float8_e4m3fnuz="fp8_e4m3fnuz", float8_e5m2fnuz="fp8_e5m2fnuz", uint8="uint8")
    model = Obj(quant_config=Obj(kv_cache_quant_algo="FP8"))
    if compare_versions(version, "0.5.23") >= 0:
        ns = load(version, "sglang/srt/mem_cache/kv_cache_dtype.py", torch=torch, _is_hip=False,
                  TORCH_DTYPE_TO_KV_CACHE_STR={"fp8_e4m3": "fp8_e4m3"})
        return ns["configure_kv_cache_dtype"](server_args_kv_cache_dtype="auto", model=model, model_dtype="bfloat16",
                                              is_draft_worker=False, is_dflash=False,
                                              speculative_draft_attention_backend=None)[1]
    for path in ("sglang/srt/model_executor/model_runner.py",
                 "sglang/srt/model_executor/model_runner_kv_cache_mixin.py"):
        try:
            tree = ast.parse(source(version, path))
        except KeyError:   # no such file in this release
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and ast.unparse(node.test) == "self.server_args.kv_cache_dtype == 'auto'":
                runner = Obj(server_args=Obj(kv_cache_dtype="auto"), model=model, dtype="bfloat16")
                exec(compile(ast.Module(body=[node], type_ignores=[]), path, "exec"),  # noqa: S102 - SGLang's code
                     {"self": runner, "torch": torch, "_is_hip": False, "getattr": getattr, "isinstance": isinstance,
                      "str": str, "TORCH_DTYPE_TO_KV_CACHE_STR": {"fp8_e4m3": "fp8_e4m3"}})
                return runner.kv_cache_dtype
    raise AssertionError("sglang %s: no kv_cache_dtype == 'auto' branch found" % version)


@pytest.mark.parametrize("version", ["0.4.6.post5", "0.5.2", "0.5.3rc0", "0.5.3rc2", "0.5.5.post3", "0.5.9", "0.5.14",
                                     "0.5.23"])
def test_kv_cache_dtype_auto_with_fp8_kv_scales_matches_sglang(version):
    model = json.loads((FIXTURES / "configs" / "llama-3.1-8b.json").read_text())
    model["quantization_config"] = {"quant_method": "modelopt", "kv_cache_quant_algo": "FP8"}
    expected = _auto_kv_dtype(version)
    assert resolve_kv_cache_dtype("auto", model_shape(model), version)[0] == expected


def test_stub_fails_loudly_in_arithmetic():
    with pytest.raises(TypeError):
        Stub("x") + 1

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""``launch_server`` flags and the ServerArgs SGLang resolves from them.

The flag table (``data/server_args.json``) is extracted from SGLang's own ``server_args.py`` by
``tools/sglang_sim/gen_server_args.py``, so every flag SGLang 0.5.9 accepts is accepted here with the same
spelling, aliases, type, choices and default, and anything else is an argparse error (exit 2), as in SGLang.
``--tp`` and ``--dp`` work the way they do in SGLang: as argparse abbreviations of ``--tp-size``/``--dp-size``.

:func:`resolve` then applies the part of ``ServerArgs.__post_init__`` that decides memory: the GPU-memory tier
defaults (chunked prefill, CUDA-graph batch sizes, the automatic ``--mem-fraction-static``), the multimodal
adjustment, backend-forced page sizes and the speculative-decoding defaults.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
from types import SimpleNamespace

_DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "server_args.json")

# argparse dest of the long first flag -> ServerArgs field (ServerArgs.from_cli_args).
_RENAMED = {"tensor_parallel_size": "tp_size", "pipeline_parallel_size": "pp_size",
            "attention_context_parallel_size": "attn_cp_size", "moe_data_parallel_size": "moe_dp_size",
            "data_parallel_size": "dp_size", "expert_parallel_size": "ep_size"}

# auto_choose_speculative_params: (steps, topk, draft tokens)
_SPEC_LLAMA = ("LlamaForCausalLM", "Grok1ForCausalLM", "Grok1VForCausalLM")
_MTP_ARCHS = ("DeepseekV32ForCausalLM", "DeepseekV3ForCausalLM", "Glm4MoeForCausalLM", "Glm4MoeLiteForCausalLM",
              "GlmMoeDsaForCausalLM", "BailingMoeForCausalLM", "BailingMoeV2ForCausalLM",
              "BailingMoeV2_5ForCausalLM", "MistralLarge3ForCausalLM", "PixtralForConditionalGeneration")


def _table() -> dict:
    with open(_DATA, encoding="utf-8") as handle:
        return json.load(handle)


def _nullable_str(value):
    return None if not value or value == "None" else value


_TYPES = {"str": str, "int": int, "float": float, "json": json.loads, "json_list": json.loads,
          "nullable_str": _nullable_str}


class _DeprecatedAction(argparse.Action):
    """SGLang's DeprecatedAction: takes no value, warns, changes nothing."""

    def __init__(self, option_strings, dest, nargs=0, **kwargs):
        super().__init__(option_strings, dest, nargs=nargs, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        sys.stderr.write("The command line argument '%s' is deprecated and will be removed in future versions.\n"
                         % option_string)


def build_parser() -> argparse.ArgumentParser:
    """An ArgumentParser with SGLang's flags (prog is argv[0], as in ``python -m sglang.launch_server``)."""
    parser = argparse.ArgumentParser()
    for option in _table()["options"]:
        kwargs = {"dest": option["dest"], "default": option.get("default")}
        if option["action"] == "store_true":
            kwargs["action"] = "store_true"
        elif option["action"] == "deprecated":
            kwargs["action"] = _DeprecatedAction
        else:
            kwargs["type"] = _TYPES[option.get("type", "str")]
            for key in ("nargs", "const"):
                if key in option:
                    kwargs[key] = option[key]
            if option.get("choices"):
                kwargs["choices"] = option["choices"]
        if option.get("required"):
            kwargs["required"] = True
        parser.add_argument(*option["flags"], **kwargs)
    return parser


def parse(argv) -> SimpleNamespace:
    """Parse launch_server flags into ServerArgs fields (argparse exits 2 on an unknown or bad flag)."""
    raw = vars(build_parser().parse_args(argv))
    for old, new in _RENAMED.items():
        raw[new] = raw.pop(old)
    args = SimpleNamespace()
    for name, default in _table()["fields"]:
        setattr(args, name, raw.get(name, default))
    return args


def field_names() -> list:
    """ServerArgs' dataclass fields in declaration order (what its repr and /server_info list)."""
    return [name for name, _default in _table()["fields"]]


def server_args_repr(args) -> str:
    """``ServerArgs(model_path='...', ...)`` exactly as the dataclass repr prints it."""
    return "ServerArgs(%s)" % ", ".join("%s=%r" % (name, getattr(args, name)) for name in field_names())


def as_dict(args) -> dict:
    """ServerArgs fields as a JSON-able dict (dataclasses.asdict)."""
    return {name: getattr(args, name) for name in field_names()}


def _cuda_graph_batch_sizes(args) -> list:
    if args.disable_cuda_graph_padding:
        sizes = list(range(1, args.cuda_graph_max_bs + 1))
    elif args.speculative_algorithm is None:
        sizes = [1, 2, 4, 8, 12] + list(range(16, 257, 8)) + list(range(272, 512, 16)) + list(
            range(512, args.cuda_graph_max_bs + 1, 32))
    else:
        sizes = list(range(1, 9)) + list(range(10, 33, 2)) + list(range(40, 65, 4)) + list(
            range(72, 257, 8)) + list(range(272, args.cuda_graph_max_bs + 1, 16))
    return [size for size in sizes if size <= args.cuda_graph_max_bs]


def _tier(gpu_mem: int, tp_size: int) -> tuple:
    """(chunked_prefill_size, cuda_graph_max_bs) from the GPU memory in MiB (_handle_gpu_memory_settings)."""
    if gpu_mem < 20 * 1024:
        return 2048, 8
    if gpu_mem < 35 * 1024:
        return 2048, 24 if tp_size < 4 else 80
    if gpu_mem < 60 * 1024:
        return 4096, 32 if tp_size < 4 else 160
    if gpu_mem < 160 * 1024:
        return 8192, 256 if tp_size < 4 else 512
    return 16384, 512


def _gpu_memory_settings(args, gpu_mem: int, model, current: bool):
    chunk, max_bs = _tier(gpu_mem, args.tp_size)
    if args.chunked_prefill_size is None:
        args.chunked_prefill_size = chunk
    if args.cuda_graph_max_bs is None:
        args.cuda_graph_max_bs = max_bs
    if args.cuda_graph_bs is None:
        args.cuda_graph_bs = _cuda_graph_batch_sizes(args)
    else:
        args.cuda_graph_max_bs = max(args.cuda_graph_bs)
    if args.mem_fraction_static is not None:
        return
    reserved = 512.0
    if args.chunked_prefill_size > 0:
        reserved += max(args.chunked_prefill_size, 2048) * 1.5
    else:
        reserved += max(args.max_prefill_tokens, 2048) * 1.5
    reserved += args.cuda_graph_max_bs * 2
    reserved += args.tp_size * args.pp_size / 8 * 1024
    if args.enable_dp_attention:
        reserved += args.cuda_graph_max_bs * args.dp_size * 3
        if args.cuda_graph_max_bs > 300:
            reserved += args.cuda_graph_max_bs * args.dp_size * 1.5
    if gpu_mem > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    if args.speculative_algorithm is not None and not current:
        if args.speculative_algorithm == "STANDALONE":
            reserved += 6 * 1024
        elif args.speculative_algorithm != "NGRAM":
            reserved += 2 * 1024
    args.mem_fraction_static = round((gpu_mem - reserved) / gpu_mem, 3)
    if model.is_multimodal:
        # adjust_mem_fraction_for_vlm: 0.95 x a factor from the ViT size (ViT-L/14 = 24 x 1024 is 1.0).
        vision = model.vision_config
        ratio = vision.get("num_hidden_layers", 24) * vision.get("hidden_size", 1024) ** 2 / (24 * 1024 ** 2)
        factor = max(0.8, min(1.05, 1.0 - 0.1 * (ratio - 1.0)))
        args.mem_fraction_static = args.mem_fraction_static * 0.95 * factor


def _page_size(args, model):
    if args.page_size is None:
        args.page_size = 1
    backends = (args.attention_backend, args.decode_attention_backend)
    if "flashmla" in backends:
        args.page_size = 64
    if "cutlass_mla" in backends:
        args.page_size = 128
    if "trtllm_mla" in backends and args.page_size not in (32, 64):
        args.page_size = 64
    if "trtllm_mha" in backends + (args.prefill_attention_backend,) and args.page_size not in (16, 32, 64):
        args.page_size = 64
    if args.prefill_attention_backend == "fa4" and model.attention != "mla":
        args.page_size = 128


def _speculative(args, model):
    if args.speculative_algorithm == "NEXTN":
        args.speculative_algorithm = "EAGLE"
    if args.speculative_algorithm not in ("EAGLE", "EAGLE3", "STANDALONE"):
        return
    if args.max_running_requests is None:
        args.max_running_requests = 48
    if args.speculative_draft_model_path is None and model.architecture in _MTP_ARCHS:
        args.speculative_draft_model_path = args.model_path
    if args.speculative_draft_model_path is not None and args.speculative_draft_model_revision is None:
        args.speculative_draft_model_revision = "main"
    if args.speculative_num_steps is None:
        if args.speculative_algorithm != "STANDALONE" and model.architecture in _SPEC_LLAMA:
            auto = (5, 4, 8)
        else:
            auto = (3, 1, 4)
        args.speculative_num_steps = auto[0]
        if args.speculative_eagle_topk is None:
            args.speculative_eagle_topk = auto[1]
        if args.speculative_num_draft_tokens is None:
            args.speculative_num_draft_tokens = auto[2]
    if args.speculative_eagle_topk == 1:
        args.speculative_num_draft_tokens = args.speculative_num_steps + 1


def resolve(args, host, model, current: bool):
    """Fill what ServerArgs.__post_init__ derives (in SGLang's order) and ``context_len``, the model's context
    length SGLang uses (``--context-length`` or max_position_embeddings). ``current``: SGLang >= 0.5.14, where
    speculative decoding adds no reserve to the automatic --mem-fraction-static."""
    if args.tokenizer_path is None:
        args.tokenizer_path = args.model_path
    if args.served_model_name is None:
        args.served_model_name = args.model_path
    if args.random_seed is None:
        args.random_seed = random.randint(0, 1 << 30)
    if args.device is None:
        args.device = "cuda"
    _gpu_memory_settings(args, host.memory_total_mib, model, current)
    _page_size(args, model)
    _speculative(args, model)
    args.context_len = args.context_length or model.context_len
    return args

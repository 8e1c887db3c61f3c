# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""SGLang's GPU memory arithmetic, startup to serving: the one function the server, the oracle and the tests share.

Re-derived from SGLang's code (``model_runner.py`` / ``model_runner_kv_cache_mixin.py`` /
``kv_cache_configurator.py`` in 0.5.5.post3, 0.5.9 and 0.5.23), not from the collection. Per GPU (rank), in the
order SGLang allocates:

1. CUDA context, then distributed init (NCCL): what is left is the rank's free memory before weights, ``P_i``.
   P = MIN over ranks (``get_available_gpu_memory(distributed=True)``). A rank with more than P / 0.9 free raises
   "The memory capacity is unbalanced" (TP > 1).
2. Weights ``W`` (model.py's rule); ``A_i = P_i - W``; A = MIN over ranks. From 0.5.14 ("current") the EAGLE
   draft's weights load here too, so A counts them.
3. Budget ``A - P * (1 - f)`` (current: minus 100 MiB for multimodal models from 0.5.18); tokens =
   ``int(budget * 2**30) // cell``; request slots R = ``min(max(int(tokens / context_len * 512), 2048), 4096)``
   unless --max-running-requests; classic (< 0.5.7) EAGLE adds ``R*steps*topk + R*draft_tokens + 100`` tokens;
   --max-total-tokens caps (with SGLang's warning); page rounding; tokens <= 0 fails ("Not enough memory" /
   current's ValueError when the budget is <= 0).
4. ``req_to_token`` (``R * (context_len + 4 + draft_tokens) * 4`` bytes), the KV pool (``(tokens + page) * cell``),
   attention/cuBLAS workspaces, CUDA graphs (unless disabled; capture fails when they do not fit).
5. Classic/mixin EAGLE: the draft model after the target's graphs: weights, its own KV pool of the same token count
   (draft cell from its config) and its graphs. Current: only the draft graphs (its KV is inside the cell).

What is free then is each rank's headroom. Under load a batch needs activations (host.json ``memory``): prefill
tokens x bytes per prefill token, plus, for a decode batch larger than the captured graphs (or with graphs
disabled), tokens x bytes per decode token; the caching allocator keeps them (times 1 + fragmentation). A batch
whose activations do not fit in a rank's headroom is a CUDA out-of-memory error: the server dies. The stress load
(what the oracle assumes) is the largest prefill chunk and the largest decode batch the server admits.

Hybrid Gated-DeltaNet models (Qwen3-Next, Qwen3.5; model.py): the KV cell counts only the full-attention layers,
and step 3 first takes the Mamba state pool out of the budget (:meth:`Server._mamba_budget`, SGLang's
``handle_max_mamba_cache`` of the server's release: the radix-on ratio split ``rest * r / (1 + r)`` with r =
--mamba-full-memory-ratio, or --max-mamba-cache-size, or --max-running-requests with --disable-radix-cache); the
pool's K + 1 slots are allocated right after req_to_token (HybridReqToTokenPool's MambaPool), before the KV pool, and
the request slots are capped at K // ratio (3, plus the extra-buffer slots where SGLang adds them).

A transient neighbour (host.json faults.load_contention_mib, the server only: ``plan(..., contention=True)``; the
oracle's plan is a clean host's): another process takes its MiB on a rank's GPU as the weights start to load (all or
nothing: when they are not free it gets none) and frees them right after the KV pool. SGLang's "mem usage" of the
weights is free-before minus free-after, so it counts them; A, and so the pool(s), are smaller by them; the headroom
after the pools is larger by them. With faults.load_contention_from "pool" it takes them once the weights are loaded
and logged: SGLang measures the free memory again to size its pools (``profile_max_num_token``), so the pools are
as much smaller while the log's weights and A are clean. Steps ``neighbour`` / ``neighbour_gone`` record it (not the server's memory).

Multi-node (``--nnodes N``): the plan is the whole server's, every node's ranks on their own host (``hosts``); P and
A are the MIN over all ranks of all nodes, so every node sizes the same pool. Each node computes the same plan from
the hosts exchanged at the rendezvous (multinode.py) and walks and logs only its own ranks.

Units: bytes (int) inside, GiB = bytes / 2**30 (SGLang prints it as "GB") at the edges.
"""
from __future__ import annotations

from sglang_sim.hostspec import GIB, MIB, SimConfigError
from sglang_sim.model import STATE_DTYPE_BYTES

ERA_CLASSIC, ERA_MIXIN, ERA_CURRENT = "classic", "mixin", "current"
SPEC_WITH_DRAFT = ("EAGLE", "EAGLE3", "STANDALONE")
# Steps of another process (faults.load_contention_mib) in a rank's steps: it takes its memory, it gives it back.
NEIGHBOUR_STEP, NEIGHBOUR_GONE_STEP = "neighbour", "neighbour_gone"
NEIGHBOUR_STEPS = (NEIGHBOUR_STEP, NEIGHBOUR_GONE_STEP)

# --kv-cache-dtype -> (torch dtype SGLang logs, bytes per element)
_KV_DTYPES = {
    "bfloat16": ("torch.bfloat16", 2), "bf16": ("torch.bfloat16", 2), "float16": ("torch.float16", 2),
    "fp8_e4m3": ("torch.float8_e4m3fn", 1), "fp8_e5m2": ("torch.float8_e5m2", 1),
    "fp4_e2m1": ("torch.float4_e2m1fn_x2", 1),
}


def version_tuple(version: str) -> tuple:
    """(major, minor, micro) of an SGLang version string: "0.5.5.post3" -> (0, 5, 5)."""
    parts = []
    for piece in str(version).lstrip("v").split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts + [0] * (3 - len(parts)))


def era(version: str) -> str:
    """classic (< 0.5.7), mixin (0.5.7 - 0.5.13) or current (>= 0.5.14): where SGLang's KV arithmetic changed."""
    release = version_tuple(version)
    if release < (0, 5, 7):
        return ERA_CLASSIC
    if release < (0, 5, 14):
        return ERA_MIXIN
    return ERA_CURRENT


# _MAMBA_EXTRA_BUFFER_ARCHS / _support_mamba_cache_extra_buffer: the hybrid GDN architectures whose "auto" mamba
# scheduler strategy becomes extra_buffer from 0.5.14 (with the default triton linear-attention backend).
MAMBA_EXTRA_BUFFER_ARCHS = ("Qwen3NextForCausalLM", "Qwen3_5ForConditionalGeneration",
                            "Qwen3_5MoeForConditionalGeneration")


def mamba_not_enough_message(slots: int, rest_gib: float, per_req: int) -> str:
    """_handle_max_mamba_cache's RuntimeError (0.5.13+) when the Mamba pool gets no slot."""
    return ("RuntimeError: Not enough GPU memory for hybrid (mamba/linear-attention) state cache. Computed "
            "max_mamba_cache_size=%d (total_rest_memory=%.2f GB, mamba_cache_per_req=%.2f MB). Try: (1) reduce "
            "--max-running-requests, (2) increase --mem-fraction-static, (3) reduce --speculative-num-draft-tokens, "
            "or (4) use GPUs with more memory." % (slots, rest_gib, per_req / 2 ** 20))


def mamba_too_small_message(slots: int, ratio: int, requests: int) -> str:
    """resolve_max_num_reqs' RuntimeError (0.5.13+) when the Mamba pool serves no request."""
    return ("RuntimeError: Hybrid (mamba/linear-attention) state cache is too small to serve any requests. "
            "max_mamba_cache_size=%d, mamba_ratio=%d, resulting max_num_reqs=%d. Try: (1) reduce "
            "--max-running-requests, (2) increase --mem-fraction-static, or (3) use GPUs with more memory."
            % (slots, ratio, requests))


def check_supported(host, model, draft, args):
    """Refuse (SimConfigError) what the simulator does not model for a hybrid linear-attention model, and what
    the server's SGLang release cannot run: Qwen3-Next needs 0.5.2+, Qwen3.5 0.5.9+; speculative decoding (MTP,
    the intermediate SSM/conv caches) and pipeline parallelism are not simulated with a Mamba pool."""
    if not model.hybrid_gdn:
        return
    release = version_tuple(host.sglang_version)
    needed = (0, 5, 9) if model.qwen3_5 else (0, 5, 2)
    if release < needed:
        raise SimConfigError("%s: SGLang %s has no support for %s (model_type %s); it needs SGLang >= %s"
                             % (model.path, host.sglang_version, model.architecture, model.model_type,
                                ".".join(str(part) for part in needed)))
    if args.speculative_algorithm or draft is not None:
        raise SimConfigError("speculative decoding (%s) with a hybrid linear-attention model (%s) is not simulated "
                             "(its Mamba intermediate state caches are not modelled)"
                             % (args.speculative_algorithm, model.architecture))
    if args.pp_size > 1:
        raise SimConfigError("pipeline parallelism (--pp-size %d) with a hybrid linear-attention model is not "
                             "simulated" % args.pp_size)
    attn_tp = args.tp_size // args.dp_size if args.enable_dp_attention else args.tp_size
    model.mamba_state_shapes(attn_tp, release >= (0, 5, 4))


def gib(value: float) -> float:
    """Bytes to GiB."""
    return value / GIB


class StartupFailure(Exception):
    """SGLang would stop here. ``kind`` names the failure (init_oom, pool_too_small, capture_oom, oom, unbalanced,
    crash),
    ``stage`` the allocation step, ``rank`` the rank index that fails first and ``detail`` the numbers the log
    message needs."""

    def __init__(self, kind: str, stage: str, rank: int, detail: dict, ranks=None):
        super().__init__("%s at %s on rank %d" % (kind, stage, rank))
        self.kind = kind
        self.stage = stage
        self.rank = rank
        self.detail = detail
        # Every rank that fails at this step, not only the first: with several nodes each node prints the
        # tracebacks of its own failing ranks, and a node with none waits for the others to die.
        self.ranks = list(ranks) if ranks is not None else [rank]


class Rank:
    """One GPU of the server: its index, log tag, and free memory after each startup step."""

    def __init__(self, number: int, gpu: int, tag: str, dp_rank: int, node: int = 0):
        self.number = number
        self.gpu = gpu
        self.tag = tag
        self.dp_rank = dp_rank
        self.node = node       # --node-rank of the host whose GPU this is (multi-node: tp_size / nnodes each)
        self.free = 0          # bytes free on the GPU now (as torch.cuda.mem_get_info reports it)
        self.used = 0          # bytes the server holds on this GPU
        self.steps = []        # (step name, bytes allocated, free before, free after)
        self.neighbour = 0     # bytes another process (faults.load_contention_mib) holds on the GPU now

    def allocate(self, step: str, size: int, capacity: int):
        """Take ``size`` bytes or raise StartupFailure('oom') when they do not fit."""
        if size > self.free:
            raise StartupFailure("oom", step, self.number, {"tried": size, "free": self.free,
                                                            "capacity": capacity, "used": self.used})
        before = self.free
        self.free -= size
        self.used += size
        self.steps.append((step, size, before, self.free))

    def contend(self, step: str, size: int):
        """Another process takes ``size`` bytes on this GPU (negative: gives them back); not the server's memory."""
        before = self.free
        self.free -= size
        self.neighbour += size
        self.steps.append((step, size, before, self.free))


class Replica:
    """One group of ranks that sizes its KV pool together (one world group): P, A, budget and tokens.

    ``--dp N`` without DP attention starts N independent replicas; with DP attention all ranks form one group,
    whose N attention-DP schedulers each get a pool of the same size.
    """

    def __init__(self, ranks: list, schedulers: list):
        self.ranks = ranks
        self.schedulers = schedulers   # DP ranks whose scheduler owns a pool sized by this replica
        self.p = self.a = None
        self.tokens = 0
        self.req_slots = 0
        self.max_running_requests = 0
        self.max_req_input_len = 0
        self.captured_bs = []          # decode batch sizes with a CUDA graph
        self.graph_max_bs = 0
        self.mamba_slots = 0           # hybrid models: max_mamba_cache_size (the pool holds one slot more)

    def min_headroom(self) -> int:
        """The smallest free memory over this replica's ranks."""
        return min(rank.free for rank in self.ranks)


def layout(args) -> list:
    """The replicas of a server, their ranks mapped to GPUs and tagged as SGLang's scheduler prefix does.

    With ``--nnodes N`` (N > 1, one TP group, multinode.check) node ``k`` runs TP ranks ``k*T .. (k+1)*T - 1``
    (T = tp_size / N) on its GPUs ``base_gpu_id + (tp_rank % T) * gpu_id_step``, as _launch_scheduler_processes
    does; the tags keep the global TP rank (node 1 of TP16 logs TP8..TP15).
    """
    dp_attention = bool(args.enable_dp_attention)
    attn_tp = args.tp_size // args.dp_size if dp_attention else args.tp_size
    nnodes = max(1, int(getattr(args, "nnodes", 1) or 1))
    per_node = args.tp_size * args.pp_size // nnodes
    replicas = []
    number = 0
    for replica in range(1 if dp_attention else args.dp_size):
        ranks = []
        for pp_rank in range(args.pp_size):
            for tp_rank in range(args.tp_size):
                dp_rank = tp_rank // attn_tp if dp_attention else replica
                tag = []
                if args.dp_size > 1:
                    tag.append("DP%d" % dp_rank)
                if args.pp_size > 1:
                    tag.append("PP%d" % pp_rank)
                if args.tp_size > 1:
                    tag.append("TP%d" % tp_rank)
                if args.ep_size > 1:
                    tag.append("EP%d" % (tp_rank % args.ep_size))
                if nnodes > 1:
                    gpu = args.base_gpu_id + (number % per_node) * args.gpu_id_step
                    ranks.append(Rank(number, gpu, " ".join(tag), dp_rank, number // per_node))
                else:
                    gpu = args.base_gpu_id + number * args.gpu_id_step
                    ranks.append(Rank(number, gpu, " ".join(tag), dp_rank))
                number += 1
        schedulers = list(range(args.dp_size)) if dp_attention else [replica]
        replicas.append(Replica(ranks, schedulers))
    return replicas


def kv_dtype(args, model) -> tuple:
    """(torch dtype name, element bytes) of the KV cache: auto = the model dtype, or fp8_e4m3 when the
    checkpoint's quantization config says kv_cache_quant_algo FP8."""
    name = args.kv_cache_dtype
    if name == "auto":
        name = "fp8_e4m3" if model.kv_cache_quant_algo == "FP8" else model.dtype
    return _KV_DTYPES[name]


def cell_bytes(model, layers: int, attn_tp: int, elem: int, kv_era: str, fp4: bool = False) -> int:
    """Bytes one token takes in one rank's KV pool (profile_max_num_token / get_cell_size_per_token).

    MLA: (kv_lora_rank + qk_rope_head_dim) * layers * elem, not divided by TP (the latent is replicated), plus
    DeepSeek-V3.2's indexer. MHA/GQA: max(1, kv_heads // attn_tp) * (head_dim + v_head_dim) * layers * elem
    (classic: head_dim * 2). FP4: half, plus one scale byte per 16 elements.
    """
    if model.attention == "mla":
        width = int(model.kv_lora_rank) + model.qk_rope_head_dim
        cell = width * layers * elem
        if fp4:
            cell = cell // 2 + (width // 16) * layers * elem
        if model.index_head_dim:
            index = int(model.index_head_dim)
            cell += (index + index // 128 * 4) * layers
        return cell
    heads = max(1, model.num_kv_heads // attn_tp)
    width = model.head_dim * 2 if kv_era == ERA_CLASSIC else model.head_dim + model.v_head_dim
    cell = heads * width * layers * elem
    if fp4:
        cell = cell // 2 + (heads * model.head_dim * layers * 2 * elem) // 16
    return cell


def draft_layers(draft) -> int:
    """Layers of the draft's KV: num_nextn_predict_layers (MTP) when the config has it, else num_hidden_layers."""
    if draft.num_nextn_predict_layers:
        return int(draft.num_nextn_predict_layers)
    return draft.num_layers


class Server:
    """The memory picture of one server: inputs, the startup outcome per rank, and the serving headroom.

    Build it with :func:`plan`. ``failure`` is None when SGLang would start; otherwise a StartupFailure and the
    ranks' ``steps`` stop where SGLang stops.
    """

    def __init__(self, host, model, draft, args, hosts=None, contention=False):
        self.host = host
        self.contention = bool(contention)   # apply faults.load_contention_mib (the server; never the oracle)
        # One host per node, in --node-rank order: a rank's free memory, CUDA context and NCCL buffers are its
        # node's (hosts[rank.node]); P and A are the MIN over the ranks of every node, as SGLang's all-reduce
        # (get_available_gpu_memory(distributed=True)) makes them. One node: [host].
        self.hosts = list(hosts) if hosts else [host]
        self.node_rank = int(getattr(args, "node_rank", 0) or 0) if len(self.hosts) > 1 else 0
        self.model = model
        self.draft = draft
        self.args = args
        self.era = era(host.sglang_version)
        self.replicas = layout(args)
        self.ranks = [rank for replica in self.replicas for rank in replica.ranks]
        self.local_ranks = [rank for rank in self.ranks if rank.node == self.node_rank]
        self.attn_tp = args.tp_size // args.dp_size if args.enable_dp_attention else args.tp_size
        self.kv_dtype_name, self.kv_elem = kv_dtype(args, model)
        self.capacity = (host.memory_total_mib - host.memory_reserved_mib) * MIB
        self.failure = None
        self.warnings = []
        self.weight_bytes = model.weight_bytes_per_rank(args.tp_size, args.pp_size)
        self.draft_weight_bytes = draft.weight_bytes_per_rank(args.tp_size) if draft else 0
        self.release = version_tuple(host.sglang_version)
        self.hybrid = bool(getattr(model, "hybrid_gdn", False))
        # Hybrid: the KV pool holds only the full-attention layers (mambaish full_attention_layer_ids).
        self.layers = (model.num_full_attention_layers if self.hybrid
                       else max(model.layers_per_stage(args.pp_size)))
        self.mamba_ssm_dtype = self.mamba_conv_bytes = self.mamba_ssm_bytes = self.mamba_per_req = 0
        if self.hybrid:
            self.mamba_ssm_dtype = self._mamba_ssm_dtype()
            self.mamba_conv_bytes, self.mamba_ssm_bytes = model.mamba_state_bytes(
                self.attn_tp, STATE_DTYPE_BYTES[self.mamba_ssm_dtype], 2, self.release >= (0, 5, 4))
            self.mamba_per_req = self.mamba_conv_bytes + self.mamba_ssm_bytes
        self.cell = cell_bytes(model, self.layers, self.attn_tp, self.kv_elem, self.era,
                               args.kv_cache_dtype == "fp4_e2m1")
        self.draft_cell = 0
        if draft is not None:
            d_layers = draft_layers(draft)
            if self.era == ERA_CURRENT:
                # kv_cache_configurator: the EAGLE draft's layers ride in the target's cell.
                self.cell += int(self.cell * d_layers / self.layers)
            else:
                self.draft_cell = cell_bytes(draft, d_layers, self.attn_tp, self.kv_elem, self.era)
        self.draft_graph_bytes = int(host.memory["draft_graph_mib"] * MIB) if draft is not None else 0
        self.workspace_bytes = int(host.memory["workspace_mib"] * MIB)

    # -- startup ---------------------------------------------------------------------------------------------

    def tokens_per_request(self) -> int:
        """Tokens a decode step runs per request: 1, or the verified draft tokens with speculative decoding."""
        return self.args.speculative_num_draft_tokens if self.args.speculative_algorithm else 1

    def graph_bytes(self, replica) -> int:
        """The decode CUDA graphs' memory pool: a base plus a share per captured token."""
        if not replica.graph_max_bs:
            return 0
        memory = self.host.memory
        return int(memory["graph_mib_base"] * MIB) + int(
            memory["graph_kib_per_token"] * 1024 * replica.graph_max_bs * self.tokens_per_request())

    def _profile(self, replica):
        """Step 3 for one replica: budget, tokens, request slots (raises StartupFailure('init_oom'))."""
        args, model = self.args, self.model
        f = args.mem_fraction_static
        everyone = [rank.number for rank in replica.ranks]   # the budget is the replica's: all its ranks fail
        mm = 100 * MIB if (self.era == ERA_CURRENT and model.is_multimodal
                           and version_tuple(self.host.sglang_version) >= (0, 5, 18)) else 0
        budget = gib(replica.a) - gib(replica.p) * (1 - f) - gib(mm)
        if self.hybrid:
            budget = self._mamba_budget(replica, budget, everyone)
        if self.era == ERA_CURRENT and budget <= 0:
            raise StartupFailure("init_oom", "profile", replica.ranks[0].number,
                                 {"minimum": 1 - gib(replica.a) / gib(replica.p)}, everyone)
        tokens = int(budget * GIB) // self.cell
        dp_div = args.dp_size if args.enable_dp_attention else 1
        if args.max_running_requests is None:
            slots = min(max(int(tokens / args.context_len * 512), 2048), 4096)
        else:
            slots = args.max_running_requests // dp_div
        if self.hybrid:
            slots = self._mamba_request_cap(replica, slots, tokens, everyone)
        if self.era == ERA_CLASSIC and args.speculative_algorithm in SPEC_WITH_DRAFT:
            tokens += (slots * args.speculative_num_steps * args.speculative_eagle_topk
                       + slots * args.speculative_num_draft_tokens + 100)
        if args.max_total_tokens is not None:
            if args.max_total_tokens > tokens:
                self.warnings.append((replica, "max_total_tokens=%d is larger than the profiled value %d. "
                                      "Use the profiled value instead." % (args.max_total_tokens, tokens)))
            tokens = min(tokens, args.max_total_tokens)
        tokens = tokens // args.page_size * args.page_size
        if tokens <= 0:
            raise StartupFailure("init_oom", "profile", replica.ranks[0].number, {"tokens": tokens}, everyone)
        replica.tokens = tokens
        replica.req_slots = slots
        wanted = tokens // 2 if args.max_running_requests is None else args.max_running_requests // dp_div
        replica.max_running_requests = min(wanted, slots)
        replica.max_req_input_len = min(args.context_len - 1, tokens - 1) - 5
        if replica.max_req_input_len <= 0:
            raise StartupFailure("pool_too_small", "profile", replica.ranks[0].number, {}, everyone)
        if not args.disable_cuda_graph and args.cuda_graph_bs:
            # get_batch_sizes_to_capture: sizes above the request slots are dropped, the slot count added.
            sizes = set(args.cuda_graph_bs)
            if max(sizes) > slots:
                sizes.add(slots)
            replica.captured_bs = sorted(size for size in sizes if size <= slots)
            replica.graph_max_bs = max(replica.captured_bs)

    # -- hybrid linear-attention models: the Mamba state pool ----------------------------------------------

    def _mamba_ssm_dtype(self) -> str:
        """The SSM state dtype: --mamba-ssm-dtype; from 0.5.9 (mamba2_state_dtype) else the config's
        mamba_ssm_dtype; else float32. The conv state is bf16 in every release."""
        if self.args.mamba_ssm_dtype:
            return self.args.mamba_ssm_dtype
        if self.release >= (0, 5, 9) and self.model.config_mamba_ssm_dtype:
            return self.model.config_mamba_ssm_dtype
        return "float32"

    def mamba_ratio(self) -> int:
        """Mamba slots per running request (MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO and the extra-buffer
        additions, _calculate_mamba_ratio), per release: 1 without radix cache (0.5.2-0.5.3 always turn it off);
        3 up to 0.5.6; 0.5.7 adds 2 always (1 only for extra_buffer with speculative decoding); 0.5.8-0.5.9 add 2
        with --mamba-scheduler-strategy extra_buffer; 0.5.10+ add 2 (overlap schedule) or 1 (without) with
        extra_buffer, which "auto" means from 0.5.14 for the Qwen3-Next/Qwen3.5 architectures when the overlap
        schedule is on or page_size > 1 (else no_buffer: 3)."""
        args, release = self.args, self.release
        if release < (0, 5, 4) or args.disable_radix_cache:
            return 1
        if release < (0, 5, 7):
            return 3
        strategy = args.mamba_scheduler_strategy or "auto"
        if strategy == "auto":
            paged = (args.page_size or 1) > 1
            extra = (release >= (0, 5, 14) and self.model.architecture in MAMBA_EXTRA_BUFFER_ARCHS
                     and (not args.disable_overlap_schedule or paged))
            strategy = "extra_buffer" if extra else "no_buffer"
        if release < (0, 5, 8):
            return 3 + 2
        if strategy != "extra_buffer":
            return 3
        if release < (0, 5, 10):
            return 3 + 2
        return 3 + (1 if args.disable_overlap_schedule else 2)

    def _mamba_budget(self, replica, rest: float, everyone: list) -> float:
        """handle_max_mamba_cache of the server's release: sets ``replica.mamba_slots`` (K) and returns the KV
        budget (GiB) left. Per release (no speculative decoding; dp = --dp-size with DP attention, else 1):

        * 0.5.2-0.5.3 (ModelRunner.__init__ + profile_max_num_token): radix cache is forced off; K =
          --max-mamba-cache-size, else --max-running-requests, else 512; K //= dp; rest -= K * per_req.
        * 0.5.4-0.5.6 (model_runner.handle_max_mamba_cache): radix off: K = --max-mamba-cache-size, else
          --max-running-requests, else 512; radix on: K = int(rest * r / (1 + r) * 2**30 // per_req) (a given
          --max-mamba-cache-size is overwritten); K //= dp; rest -= K * per_req.
        * 0.5.7-0.5.8 (model_runner_kv_cache_mixin): radix off or --max-mamba-cache-size: K = that, else
          --max-running-requests, else 512, then // dp; otherwise the ratio split; rest -= K * per_req.
        * 0.5.9-0.5.16: --max-mamba-cache-size // dp; else radix off with --max-running-requests: that // dp;
          else the ratio split (also radix off without --max-running-requests); from 0.5.13 K <= 0 raises
          "Not enough GPU memory for hybrid (mamba/linear-attention) state cache"; rest -= K * per_req.
        * 0.5.17+ (kv_cache_configurator._handle_max_mamba_cache): the same choices, the ratio split counts the
          pool's padding slot, K = int((budget_bytes - per_req) // per_req), and rest -= (K + 1) * per_req
          (0.5.23: max(1, --max-running-requests // dp)).
        """
        args, release, per_req = self.args, self.release, self.mamba_per_req
        dp = args.dp_size if args.enable_dp_attention else 1
        ratio = args.mamba_full_memory_ratio if args.mamba_full_memory_ratio is not None else 0.9
        explicit, requests = args.max_mamba_cache_size, args.max_running_requests
        radix_off = bool(args.disable_radix_cache) or release < (0, 5, 4)
        padding = 0
        if release < (0, 5, 4):
            slots = explicit if explicit is not None else (requests if requests is not None else 512)
            slots //= dp
        elif release < (0, 5, 7):
            if radix_off:
                slots = explicit if explicit is not None else (requests if requests is not None else 512)
            else:
                slots = int((rest * ratio / (1 + ratio) * GIB) // per_req // 1)
            slots //= dp
        elif release < (0, 5, 9):
            if radix_off or explicit is not None:
                slots = explicit if explicit is not None else (requests if requests is not None else 512)
                slots //= dp
            else:
                slots = int((rest * ratio / (1 + ratio) * GIB) // per_req)
        else:
            if explicit is not None:
                slots = explicit // dp
            elif radix_off and requests is not None:
                slots = requests // dp
                if release >= (0, 5, 23):
                    slots = max(1, slots)
            elif release < (0, 5, 17):
                slots = int((rest * ratio / (1 + ratio) * GIB) // per_req)
            else:
                budget_bytes = rest * ratio / (1 + ratio) * GIB
                slots = int((budget_bytes - per_req) // per_req)
            if release >= (0, 5, 17):
                padding = 1
        replica.mamba_slots = slots
        if slots <= 0 and release >= (0, 5, 13):
            raise StartupFailure("init_oom", "profile", replica.ranks[0].number,
                                 {"error": mamba_not_enough_message(slots, rest, per_req)}, everyone)
        return rest - (slots + padding) * per_req / GIB

    def _mamba_request_cap(self, replica, slots: int, tokens: int, everyone: list) -> int:
        """The request slots capped at K // ratio (init_memory_pool / resolve_max_num_reqs): SGLang 0.5.17+ warns
        when the cap binds; 0.5.13+ raise when it leaves no request. Before 0.5.13 nothing checks it (a server
        without a request slot cannot serve): the simulator fails it as an init OOM."""
        ratio = self.mamba_ratio()
        cap = replica.mamba_slots // ratio
        if self.release >= (0, 5, 17) and cap < min(slots, tokens // 2):
            self.warnings.append((replica, "max_running_requests is capped to %d by the mamba state cache "
                                  "(max_mamba_cache_size=%d, %d state slots per request). To raise it: increase "
                                  "--mamba-full-memory-ratio or --max-mamba-cache-size, or halve the state size "
                                  "with --mamba-ssm-dtype bfloat16." % (cap, replica.mamba_slots, ratio)))
        slots = min(slots, cap)
        if slots <= 0:
            detail = {"error": mamba_too_small_message(replica.mamba_slots, ratio, slots)} \
                if self.release >= (0, 5, 13) else {"minimum": None}
            raise StartupFailure("init_oom", "profile", replica.ranks[0].number, detail, everyone)
        return slots

    def mamba_bytes(self, replica) -> int:
        """The MambaPool on one rank: conv and SSM state of K + 1 slots (the padding slot is allocated in every
        release, counted in the budget only from 0.5.17)."""
        return (replica.mamba_slots + 1) * self.mamba_per_req if self.hybrid else 0

    def mamba_pool_sizes(self, replica) -> tuple:
        """(conv bytes, ssm bytes) of one rank's MambaPool, as its log line prints them."""
        return ((replica.mamba_slots + 1) * self.mamba_conv_bytes, (replica.mamba_slots + 1) * self.mamba_ssm_bytes)

    def req_to_token_bytes(self, replica) -> int:
        """ReqToTokenPool: R rows of (context_len + 4 [+ draft tokens]) int32."""
        extra = 4 + (self.args.speculative_num_draft_tokens or 0)
        return replica.req_slots * (self.args.context_len + extra) * 4

    def kv_bytes(self, replica) -> int:
        """The target's KV pool on one rank: (tokens + page_size) rows of the cell."""
        return (replica.tokens + self.args.page_size) * self.cell

    def draft_kv_bytes(self, replica) -> int:
        """The classic/mixin draft's own KV pool (same token count, its own cell)."""
        return (replica.tokens + self.args.page_size) * self.draft_cell if self.draft_cell else 0

    def run_startup(self):
        """Walk the startup; sets P, A, tokens and every rank's steps, or ``failure``."""
        try:
            self._startup()
        except StartupFailure as failure:
            self.failure = failure

    def _contend(self, phase):
        """faults.load_contention_mib takes its memory on each rank's GPU, if its load_contention_from is ``phase``
        (all or nothing: when they are not free it gets none)."""
        if not self.contention:
            return
        for rank in self.ranks:
            host = self.host_of(rank)
            taken = host.load_contention(self.args.mem_fraction_static).get(rank.gpu, 0) * MIB
            if host.contention_from == phase and taken and taken <= rank.free:
                rank.contend(NEIGHBOUR_STEP, taken)

    def _each(self, step, size_of, kind="oom"):
        """Allocate one step on every rank, replica by replica; ``size_of(replica)`` gives the bytes."""
        for replica in self.replicas:
            size = size_of(replica)
            for position, rank in enumerate(replica.ranks):
                try:
                    rank.allocate(step, size, self.capacity)
                except StartupFailure as failure:
                    later = [other.number for other in replica.ranks[position + 1:] if size > other.free]
                    raise StartupFailure(kind, step, rank.number, failure.detail, [rank.number] + later)

    def host_of(self, rank):
        """The host whose GPU the rank runs on."""
        return self.hosts[rank.node] if rank.node < len(self.hosts) else self.host

    def is_local(self, rank) -> bool:
        """True for a rank of this node (every rank of a single-node server)."""
        return rank.node == self.node_rank

    def _startup(self):
        for rank in self.ranks:
            if rank.gpu >= self.host_of(rank).gpu_count:
                raise StartupFailure("crash", "init", rank.number, {"error": "invalid device ordinal"})
            rank.free = self.host_of(rank).free_idle_mib(rank.gpu) * MIB
        for rank in self.ranks:
            host = self.host_of(rank)
            rank.allocate("context", (host.cuda_context_mib + host.noise_of(rank.gpu)) * MIB, self.capacity)
        for replica in self.replicas:
            for position, rank in enumerate(replica.ranks):
                try:
                    rank.allocate("init", self.host_of(rank).nccl_mib * MIB, self.capacity)
                except StartupFailure as failure:
                    later = [other.number for other in replica.ranks[position + 1:]
                             if self.host_of(other).nccl_mib * MIB > other.free]
                    raise StartupFailure("oom", "init", rank.number, failure.detail, [rank.number] + later)
        for replica in self.replicas:
            replica.p = min(rank.free for rank in replica.ranks)
            if self.args.tp_size > 1:
                unbalanced = [rank for rank in replica.ranks if replica.p < rank.free * 0.9]
                if unbalanced:
                    rank = unbalanced[0]
                    raise StartupFailure("unbalanced", "init", rank.number, {"min": replica.p, "local": rank.free},
                                         [each.number for each in unbalanced])
        self._contend("load")
        self._each("weights", lambda replica: self.weight_bytes)
        if self.draft is not None and self.era == ERA_CURRENT:
            self._each("draft_weights", lambda replica: self.draft_weight_bytes)
        self._contend("pool")
        for replica in self.replicas:
            replica.a = min(rank.free for rank in replica.ranks)
            self._profile(replica)
        self._each("req_to_token", self.req_to_token_bytes)
        if self.hybrid:
            self._each("mamba", self.mamba_bytes)
        self._each("kv", self.kv_bytes)
        for rank in self.ranks:
            if rank.neighbour:
                rank.contend(NEIGHBOUR_GONE_STEP, -rank.neighbour)
        self._each("workspace", lambda replica: self.workspace_bytes)
        self._each("graph", self.graph_bytes, "capture_oom")
        if self.draft is not None and self.era != ERA_CURRENT:
            self._each("draft_weights", lambda replica: self.draft_weight_bytes)
            self._each("draft_kv", self.draft_kv_bytes)
        if self.draft is not None and not self.args.disable_cuda_graph:
            self._each("draft_graph", lambda replica: self.draft_graph_bytes, "capture_oom")

    # -- serving ---------------------------------------------------------------------------------------------

    def min_headroom(self) -> int:
        """The smallest free memory over all ranks once started (what activations may take)."""
        return min(rank.free for rank in self.ranks)

    def activation_bytes(self, replica, prefill_tokens: int, decode_requests: int) -> int:
        """Bytes the caching allocator holds for one batch: prefill tokens, plus decode tokens when the decode
        batch runs eagerly (larger than the largest captured graph, or graphs disabled); times 1 + fragmentation."""
        memory = self.host.memory
        eager = decode_requests if decode_requests > replica.graph_max_bs else 0
        raw = (prefill_tokens * memory["activation_bytes_per_prefill_token"]
               + eager * self.tokens_per_request() * memory["activation_bytes_per_decode_token"])
        return int(raw * (1 + memory["allocator_fragmentation"]))

    def max_prefill_batch_tokens(self, replica) -> int:
        """The most tokens one prefill batch runs: the chunk (capped by max_prefill_tokens); without chunking a
        single prompt up to max_req_input_len runs whole."""
        chunk = self.args.chunked_prefill_size
        if chunk is not None and chunk > 0:
            return min(chunk, self.args.max_prefill_tokens, replica.tokens)
        return min(max(self.args.max_prefill_tokens, replica.max_req_input_len), replica.tokens)

    def stress_activation_bytes(self, replica) -> int:
        """Activations of the stress load: the larger of a full prefill chunk and a full decode batch (both at
        once with --enable-mixed-chunk)."""
        prefill_tokens = self.max_prefill_batch_tokens(replica)
        if self.args.enable_mixed_chunk:
            return self.activation_bytes(replica, prefill_tokens, replica.max_running_requests)
        return max(self.activation_bytes(replica, prefill_tokens, 0),
                   self.activation_bytes(replica, 0, replica.max_running_requests))

    def stress_headroom(self) -> int:
        """Bytes left on the tightest rank while the stress batches run (negative: the server dies)."""
        return min(replica.min_headroom() - self.stress_activation_bytes(replica) for replica in self.replicas)

    def survives_stress(self, safety_bytes: int = 0) -> bool:
        """True when the server starts and the stress batches leave ``safety_bytes`` free on every rank."""
        return self.failure is None and self.stress_headroom() >= safety_bytes


def plan(host, model, draft, args, hosts=None, contention=False) -> Server:
    """The memory picture of ``args`` (resolved server args) on ``host``: startup walked, headroom known.
    ``hosts``: with --nnodes > 1, every node's host in --node-rank order (the plan is the whole server's).
    ``contention``: apply the hosts' faults.load_contention_mib (the server does; the oracle does not)."""
    server = Server(host, model, draft, args, hosts, contention)
    server.run_startup()
    return server

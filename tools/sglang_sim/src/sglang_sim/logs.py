# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""SGLang's log lines, word for word, in the two wordings a host can choose (host.json ``log_format``).

Every record is ``[%Y-%m-%d %H:%M:%S{prefix}] message`` (configure_logger), the prefix being the scheduler's
`` DPn PPn TPn EPn`` tags, empty for the HTTP process and for a TP1 server. Tracebacks follow a record without a
prefix, as Python's logging prints them. Lines go to stderr, line-buffered, so journald gets them as SGLang's.

``classic`` is the wording of SGLang 0.5.5.post3 (``Load weight end. type=..., dtype=...``, ``Capture cuda graph
begin/end``, ``Init torch distributed ends. mem usage=``); ``current`` that of 0.5.23 (``Load weight end.
elapsed=..., type=..., [quant=..., ]avail mem=``, ``KV Cache is allocated. dtype: ...``, ``Capture target decode
CUDA graph begin/end``, ``Init parallel ends`` and ``Memory baseline taken``).
"""
from __future__ import annotations

import math
import os
import sys
import threading
import time

from sglang_sim.hostspec import GIB, MIB

# Where SGLang's frames point in tracebacks: the stand-in sglang package, which pip installs beside this one in the
# same site-packages (sglang/launch_server.py).
_SGLANG_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "sglang")

CUDA_GRAPH_CAPTURE_FAILED_MSG = {
    "classic": (
        "Possible solutions:\n"
        "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
        "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)\n"
        "3. disable torch compile by not using --enable-torch-compile\n"
        "4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)\n"
        "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose \n"),
    "current": (
        "Possible solutions:\n"
        "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
        "2. set --cuda-graph-max-bs-decode to a smaller value (e.g., 16)\n"
        "3. disable decode CUDA graph by --cuda-graph-backend-decode=disabled. "
        "(Not recommended. Huge performance loss)\n"
        "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose \n"),
}


def format_size(size: float) -> str:
    """Sizes as torch's OOM message prints them (KiB/MiB/GiB with two decimals)."""
    if size < MIB:
        return "%.2f KiB" % (size / 1024)
    if size < GIB:
        return "%.2f MiB" % (size / MIB)
    return "%.2f GiB" % (size / GIB)


def cuda_oom_message(gpu: int, tried: int, capacity: int, free: int, used: int, graphs: int = 0) -> str:
    """torch's ``CUDA out of memory`` text (torch 2.x, one line) for an allocation that does not fit."""
    free = max(0, free)
    private = " with %s allocated in private pools (e.g., CUDA Graphs)," % format_size(graphs) if graphs else ""
    return ("CUDA out of memory. Tried to allocate %s. GPU %d has a total capacity of %s of which %s is free. "
            "Including non-PyTorch memory, this process has %s memory in use. Of the allocated memory %s is "
            "allocated by PyTorch,%s and %s is reserved by PyTorch but unallocated. If reserved but unallocated "
            "memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  "
            "See documentation for Memory Management  "
            "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
            % (format_size(tried), gpu, format_size(capacity), format_size(free), format_size(used),
               format_size(max(0, used - 512 * MIB)), private, format_size(min(used, 20 * MIB))))


def frame(path: str, line: int, function: str, source: str) -> list:
    """Two traceback lines for a frame in SGLang's package."""
    return ['  File "%s", line %d, in %s' % (os.path.join(_SGLANG_DIR, path), line, function), "    " + source]


# The frames from the scheduler process down to the failing call (SGLang 0.5.9's line numbers).
SCHEDULER_INIT = (frame("srt/managers/scheduler.py", 3130, "run_scheduler_process", "scheduler = Scheduler(")
                  + frame("srt/managers/scheduler.py", 360, "__init__", "self.init_model_worker()")
                  + frame("srt/managers/scheduler.py", 553, "init_model_worker", "self.init_tp_model_worker()")
                  + frame("srt/managers/scheduler.py", 511, "init_tp_model_worker", "self.tp_worker = TpModelWorker(")
                  + frame("srt/managers/tp_worker.py", 247, "__init__", "self._init_model_runner()")
                  + frame("srt/managers/tp_worker.py", 330, "_init_model_runner", "self._model_runner = ModelRunner(")
                  + frame("srt/model_executor/model_runner.py", 413, "__init__",
                          "self.initialize(min_per_gpu_memory)"))
DRAFT_INIT = (frame("srt/managers/scheduler.py", 3130, "run_scheduler_process", "scheduler = Scheduler(")
              + frame("srt/managers/scheduler.py", 360, "__init__", "self.init_model_worker()")
              + frame("srt/managers/scheduler.py", 555, "init_model_worker", "self.init_draft_worker()")
              + frame("srt/managers/scheduler.py", 530, "init_draft_worker", "self.draft_worker = DraftWorkerClass(")
              + frame("srt/speculative/eagle_worker.py", 112, "__init__", "super().__init__(")
              + frame("srt/managers/tp_worker.py", 330, "_init_model_runner", "self._model_runner = ModelRunner(")
              + frame("srt/model_executor/model_runner.py", 413, "__init__",
                      "self.initialize(min_per_gpu_memory)"))
STEP_FRAMES = {
    "init": frame("srt/model_executor/model_runner.py", 392, "__init__",
                  "min_per_gpu_memory = self.init_torch_distributed()")
    + frame("srt/model_executor/model_runner.py", 845, "init_torch_distributed", "raise RuntimeError(msg)"),
    "weights": frame("srt/model_executor/model_runner.py", 488, "initialize", "self.load_model()")
    + frame("srt/model_executor/model_runner.py", 1012, "load_model", "self.model = self.loader.load_model(")
    + frame("srt/model_loader/loader.py", 641, "load_model", "self.load_weights_and_postprocess(")
    + frame("srt/model_loader/loader.py", 670, "load_weights_and_postprocess", "model.load_weights(weights)"),
    "profile": frame("srt/model_executor/model_runner.py", 590, "initialize",
                     "self.init_memory_pool(min_per_gpu_memory)")
    + frame("srt/model_executor/model_runner_kv_cache_mixin.py", 416, "init_memory_pool", "raise RuntimeError("),
    "profile_current": frame("srt/model_executor/model_runner.py", 1490, "initialize",
                             "self.init_memory_pool(pre_model_load_memory)")
    + frame("srt/mem_cache/kv_cache_configurator.py", 3050, "_profile_available_bytes", "raise ValueError("),
    # Hybrid linear-attention models (SGLang 0.5.17's line numbers): the Mamba pool gets no slot, or no request.
    "profile_mamba": frame("srt/model_executor/model_runner.py", 1490, "initialize",
                           "self.init_memory_pool(pre_model_load_memory)")
    + frame("srt/mem_cache/kv_cache_configurator.py", 1782, "_resolve_memory_pool_config",
            "available_bytes = self._profile_available_bytes(pre_model_load_memory)")
    + frame("srt/mem_cache/kv_cache_configurator.py", 1637, "_profile_available_bytes",
            "rest_memory = self._handle_max_mamba_cache(rest_memory)")
    + frame("srt/mem_cache/kv_cache_configurator.py", 1963, "_handle_max_mamba_cache", "raise RuntimeError("),
    "profile_mamba_requests": frame("srt/model_executor/model_runner.py", 1490, "initialize",
                                    "self.init_memory_pool(pre_model_load_memory)")
    + frame("srt/mem_cache/kv_cache_configurator.py", 1784, "_resolve_memory_pool_config",
            "config.max_running_requests = self.resolve_max_num_reqs(")
    + frame("srt/mem_cache/kv_cache_configurator.py", 1753, "resolve_max_num_reqs", "raise RuntimeError("),
    "mamba": frame("srt/model_executor/model_runner.py", 590, "initialize", "self.init_memory_pool(min_per_gpu_memory)")
    + frame("srt/model_executor/model_runner_kv_cache_mixin.py", 520, "init_memory_pool",
            "self.req_to_token_pool = HybridReqToTokenPool(")
    + frame("srt/mem_cache/memory_pool.py", 812, "__init__", "self.mamba_pool = MambaPool(")
    + frame("srt/mem_cache/memory_pool.py", 640, "__init__", "conv_state = torch.zeros("),
    "req_to_token": frame("srt/model_executor/model_runner.py", 590, "initialize",
                          "self.init_memory_pool(min_per_gpu_memory)")
    + frame("srt/model_executor/model_runner_kv_cache_mixin.py", 520, "init_memory_pool",
            "self.req_to_token_pool = ReqToTokenPool(")
    + frame("srt/mem_cache/memory_pool.py", 121, "__init__", "self.req_to_token = torch.zeros("),
    "kv": frame("srt/model_executor/model_runner.py", 590, "initialize", "self.init_memory_pool(min_per_gpu_memory)")
    + frame("srt/model_executor/model_runner_kv_cache_mixin.py", 640, "init_memory_pool",
            "self.token_to_kv_pool = MLATokenToKVPool(")
    + frame("srt/mem_cache/memory_pool.py", 1210, "_create_buffers", "torch.zeros("),
    "workspace": frame("srt/model_executor/model_runner.py", 606, "initialize", "self.init_attention_backend()")
    + frame("srt/model_executor/model_runner.py", 1890, "init_attention_backend",
            "self.attn_backend = self._get_attention_backend()"),
    "graph": frame("srt/model_executor/model_runner.py", 608, "initialize", "self.init_device_graphs()")
    + frame("srt/model_executor/model_runner.py", 2145, "init_device_graphs",
            "self.graph_runner = graph_runners[self.device](self)")
    + frame("srt/model_executor/cuda_graph_runner.py", 372, "__init__", "raise Exception("),
    "draft_graph": frame("srt/speculative/eagle_worker.py", 240, "init_cuda_graphs",
                         "self.cuda_graph_runner = EAGLEDraftCudaGraphRunner(self)")
    + frame("srt/speculative/eagle_draft_cuda_graph_runner.py", 297, "__init__", "raise Exception("),
}
RUNTIME_FRAMES = (frame("srt/managers/scheduler.py", 3170, "run_scheduler_process", "scheduler.event_loop_normal()")
                  + ['  File "%s", line 120, in decorate_context' % os.path.join(
                      os.path.dirname(_SGLANG_DIR), "torch", "utils", "_contextlib.py"),
                     "    return func(*args, **kwargs)"]
                  + frame("srt/managers/scheduler.py", 1093, "event_loop_normal", "result = self.run_batch(batch)")
                  + frame("srt/managers/scheduler.py", 2391, "run_batch",
                          "batch_result = self.model_worker.forward_batch_generation(")
                  + frame("srt/managers/tp_worker.py", 452, "forward_batch_generation",
                          "logits_output, can_run_cuda_graph = self.model_runner.forward(")
                  + frame("srt/model_executor/model_runner.py", 2311, "forward", "output = self._forward_raw(")
                  + frame("srt/model_executor/model_runner.py", 2372, "_forward_raw", "ret = self.forward_extend(")
                  + frame("srt/model_executor/model_runner.py", 2262, "forward_extend", "return self.model.forward("))


class Log:
    """Writes SGLang records to a stream, one lock for all threads."""

    def __init__(self, log_format: str, stream=None):
        self.format = log_format
        self.stream = stream or sys.stderr
        self.lock = threading.Lock()

    def record(self, tag: str, message: str, extra_lines=()):
        """``[time TAG] message``, then any lines (a traceback) as they are."""
        prefix = time.strftime("%Y-%m-%d %H:%M:%S")
        lines = ["[%s%s] %s" % (prefix, (" " + tag) if tag else "", message)] + list(extra_lines)
        with self.lock:
            self.stream.write("\n".join(lines) + "\n")
            self.stream.flush()

    def traceback(self, tag: str, frames: list, exception: str):
        """``Scheduler hit an exception: Traceback ...`` ending in ``exception`` (which may span lines)."""
        self.record(tag, "Scheduler hit an exception: Traceback (most recent call last):",
                    list(frames) + exception.rstrip("\n").split("\n") + [""])


# -- the startup lines, per format --------------------------------------------------------------------------------

def init_begin(fmt: str) -> str:
    """Start of distributed init."""
    return "Init torch distributed begin." if fmt == "classic" else "Init parallel begin."


def init_end(fmt: str, elapsed: float, usage_gib: float) -> list:
    """End of distributed init (classic) or parallel init plus the memory baseline (current)."""
    if fmt == "classic":
        return ["Init torch distributed ends. mem usage=%.2f GB" % usage_gib]
    return ["Init parallel ends. elapsed=%.2f s" % elapsed, "Memory baseline taken. mem usage=%.2f GB" % usage_gib]


def load_begin(avail_gib: float) -> str:
    """``Load weight begin. avail mem=X GB``"""
    return "Load weight begin. avail mem=%.2f GB" % avail_gib


def load_end(fmt: str, elapsed: float, cls: str, dtype: str, quant: str | None, avail_gib: float,
             usage_gib: float) -> str:
    """``Load weight end. ...`` in either wording."""
    if fmt == "classic":
        return "Load weight end. type=%s, dtype=%s, avail mem=%.2f GB, mem usage=%.2f GB." % (
            cls, dtype, avail_gib, usage_gib)
    return "Load weight end. elapsed=%.2f s, type=%s, %savail mem=%.2f GB, mem usage=%.2f GB." % (
        elapsed, cls, (quant + ", ") if quant else "", avail_gib, usage_gib)


def kv_line(fmt: str, dtype: str, tokens: int, sizes: tuple) -> str:
    """``KV Cache is allocated. #tokens: N, KV size: X GB`` (MLA: one size; MHA: K and V)."""
    what = "dtype: %s, " % dtype if fmt == "current" else ""
    if len(sizes) == 1:
        return "KV Cache is allocated. %s#tokens: %d, KV size: %.2f GB" % (what, tokens, sizes[0] / GIB)
    return "KV Cache is allocated. %s#tokens: %d, K size: %.2f GB, V size: %.2f GB" % (
        what, tokens, sizes[0] / GIB, sizes[1] / GIB)


def mamba_line(release: tuple, slots: int, conv_bytes: int, ssm_bytes: int) -> str:
    """MambaPool's ``Mamba Cache is allocated. ...`` line (trailing space included, as SGLang prints it); the sizes
    cover the pool's slots + 1. 0.5.2-0.5.3 print no max_mamba_cache_size."""
    sizes = "conv_state size: %.2fGB, ssm_state size: %.2fGB " % (conv_bytes / GIB, ssm_bytes / GIB)
    if tuple(release) < (0, 5, 4):
        return "Mamba Cache is allocated. " + sizes
    return "Mamba Cache is allocated. max_mamba_cache_size: %d, %s" % (slots, sizes)


# The attention backend of hybrid GDN models (attention_registry.py, every rank, 0.5.3+); 0.5.2-0.5.3 warn at start
# that the radix cache is turned off.
HYBRID_BACKEND_LINE = "Using hybrid linear attention backend for hybrid GDN models."
HYBRID_RADIX_OFF_LINE = "Hybrid GDN model detected, disable radix cache"


def pool_end(avail_gib: float) -> str:
    """``Memory pool end. avail mem=X GB``"""
    return "Memory pool end. avail mem=%.2f GB" % avail_gib


def capture_begin(fmt: str, name: str, tokens_per_req: int, avail_gib: float) -> str:
    """Graph capture begin; ``name`` is the classic role word ('' target, 'draft', 'draft extend')."""
    if fmt == "classic":
        return "Capture %scuda graph begin. This can take up to several minutes. avail mem=%.2f GB" % (
            (name + " ") if name else "", avail_gib)
    return "Capture %s CUDA graph begin. backend=full, num_tokens_per_req=%d, avail mem=%.2f GB" % (
        _current_capture_name(name, tokens_per_req), tokens_per_req, avail_gib)


def capture_end(fmt: str, name: str, tokens_per_req: int, sizes: list, elapsed: float, usage_gib: float,
                avail_gib: float) -> str:
    """Graph capture end with its memory use."""
    if fmt == "classic":
        return "Capture %scuda graph end. Time elapsed: %.2f s. mem usage=%.2f GB. avail mem=%.2f GB." % (
            (name + " ") if name else "", elapsed, usage_gib, avail_gib)
    return "Capture %s CUDA graph end. bs=%s, elapsed=%.2f s, mem usage=%.2f GB, avail mem=%.2f GB." % (
        _current_capture_name(name, tokens_per_req), sizes, elapsed, usage_gib, avail_gib)


def _current_capture_name(name: str, tokens_per_req: int) -> str:
    if not name:
        return "target verify" if tokens_per_req > 1 else "target decode"
    return "draft extend" if name == "draft extend" else "draft decode"


def scheduler_line(tokens: int, chunked: int, max_prefill: int, max_running: int, context_len: int,
                   avail_gib: float) -> str:
    """The scheduler's summary, printed by TP0 of each DP replica."""
    return ("max_total_num_tokens=%d, chunked_prefill_size=%d, max_prefill_tokens=%d, max_running_requests=%d, "
            "context_len=%d, available_gpu_mem=%.2f GB" % (tokens, chunked, max_prefill, max_running, context_len,
                                                           avail_gib))


def not_enough_memory(mem_fraction_static: float, minimum: float | None) -> str:
    """The exception line when the KV budget is <= 0: current SGLang (which passes ``minimum``, 1 - A/P) raises
    its ValueError, older releases the RuntimeError."""
    if minimum is not None:
        return ("ValueError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=%s. "
                "Raise --mem-fraction-static above %.3f (minimum viable = 1 - available/pre = %.4f). If using "
                "speculative decoding, draft weights are now counted."
                % (mem_fraction_static, math.ceil(minimum * 1000) / 1000, minimum))
    return ("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
            "Current value: self.server_args.mem_fraction_static=%s" % (mem_fraction_static,))


# -- several nodes (multinode.py) ---------------------------------------------------------------------------------

def _torch_frame(path: str, line: int, function: str, source: str) -> list:
    """Two traceback lines for a frame in torch (beside sglang in site-packages)."""
    path = os.path.join(os.path.dirname(_SGLANG_DIR), "torch", path)
    return ['  File "%s", line %d, in %s' % (path, line, function), "    " + source]


# init_torch_distributed -> init_process_group("tcp://<dist-init-addr>") -> torch's TCPStore rendezvous.
RENDEZVOUS_FRAMES = (
    frame("srt/model_executor/model_runner.py", 392, "__init__", "min_per_gpu_memory = self.init_torch_distributed()")
    + frame("srt/model_executor/model_runner.py", 812, "init_torch_distributed", "init_distributed_environment(")
    + frame("srt/distributed/parallel_state.py", 1471, "init_distributed_environment",
            "torch.distributed.init_process_group(")
    + _torch_frame("distributed/c10d_logger.py", 81, "wrapper", "return func(*args, **kwargs)")
    + _torch_frame("distributed/distributed_c10d.py", 1694, "init_process_group",
                   "store, rank, world_size = next(rendezvous_iterator)")
    + _torch_frame("distributed/rendezvous.py", 210, "_tcp_rendezvous_handler",
                   "store = _create_c10d_store(")
    + _torch_frame("distributed/rendezvous.py", 178, "_create_c10d_store", "return TCPStore("))
# A collective of the startup that a rank of another node never joins (the all-reduce of the free memory).
STARTUP_COLLECTIVE_FRAMES = (
    frame("srt/model_executor/model_runner.py", 392, "__init__", "min_per_gpu_memory = self.init_torch_distributed()")
    + frame("srt/model_executor/model_runner.py", 838, "init_torch_distributed",
            "min_per_gpu_memory = get_available_gpu_memory(")
    + frame("srt/utils/common.py", 512, "get_available_gpu_memory", "torch.distributed.all_reduce(")
    + _torch_frame("distributed/c10d_logger.py", 81, "wrapper", "return func(*args, **kwargs)")
    + _torch_frame("distributed/distributed_c10d.py", 2951, "all_reduce", "work.wait()"))
# The tensor-parallel all-reduce of a forward batch.
RUNTIME_COLLECTIVE_FRAMES = (
    RUNTIME_FRAMES
    + frame("srt/distributed/communication_op.py", 14, "tensor_model_parallel_all_reduce",
            "return get_tp_group().all_reduce(input_)")
    + frame("srt/distributed/parallel_state.py", 623, "all_reduce", "torch.distributed.all_reduce(")
    + _torch_frame("distributed/distributed_c10d.py", 2951, "all_reduce", "work.wait()"))


def rendezvous_timeout_master(seconds: float, joined: int, world: int) -> str:
    """TP0 of node 0: torch's TCPStore master gave up waiting for the other nodes' ranks."""
    return ("torch.distributed.DistStoreError: Timed out after %d seconds waiting for clients. %d/%d clients joined."
            % (int(seconds) + 1, joined, world))


def rendezvous_timeout_client(seconds: float, host: str, port: int) -> str:
    """A rank of another node: torch's TCPStore client could not reach node 0."""
    return ("torch.distributed.DistNetworkError: The client socket has timed out after %dms while trying to connect "
            "to (%s, %d)." % (int(seconds * 1000), host, port))


def rendezvous_listen_failed(port: int, errno: int, strerror: str) -> str:
    """TP0 of node 0: the store's port is taken."""
    names = {98: ("EADDRINUSE", -98), 99: ("EADDRNOTAVAIL", -99), 13: ("EACCES", -13)}
    name, code = names.get(errno, ("UNKNOWN", -errno))
    return ("torch.distributed.DistNetworkError: The server socket has failed to listen on any local network "
            "address. port: %d, useIpv6: false, code: %d, name: %s, message: %s" % (port, code, name, strerror))


def rendezvous_closed() -> str:
    """A rank of another node: node 0's store went away while it waited."""
    return ("torch.distributed.DistNetworkError: Failed to recv, got 0 bytes. Connection was likely closed. "
            "Did the remote server shutdown or crash?")


def nccl_remote_error(nccl_version: str, peer: str) -> str:
    """A collective after a rank of another node exited (its socket closed): NCCL's remote error."""
    return ("torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:77, "
            "remote process exited or there was a network error, NCCL version %s\n"
            "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.\n"
            "Last error:\nsocketProgress: Connection closed by remote peer %s" % (nccl_version, peer))


def nccl_watchdog_timeout(rank: int, seq: int, timeout_s: float) -> str:
    """A collective another node never joined (it hangs): NCCL's watchdog timeout."""
    ms = int(timeout_s * 1000)
    return ("torch.distributed.DistBackendError: [Rank %d] Watchdog caught collective operation timeout: "
            "WorkNCCL(SeqNum=%d, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=%d) ran for %d milliseconds "
            "before timing out." % (rank, seq, ms, ms + 12))

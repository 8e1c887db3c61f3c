# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""``python -m sglang.launch_server`` on simulated GPUs: startup as SGLang logs it, then the HTTP server.

The process lives as SGLang's does: it parses the flags (argparse errors exit 2), logs ``server_args=...``, walks
the startup of every rank (memory.py decides what fits) printing SGLang's lines with the time each phase takes on
this host, dies the way SGLang dies when something does not fit (a traceback per failing rank, ``Received sigquit
from a child process``, killed by SIGKILL), and otherwise listens on --host/--port, runs the warmup request and
prints ``The server is fired up and ready to roll!``. A runtime OOM or an injected crash ends it the same way.
SIGTERM/SIGINT while serving end it cleanly (uvicorn's shutdown, exit 0); before that the signal ends it. The GPUs'
live memory goes to the state file that nvidia-smi reads, which is removed on every exit.
The SGLang version it runs (KV arithmetic era, error types, /get_server_info's version) is the installed ``sglang``
distribution's, else host.json's (hostspec.sglang_version).
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time

from sglang_sim import args as server_args
from sglang_sim import gpu_state, hostspec, http_api, logs, memory
from sglang_sim.hostspec import GIB, SimConfigError
from sglang_sim.model import load_model

NCCL_VERSION = "2.27.5"


def _gib(value: int) -> float:
    return value / GIB


class Process:
    """What the simulated SGLang process holds: plan, log, state file, schedulers, lifecycle."""

    def __init__(self, host, model, draft, args, log):
        self.host = host
        self.model = model
        self.draft = draft
        self.args = args
        self.faults = host.server_faults(args.mem_fraction_static)
        self.log = log
        self.plan = memory.plan(host, model, draft, args)
        self.status = "Starting"
        self.schedulers = []
        self.dying = threading.Lock()
        names = {rank.gpu: "sglang::scheduler" + (("_" + rank.tag.replace(" ", "_")) if rank.tag else "")
                 for rank in self.plan.ranks}
        self.state = gpu_state.StateWriter(hostspec.state_dir(), names)
        self.used = {}                   # gpu -> bytes held by the server

    # -- memory ----------------------------------------------------------------------------------------------

    def publish(self, through=None):
        """Send the ranks' memory up to startup step ``through`` (all of it: None), plus the schedulers' cached
        activations, to the state file."""
        for rank in self.plan.ranks:
            used = 0
            for name, size, _before, _after in rank.steps:
                used += size
                if name == through:
                    break
            self.used[rank.gpu] = used
        extra = {}
        for scheduler in self.schedulers:
            for rank in scheduler.ranks:
                extra[rank.gpu] = max(extra.get(rank.gpu, 0), scheduler.activations)
        self.state.set({gpu: used + extra.get(gpu, 0) for gpu, used in self.used.items()})

    def memory_changed(self):
        """Scheduler hook: activations grew."""
        self.publish()

    def request_done(self, _scheduler):
        """Scheduler hook: a user request finished; the crash_after_requests fault counts them."""
        limit = self.faults.get("crash_after_requests")
        if limit is not None and sum(s.completed for s in self.schedulers) >= int(limit):
            tag = self.plan.ranks[0].tag
            self.log.traceback(tag, logs.RUNTIME_FRAMES, (
                "RuntimeError: CUDA error: an illegal memory access was encountered\n"
                "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace "
                "below might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
                "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n"))
            self.fatal()

    def fatal(self):
        """A scheduler died: SGLang's parent logs the SIGQUIT and kills its process tree (itself with SIGKILL)."""
        with self.dying:
            self.log.record("", "Received sigquit from a child process. It usually means the child failed.")
            self.state.clear()
            os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(60)

    def interrupted(self, signum, _frame):
        """SIGTERM/SIGINT before the HTTP server runs: the process ends by the signal (state file removed)."""
        self.state.clear()
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    def shutdown(self, *_ignored):
        """SIGTERM/SIGINT while serving: uvicorn's graceful shutdown, then exit 0."""
        with self.dying:
            self.status = "Stopping"
            for line in ("Shutting down", "Waiting for application shutdown.", "Application shutdown complete.",
                         "Finished server process [%d]" % os.getpid()):
                self.log.record("", "INFO:     " + line)
            self.state.clear()
            os._exit(0)  # pylint: disable=protected-access

    # -- startup ---------------------------------------------------------------------------------------------

    def sleep(self, realistic: float, fast: float):
        """Let a startup phase take its time on this host's scale."""
        time.sleep(self.host.seconds(realistic, fast))

    def each(self, message_of, ranks=None):
        """One record per rank (every TP rank prints its own copy of most startup lines)."""
        for rank in ranks or self.plan.ranks:
            for message in message_of(rank):
                self.log.record(rank.tag, message)

    def step(self, rank, name):
        """(size, free before, free after) of a rank's startup step, or None if it did not get there."""
        for step_name, size, before, after in rank.steps:
            if step_name == name:
                return size, before, after
        return None

    def fail(self, failure):
        """Print what SGLang prints for a startup failure and die."""
        plan, fmt = self.plan, self.log.format
        rank = plan.ranks[failure.rank]
        detail = failure.detail
        if failure.kind == "init_oom":
            minimum = detail.get("minimum")
            for replica in plan.replicas:
                if rank in replica.ranks:
                    frames = logs.STEP_FRAMES["profile" if minimum is None else "profile_current"]
                    for each in replica.ranks:
                        self.log.traceback(each.tag, logs.SCHEDULER_INIT + frames,
                                           logs.not_enough_memory(self.args.mem_fraction_static, minimum))
        elif failure.kind == "unbalanced":
            error = "RuntimeError" if memory.version_tuple(self.host.sglang_version) >= (0, 5, 7) else "ValueError"
            for replica in plan.replicas:
                for each in replica.ranks:
                    free = self.step(each, "init")
                    local = free[2] if free else each.free
                    if replica.p is not None and replica.p < local * 0.9:
                        self.log.traceback(each.tag, logs.SCHEDULER_INIT + logs.STEP_FRAMES["init"], (
                            "%s: The memory capacity is unbalanced. Some GPUs may be occupied by other processes. "
                            "min_per_gpu_memory=%r, local_gpu_memory=%r, local_gpu_memory * 0.9=%r"
                            % (error, _gib(replica.p), _gib(local), _gib(local) * 0.9)))
        elif failure.kind == "capture_oom":
            message = logs.cuda_oom_message(rank.gpu, detail["tried"], detail["capacity"], detail["free"],
                                            detail["used"])
            frames = logs.STEP_FRAMES["draft_graph" if failure.stage == "draft_graph" else "graph"]
            init = logs.DRAFT_INIT if failure.stage == "draft_graph" else logs.SCHEDULER_INIT
            self.log.traceback(rank.tag, init + frames, "Exception: Capture cuda graph failed: %s\n%s"
                               % (message, logs.CUDA_GRAPH_CAPTURE_FAILED_MSG[fmt]))
        elif failure.kind == "oom":
            message = logs.cuda_oom_message(rank.gpu, detail["tried"], detail["capacity"], detail["free"],
                                            detail["used"])
            stage = failure.stage.replace("draft_", "")
            init = logs.DRAFT_INIT if failure.stage.startswith("draft_") else logs.SCHEDULER_INIT
            self.log.traceback(rank.tag, init + logs.STEP_FRAMES.get(stage, logs.STEP_FRAMES["weights"]),
                               "torch.OutOfMemoryError: " + message)
        elif failure.kind == "pool_too_small":
            self.log.traceback(rank.tag, logs.SCHEDULER_INIT, "AssertionError: Memory pool size is too small")
        else:
            self.log.traceback(rank.tag, logs.SCHEDULER_INIT[:2],
                               "RuntimeError: CUDA error: invalid device ordinal\nCUDA kernel errors might be "
                               "asynchronously reported at some other API call, so the stacktrace below might be "
                               "incorrect.")
        self.fatal()

    def startup(self):
        """Walk the startup phases, logging and publishing memory, and stop where the plan fails."""
        plan, fmt, host, args = self.plan, self.log.format, self.host, self.args
        failure = plan.failure
        model = self.model
        started = time.time()
        self.publish("context")
        self.each(lambda rank: [logs.init_begin(fmt)])
        if len(plan.ranks) > 1:
            self.log.record(plan.ranks[0].tag, "sglang is using nccl==%s" % NCCL_VERSION)
        self.sleep(2.0 + 1.5 * len(plan.ranks), 0.05)
        self.publish("init")
        if failure is not None and failure.stage in ("init", "context"):
            self.fail(failure)
        self.each(lambda rank: logs.init_end(fmt, time.time() - started, _gib(self.step(rank, "init")[0])))
        self.each(lambda rank: [logs.load_begin(_gib(self.step(rank, "init")[2]))])
        if self.faults.get("hang_at_startup"):
            while True:
                time.sleep(3600)
        if self.faults.get("crash_at_startup"):
            self.log.traceback(plan.ranks[0].tag, logs.SCHEDULER_INIT + logs.STEP_FRAMES["weights"],
                               "RuntimeError: CUDA error: an illegal memory access was encountered")
            self.fatal()
        load_started = time.time()
        self.sleep(model.total_size / (host.weight_load_gb_per_s * 1e9), 0.3)
        time.sleep(float(self.faults.get("slow_start_s") or 0))
        if failure is not None and failure.stage == "weights":
            self.fail(failure)
        dtype = "torch." + model.dtype
        self.publish("weights")
        self.each(lambda rank: [logs.load_end(fmt, time.time() - load_started, model.architecture, dtype,
                                              model.quant_log_str(), _gib(self.step(rank, "weights")[2]),
                                              _gib(self.step(rank, "weights")[0]))])
        if self.draft is not None and plan.era == memory.ERA_CURRENT:
            self.load_draft(failure)
        if failure is not None and failure.stage == "profile":
            self.fail(failure)
        self.memory_pool(failure)
        self.capture(failure, "graph", "", plan.tokens_per_request())
        if self.draft is not None and plan.era != memory.ERA_CURRENT:
            self.each(lambda rank: [logs.init_begin(fmt)])
            self.each(lambda rank: logs.init_end(fmt, 0.01, 0.0))
            self.load_draft(failure)
            self.draft_pool(failure)
        if self.draft is not None:
            self.capture(failure, "draft_graph", "draft", 1)
        self.publish()
        for replica in plan.replicas:
            # Printed by TP rank 0 of each replica (with DP attention the DP ranks share one TP group: once).
            for dp_rank in replica.schedulers[:1] if args.enable_dp_attention else replica.schedulers:
                head = next(rank for rank in replica.ranks if rank.dp_rank == dp_rank)
                self.log.record(head.tag, logs.scheduler_line(
                    replica.tokens, args.chunked_prefill_size, args.max_prefill_tokens,
                    replica.max_running_requests, args.context_len, _gib(head.free)))

    def load_draft(self, failure):
        """The EAGLE draft's weights (after the target's graphs, or before the KV pool in current SGLang)."""
        fmt = self.log.format
        self.each(lambda rank: [logs.load_begin(_gib((self.step(rank, "draft_weights") or (0, rank.free))[1]))])
        self.sleep(self.draft.total_size / (self.host.weight_load_gb_per_s * 1e9) + 5.0, 0.05)
        if failure is not None and failure.stage == "draft_weights":
            self.fail(failure)
        self.publish("draft_weights")
        self.each(lambda rank: [logs.load_end(fmt, 0.5, self.draft.architecture, "torch." + self.draft.dtype,
                                              self.draft.quant_log_str(), _gib(self.step(rank, "draft_weights")[2]),
                                              _gib(self.step(rank, "draft_weights")[0]))])

    def memory_pool(self, failure):
        """req_to_token, the KV pool and its log lines, the workspaces."""
        plan, fmt = self.plan, self.log.format
        if fmt == "classic":
            self.log.record(plan.ranks[0].tag, "Using KV cache dtype: %s" % plan.kv_dtype_name)
        for replica in plan.replicas:
            for warned, text in plan.warnings:
                if warned is replica:
                    self.each(lambda rank, text=text: [text], replica.ranks)
        self.sleep(1.0, 0.02)
        if failure is not None and failure.stage in ("req_to_token", "kv"):
            self.fail(failure)
        self.publish("workspace")
        for replica in plan.replicas:
            rows = replica.tokens + self.args.page_size
            if self.model.attention == "mla":
                sizes = (rows * plan.cell,)
            else:
                half = rows * plan.cell // 2
                sizes = (half, rows * plan.cell - half)
            self.each(lambda rank, sizes=sizes, replica=replica: [
                logs.kv_line(fmt, plan.kv_dtype_name, replica.tokens, sizes),
                logs.pool_end(_gib(self.step(rank, "kv")[2]))], replica.ranks)
        if failure is not None and failure.stage == "workspace":
            self.fail(failure)

    def draft_pool(self, failure):
        """The classic/mixin draft's own KV pool."""
        plan, fmt = self.plan, self.log.format
        self.sleep(0.5, 0.01)
        if failure is not None and failure.stage == "draft_kv":
            self.fail(failure)
        self.publish("draft_kv")
        for replica in plan.replicas:
            rows = replica.tokens + self.args.page_size
            half = rows * plan.draft_cell // 2
            sizes = (half, rows * plan.draft_cell - half)
            self.each(lambda rank, sizes=sizes, replica=replica: [
                logs.kv_line(fmt, plan.kv_dtype_name, replica.tokens, sizes),
                logs.pool_end(_gib(self.step(rank, "draft_kv")[2]))], replica.ranks)

    def capture(self, failure, step, name, tokens_per_req):
        """CUDA-graph capture of the target (or the draft: decode and extend graphs) on every rank."""
        plan, fmt = self.plan, self.log.format
        if self.args.disable_cuda_graph:
            return
        names = [name] if step == "graph" else ["draft", "draft extend"]
        for number, role in enumerate(names):
            def begin(rank, role=role, number=number):
                size, before = (self.step(rank, step) or (0, rank.free))[:2]
                return [logs.capture_begin(fmt, role, tokens_per_req, _gib(before - (int(size * 0.6) if number else 0)))]
            self.each(begin)
            sizes = plan.replicas[0].captured_bs
            if step == "graph" and number == 0 and fmt == "classic":
                self.log.record(plan.ranks[0].tag, "Capture cuda graph bs %s" % sizes)
            seconds = self.host.seconds(0.5 * len(sizes), 0.05)
            time.sleep(seconds)
            if failure is not None and failure.stage == step:
                self.fail(failure)
            self.publish(step)
            share = 0.6 if number == 0 else 0.4

            def end(rank, role=role, number=number, share=share, seconds=seconds, sizes=sizes):
                size, before, after = self.step(rank, step)
                used = size if len(names) == 1 else int(size * share)
                avail = before - used if number == 0 and len(names) > 1 else after
                return [logs.capture_end(fmt, role, tokens_per_req, sizes, seconds, _gib(used), _gib(avail))]
            self.each(end)


def build(argv):
    """Parse argv and read host and models: (host, model, draft, resolved args)."""
    args = server_args.parse(argv)
    host = hostspec.load_host()
    model = load_model(args.model_path)
    server_args.resolve(args, host, model, memory.era(host.sglang_version) == memory.ERA_CURRENT)
    draft = None
    if args.speculative_algorithm in memory.SPEC_WITH_DRAFT and args.speculative_draft_model_path:
        draft = load_model(args.speculative_draft_model_path)
    return host, model, draft, args


def _rewrite_argv0(host, argv):
    """The ``argv0`` fault: the server shows another program as its argv[0] in /proc/<pid>/cmdline, as a process
    that calls setproctitle (or model code run with trust_remote_code) can. Done by running the same interpreter
    again with that argv[0]; the process is the same program, only what it claims to be changes."""
    wanted = (host.faults or {}).get("argv0")
    if wanted and sys.argv and sys.argv[0] != wanted and os.environ.get("SGLANG_SIM_ARGV0") != wanted:
        os.environ["SGLANG_SIM_ARGV0"] = wanted
        # Python finds its virtualenv from argv[0]: hand the current import path on explicitly.
        os.environ["PYTHONPATH"] = os.pathsep.join(path for path in sys.path if path)
        os.execv(sys.executable, [wanted, "-m", "sglang.launch_server"] + list(argv))


def main(argv=None) -> int:
    """The launch_server entry point."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        host, model, draft, args = build(argv)
        _rewrite_argv0(host, argv)
    except SimConfigError as exc:
        sys.stderr.write("Traceback (most recent call last):\n  File \"<sglang-sim>\", line 1, in <module>\n"
                         "OSError: %s\n" % exc)
        return 1
    log = logs.Log(host.log_format)
    log.record("", "server_args=" + server_args.server_args_repr(args))
    # Another live server on a GPU (several servers on one host) holds memory as any other process does.
    for index, entries in gpu_state.read_state(hostspec.state_dir(), os.getpid()).items():
        taken = sum(entry.get("used_bytes", 0) for entry in entries) // hostspec.MIB
        host.occupied_mib[index] = host.occupied_mib.get(index, 0) + taken
    process = Process(host, model, draft, args, log)
    signal.signal(signal.SIGTERM, process.interrupted)
    signal.signal(signal.SIGINT, process.interrupted)
    process.startup()
    http_api.serve(process)
    return 0

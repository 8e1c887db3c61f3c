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
With ``--nnodes N`` it is one node of a server over N hosts (multinode.py): it walks and logs only its own ranks,
meets the others at --dist-init-addr and waits for them where SGLang's ranks run a collective, and dies when one of
them dies; a node of --node-rank > 0 serves only SGLang's dummy health check.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time

from sglang_sim import args as server_args
from sglang_sim import gpu_state, hostspec, http_api, logs, memory, multinode
from sglang_sim.hostspec import GIB, SimConfigError
from sglang_sim.model import load_model

NCCL_VERSION = "2.27.5"


def _gib(value: int) -> float:
    return value / GIB


class Process:
    """What the simulated SGLang process holds: plan, log, state file, schedulers, lifecycle."""

    def __init__(self, host, model, draft, args, log, others_at_start=None):
        self.host = host
        self.model = model
        self.draft = draft
        self.args = args
        self.faults = host.server_faults(args.mem_fraction_static)
        self.log = log
        # Several nodes: until the rendezvous tells the others' hosts, every node is taken to be this one (only this
        # node's ranks and their CUDA context count before that); the plan is made again with the real hosts.
        self.link = multinode.Link(args, host) if multinode.enabled(args) else None
        self.plan = memory.plan(host, model, draft, args, [host] * args.nnodes if self.link else None,
                                contention=True)
        self.status = "Starting"
        self.schedulers = []
        self.contended_after_load = False   # faults.load_contention_from "idle" took its memory (info_asked)
        self.dying = threading.Lock()
        self.ending = threading.Lock()   # several nodes: one thread reports the end (a lost peer, an OOM)
        names = {rank.gpu: "sglang::scheduler" + (("_" + rank.tag.replace(" ", "_")) if rank.tag else "")
                 for rank in self.plan.local_ranks}
        self.state = gpu_state.StateWriter(hostspec.state_dir(), names)
        self.used = {}                   # gpu -> bytes held by the server
        # Other servers on this host's GPUs when this one started: what they take more later (their own load on a
        # shared GPU) is gone from this one's headroom, as on a real GPU.
        self.others_at_start = dict(others_at_start or {})
        self.remote_activations = 0      # node R > 0: the activations of node 0's batches, held here too
        self.collectives = 0             # startup barriers passed (the NCCL sequence number of a timeout)

    # -- memory ----------------------------------------------------------------------------------------------

    def publish(self, through=None, now=False):
        """Send the ranks' memory up to startup step ``through`` (all of it: None), plus the schedulers' cached
        activations, to the state file (written at once with ``now``, else within 0.1 s)."""
        for rank in self.plan.local_ranks:
            used = 0
            for name, size, _before, _after in rank.steps:
                if name not in memory.NEIGHBOUR_STEPS:     # another process's (faults.load_contention_mib)
                    used += size
                if name == through:
                    break
            self.used[rank.gpu] = used
        extra = {}
        for scheduler in self.schedulers:
            for rank in scheduler.ranks:
                extra[rank.gpu] = max(extra.get(rank.gpu, 0), scheduler.activations)
        if self.remote_activations:
            for rank in self.plan.local_ranks:
                extra[rank.gpu] = max(extra.get(rank.gpu, 0), self.remote_activations)
        self.state.set({gpu: used + extra.get(gpu, 0) for gpu, used in self.used.items()})
        if now:
            self.state.flush()

    def neighbours(self, held: bool):
        """faults.load_contention_mib: the other process takes its memory on this node's GPUs (``held``) as the
        weights start to load, or gives it back once the pools are sized; nvidia-smi shows it meanwhile."""
        taken = {}
        if held:
            for rank in self.plan.local_ranks:
                step = self.step(rank, memory.NEIGHBOUR_STEP)
                if step is not None:
                    taken[rank.gpu] = step[0]
        self.state.set_neighbours(taken, self.host.contention_unlisted)

    def info_asked(self):
        """HTTP hook: /get_server_info was asked for. faults.load_contention_from "idle": the first time it is once a
        load has reserved half the pool or more and every scheduler is idle (kv_stress asks it as its load ends), the
        other process takes its memory on this node's GPUs hostspec.CONTENTION_AFTER_INFO_S later and keeps it until
        the server exits: after what watched the load, before what looks at the GPUs next."""
        if self.host.contention_from != "idle" or self.contended_after_load:
            return
        taken = {rank.gpu: self.host.load_contention(self.args.mem_fraction_static).get(rank.gpu, 0) * hostspec.MIB
                 for rank in self.plan.local_ranks}
        loads = [scheduler.load() for scheduler in self.schedulers]
        if not any(taken.values()) or any(load["num_reqs"] or load["num_waiting_reqs"] for load in loads) \
                or not any(scheduler.peak_reserved >= 0.5 * scheduler.pool for scheduler in self.schedulers):
            return
        self.contended_after_load = True

        def take():
            self.state.set_neighbours(taken, self.host.contention_unlisted)
            self.state.flush()

        timer = threading.Timer(hostspec.CONTENTION_AFTER_INFO_S, take)
        timer.daemon = True
        timer.start()

    @staticmethod
    def allocation():
        """Scheduler hook: the host's allocation lock (gpu_state.allocation), held from a growth's check to its write."""
        return gpu_state.allocation(hostspec.state_dir())

    def others_growth(self, gpu: int) -> int:
        """Bytes the other servers on GPU ``gpu`` hold now beyond what they held when this one started."""
        return max(0, others_used().get(gpu, 0) - self.others_at_start.get(gpu, 0))

    def memory_changed(self):
        """Scheduler hook: activations grew (the scheduler has published them, under the allocation lock). Several
        nodes: every rank of the TP group runs the batch, so node 0 hands the size on and waits until every node holds
        it (a node that cannot dies: its OOM, then ours)."""
        if self.link is not None and self.link.head:
            try:
                self.link.share_activations(max(scheduler.activations for scheduler in self.schedulers))
            except multinode.PeerLost as lost:
                self.peer_lost(lost, runtime=True)

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
            if not self.plan.is_local(rank):
                continue
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
        if self.link is not None:
            self.fail_node(failure)
        self.report(failure)
        self.fatal()

    def report(self, failure):
        """The traceback(s) of a startup failure (this node's ranks)."""
        plan, fmt = self.plan, self.log.format
        rank = plan.ranks[failure.rank]
        detail = failure.detail
        if failure.kind == "init_oom":
            minimum = detail.get("minimum")
            error = detail.get("error")
            for replica in plan.replicas:
                if rank in replica.ranks:
                    if error is not None:
                        # A hybrid model's Mamba pool: no slot, or no request slot (0.5.13+'s RuntimeErrors).
                        frames = logs.STEP_FRAMES["profile_mamba" if "Computed max_mamba_cache_size" in error
                                                  else "profile_mamba_requests"]
                    else:
                        frames = logs.STEP_FRAMES["profile" if minimum is None else "profile_current"]
                    for each in replica.ranks:
                        if not plan.is_local(each):
                            continue
                        self.log.traceback(each.tag, logs.SCHEDULER_INIT + frames,
                                           error or logs.not_enough_memory(self.args.mem_fraction_static, minimum))
        elif failure.kind == "unbalanced":
            error = "RuntimeError" if memory.version_tuple(self.host.sglang_version) >= (0, 5, 7) else "ValueError"
            for replica in plan.replicas:
                for each in replica.ranks:
                    if not plan.is_local(each):
                        continue
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

    def check(self, failure, *stages):
        """A point where SGLang's ranks meet (a collective): several nodes wait for each other here; then the
        startup stops if the plan fails at one of ``stages``."""
        if self.link is not None:
            self.sync(stages[0])
        if failure is not None and failure.stage in stages:
            self.fail(failure)

    # -- several nodes ---------------------------------------------------------------------------------------

    def sync(self, name):
        """A startup barrier with the other nodes; a node that died or hangs ends this one."""
        try:
            self.link.barrier(name)
            self.collectives += 1
        except multinode.PeerLost as lost:
            self.peer_lost(lost, runtime=False)

    def rendezvous(self):
        """Meet the other nodes at --dist-init-addr, then plan the whole server with every node's host."""
        try:
            wires = self.link.rendezvous(multinode.wire_host(self.host))
            hosts = [self.host if node == self.link.node_rank else multinode.host_from_wire(wire)
                     for node, wire in enumerate(wires)]
        except multinode.RendezvousError as exc:
            self.rendezvous_failed(exc)
        except (SimConfigError, KeyError, TypeError) as exc:
            self.rendezvous_failed(multinode.RendezvousError("rejected", {"error": "bad host from a node: %s" % exc}))
        self.plan = memory.plan(self.host, self.model, self.draft, self.args, hosts, contention=True)

    def rendezvous_failed(self, exc):
        """What torch raises in init_process_group when the nodes do not meet; then SGLang's death."""
        link, plan = self.link, self.plan
        frames = logs.SCHEDULER_INIT[:-2] + logs.RENDEZVOUS_FRAMES
        head = plan.local_ranks[0]
        if exc.kind == "timeout" and link.head:
            per_node = len(plan.local_ranks)
            self.log.traceback(head.tag, frames, logs.rendezvous_timeout_master(
                link.rendezvous_timeout, exc.detail["joined"] * per_node, len(plan.ranks)))
        elif exc.kind == "timeout":
            for rank in plan.local_ranks:
                self.log.traceback(rank.tag, frames, logs.rendezvous_timeout_client(
                    link.rendezvous_timeout, link.address[0], link.address[1]))
        elif exc.kind == "listen":
            self.log.traceback(head.tag, frames, logs.rendezvous_listen_failed(
                exc.detail["port"], exc.detail["errno"], exc.detail["strerror"]))
        elif exc.kind == "closed":
            for rank in plan.local_ranks:
                self.log.traceback(rank.tag, frames, logs.rendezvous_closed())
        else:
            self.log.traceback(head.tag, frames, "RuntimeError: " + exc.detail["error"])
        self.fatal()

    def fail_node(self, failure):
        """Several nodes: a node prints and dies for its own failing ranks; a node without any waits for the
        others to die (their connection closes) and ends with NCCL's error, as its ranks' next collective does."""
        plan = self.plan
        mine = [number for number in failure.ranks if plan.is_local(plan.ranks[number])]
        if not mine:
            peer = self.link.wait_lost()
            if peer is None:
                first = sorted(self.link.conns.values(), key=lambda conn: conn.node)[0]
                self.peer_lost(multinode.PeerLost(first.peer, self.link.barrier_timeout), runtime=False)
            self.peer_lost(multinode.PeerLost(peer), runtime=False)
        if failure.kind not in ("oom", "capture_oom"):
            self.report(memory.StartupFailure(failure.kind, failure.stage, mine[0], failure.detail, failure.ranks))
            self.fatal()
        for number in mine:
            rank = plan.ranks[number]
            detail = (failure.detail if number == failure.rank
                      else dict(failure.detail, free=rank.free, used=rank.used))
            self.report(memory.StartupFailure(failure.kind, failure.stage, number, detail))
        self.fatal()

    def peer_lost(self, lost, runtime: bool):
        """Another node died (its connection closed) or never answered: every local rank's collective fails
        with NCCL's error; SGLang then dies as for any scheduler exception."""
        if not self.ending.acquire(blocking=False):
            time.sleep(60)       # another thread reports the end and kills the process
        frames = (logs.RUNTIME_COLLECTIVE_FRAMES if runtime
                  else logs.SCHEDULER_INIT[:-2] + logs.STARTUP_COLLECTIVE_FRAMES)
        for rank in self.plan.local_ranks:
            if lost.timeout is not None:
                message = logs.nccl_watchdog_timeout(rank.number, self.collectives + 1, lost.timeout)
            else:
                message = logs.nccl_remote_error(NCCL_VERSION, lost.peer)
            self.log.traceback(rank.tag, frames, message)
        self.fatal()

    def remote_batch(self, size: int) -> bool:
        """Node R > 0: node 0's batch needs ``size`` bytes of activations on every rank; ours too. A rank without
        the room dies with torch's OOM (and so the server: node 0 sees the connection close)."""
        if size <= self.remote_activations:
            return True
        failing = [rank for rank in self.plan.local_ranks if size > rank.free]
        if failing:
            if not self.ending.acquire(blocking=False):
                time.sleep(60)
            replica = self.plan.replicas[0]
            for rank in failing:
                message = logs.cuda_oom_message(
                    rank.gpu, size - self.remote_activations, self.plan.capacity, rank.free - self.remote_activations,
                    rank.used + self.remote_activations, graphs=self.plan.graph_bytes(replica))
                self.log.traceback(rank.tag, logs.RUNTIME_FRAMES, "torch.OutOfMemoryError: " + message)
            self.fatal()
        self.remote_activations = size
        self.publish()
        return True

    def serve_links(self):
        """Startup is over: a node that dies from now on ends this one at once."""
        if self.link is not None:
            self.link.serve(lambda peer: self.peer_lost(multinode.PeerLost(peer), runtime=True),
                            None if self.link.head else self.remote_batch)

    def stop_node(self, *_ignored):
        """SIGTERM/SIGINT of a node R > 0 while serving: its dummy health server (uvicorn at log level warning)
        stops without a line and the process exits 0; node 0 then loses this node."""
        with self.dying:
            self.state.clear()
            os._exit(0)  # pylint: disable=protected-access

    def startup(self):
        """Walk the startup phases, logging and publishing memory, and stop where the plan fails."""
        plan, fmt, host, args = self.plan, self.log.format, self.host, self.args
        failure = plan.failure
        model = self.model
        started = time.time()
        self.publish("context")
        if plan.hybrid and plan.release < (0, 5, 4):
            self.each(lambda rank: [logs.HYBRID_RADIX_OFF_LINE])
        self.each(lambda rank: [logs.init_begin(fmt)])
        if self.link is not None:
            self.rendezvous()
            plan = self.plan
            failure = plan.failure
        if len(plan.ranks) > 1 and plan.is_local(plan.ranks[0]):
            self.log.record(plan.ranks[0].tag, "sglang is using nccl==%s" % NCCL_VERSION)
        if self.link is not None:
            self.each(lambda rank: ["Custom allreduce is disabled because this process group spans across nodes."])
        self.sleep(2.0 + 1.5 * len(plan.ranks), 0.05)
        self.publish("init")
        self.check(failure, "init", "context")
        self.each(lambda rank: logs.init_end(fmt, time.time() - started, _gib(self.step(rank, "init")[0])))
        self.each(lambda rank: [logs.load_begin(_gib(self.step(rank, "init")[2]))])
        if self.faults.get("hang_at_startup"):
            while True:
                time.sleep(3600)
        if self.faults.get("crash_at_startup"):
            self.log.traceback(plan.local_ranks[0].tag, logs.SCHEDULER_INIT + logs.STEP_FRAMES["weights"],
                               "RuntimeError: CUDA error: an illegal memory access was encountered")
            self.fatal()
        load_started = time.time()
        if host.contention_from == "load":
            self.neighbours(True)
        self.sleep(model.total_size / (host.weight_load_gb_per_s * 1e9), 0.3)
        time.sleep(float(self.faults.get("slow_start_s") or 0))
        self.check(failure, "weights")
        dtype = "torch." + model.dtype
        self.publish("weights")
        # SGLang's mem usage is free before the load minus free after it: a neighbour's memory counts too.
        self.each(lambda rank: [logs.load_end(fmt, time.time() - load_started, model.architecture, dtype,
                                              model.quant_log_str(), _gib(self.step(rank, "weights")[2]),
                                              _gib(self.step(rank, "init")[2] - self.step(rank, "weights")[2]))])
        if self.draft is not None and plan.era == memory.ERA_CURRENT:
            self.load_draft(failure)
        if host.contention_from == "pool":
            self.neighbours(True)
        self.check(failure, "profile")
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
        if self.link is not None:
            self.sync("ready")
        for replica in plan.replicas:
            # Printed by TP rank 0 of each replica (with DP attention the DP ranks share one TP group: once).
            for dp_rank in replica.schedulers[:1] if args.enable_dp_attention else replica.schedulers:
                head = next(rank for rank in replica.ranks if rank.dp_rank == dp_rank)
                if not plan.is_local(head):
                    continue
                self.log.record(head.tag, logs.scheduler_line(
                    replica.tokens, args.chunked_prefill_size, args.max_prefill_tokens,
                    replica.max_running_requests, args.context_len, _gib(head.free)))

    def load_draft(self, failure):
        """The EAGLE draft's weights (after the target's graphs, or before the KV pool in current SGLang)."""
        fmt = self.log.format
        self.each(lambda rank: [logs.load_begin(_gib((self.step(rank, "draft_weights") or (0, rank.free))[1]))])
        self.sleep(self.draft.total_size / (self.host.weight_load_gb_per_s * 1e9) + 5.0, 0.05)
        self.check(failure, "draft_weights")
        self.publish("draft_weights")
        self.each(lambda rank: [logs.load_end(fmt, 0.5, self.draft.architecture, "torch." + self.draft.dtype,
                                              self.draft.quant_log_str(), _gib(self.step(rank, "draft_weights")[2]),
                                              _gib(self.step(rank, "draft_weights")[0]))])

    def memory_pool(self, failure):
        """req_to_token, the KV pool and its log lines, the workspaces."""
        plan, fmt = self.plan, self.log.format
        if fmt == "classic" and plan.is_local(plan.ranks[0]):
            self.log.record(plan.ranks[0].tag, "Using KV cache dtype: %s" % plan.kv_dtype_name)
        for replica in plan.replicas:
            for warned, text in plan.warnings:
                if warned is replica:
                    self.each(lambda rank, text=text: [text], replica.ranks)
        self.sleep(1.0, 0.02)
        self.check(failure, "req_to_token", "mamba", "kv")
        self.publish("workspace")
        if plan.hybrid:
            # HybridReqToTokenPool's MambaPool, on every rank, before the KV pool.
            for replica in plan.replicas:
                conv, ssm = plan.mamba_pool_sizes(replica)
                self.each(lambda rank, replica=replica, conv=conv, ssm=ssm: [
                    logs.mamba_line(plan.release, replica.mamba_slots, conv, ssm)], replica.ranks)
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
        self.neighbours(False)
        self.check(failure, "workspace")
        if plan.hybrid and plan.release >= (0, 5, 3):
            self.each(lambda rank: [logs.HYBRID_BACKEND_LINE])

    def draft_pool(self, failure):
        """The classic/mixin draft's own KV pool."""
        plan, fmt = self.plan, self.log.format
        self.sleep(0.5, 0.01)
        self.check(failure, "draft_kv")
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
            if step == "graph" and number == 0 and fmt == "classic" and plan.is_local(plan.ranks[0]):
                self.log.record(plan.ranks[0].tag, "Capture cuda graph bs %s" % sizes)
            seconds = self.host.seconds(0.5 * len(sizes), 0.05)
            time.sleep(seconds)
            self.check(failure, step)
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
    multinode.check(args)
    host = hostspec.load_host()
    model = load_model(args.model_path)
    server_args.resolve(args, host, model, memory.era(host.sglang_version) == memory.ERA_CURRENT)
    draft = None
    if args.speculative_algorithm in memory.SPEC_WITH_DRAFT and args.speculative_draft_model_path:
        draft = load_model(args.speculative_draft_model_path)
    memory.check_supported(host, model, draft, args)
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


def others_used() -> dict:
    """GPU index -> bytes the other live servers of this host hold on it now."""
    return {index: sum(entry.get("used_bytes", 0) for entry in entries)
            for index, entries in gpu_state.read_state(hostspec.state_dir(), os.getpid()).items()}


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
    others = others_used()
    for index, taken in others.items():
        host.occupied_mib[index] = host.occupied_mib.get(index, 0) + taken // hostspec.MIB
    process = Process(host, model, draft, args, log, others_at_start=others)
    signal.signal(signal.SIGTERM, process.interrupted)
    signal.signal(signal.SIGINT, process.interrupted)
    process.startup()
    process.serve_links()
    if process.link is not None and not process.link.head:
        http_api.serve_node(process)
    else:
        http_api.serve(process)
    return 0

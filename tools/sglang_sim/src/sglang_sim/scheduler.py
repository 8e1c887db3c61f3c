# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""One DP replica's scheduler: a KV pool that fills up, batches that take time, and activations that can OOM.

As SGLang's scheduler (FCFS, no mixed chunks), each step is either a prefill batch or a decode batch:

- Prefill: the chunked request (if any) continues, then waiting requests are admitted in order while the pool can
  hold their input plus their whole ``max_new_tokens`` (the simulator reserves all of it, where SGLang reserves a
  decaying ratio and retracts on overflow) and the running count stays under ``max_running_requests``. Up to
  the chunk size of input tokens run in one batch; a longer prompt is split over batches.
- Decode: every prefilled request generates a token (with speculative decoding, two accepted tokens a step).

Tokens held in the pool are the input prefilled so far plus the tokens generated; they are freed when a request
finishes. A batch's activations (memory.Server.activation_bytes) are kept by the caching allocator; a batch that
needs more than a rank has free is torch's CUDA out-of-memory error and the server dies, as SGLang does.
"""
from __future__ import annotations

import collections
import hashlib
import threading
import time

from sglang_sim import logs

DECODE_LOG_INTERVAL = 40


class Request:
    """One generation request as the scheduler tracks it."""

    def __init__(self, rid: str, input_ids: list, max_new_tokens: int, counted: bool = True,
                 logprob_start_len: int | None = None):
        self.rid = rid
        self.input_ids = input_ids
        self.input_len = len(input_ids)
        # return_logprob with logprob_start_len < input_len: the prefill computes the logits of the prompt's tokens
        # from there on (input_token_logprobs), a [tokens, vocab] float32 tensor on top of the batch's activations.
        self.logprob_start_len = logprob_start_len
        self.max_new_tokens = max_new_tokens
        self.counted = counted          # user traffic (not a health check or the warmup)
        self.prefilled = 0
        self.output_ids = []
        self.finish_reason = None
        self.error = None
        self.created = time.time()
        self.finished_at = None
        self.changed = threading.Condition()

    @property
    def reserved(self) -> int:
        """KV tokens this request may hold at most: its input and every token it may generate."""
        return self.input_len + self.max_new_tokens

    @property
    def held(self) -> int:
        """KV tokens it holds now."""
        return self.prefilled + len(self.output_ids)

    def finish(self, reason=None, error=None):
        """Mark it done and wake whoever waits on it."""
        with self.changed:
            self.finish_reason = reason
            self.error = error
            self.finished_at = time.time()
            self.changed.notify_all()

    @property
    def done(self) -> bool:
        """True once finished (with tokens or an error)."""
        return self.finished_at is not None


def output_token(request: Request, position: int, vocab_size: int) -> int:
    """A deterministic 'generated' token id."""
    digest = hashlib.sha256(("%s:%d" % (request.rid, position)).encode()).digest()
    return int.from_bytes(digest[:4], "big") % vocab_size


class Scheduler:
    """The scheduler of one DP rank: its own KV pool, queue, batches and activation memory."""

    def __init__(self, server, replica, dp_rank: int, log, hooks):
        self.server = server
        self.replica = replica
        self.dp_rank = dp_rank
        self.log = log
        self.hooks = hooks               # the HTTP server: memory_changed(), fatal(), request_done()
        self.host = server.host
        self.args = server.args
        ranks = [rank for rank in replica.ranks if rank.dp_rank == dp_rank] or replica.ranks
        # Several nodes: this node's ranks; the others check their own room for the batch (Process.memory_changed).
        self.ranks = [rank for rank in ranks if server.is_local(rank)] or ranks
        self.tag = self.ranks[0].tag
        self.pool = replica.tokens
        self.max_running = replica.max_running_requests
        self.chunk = server.max_prefill_batch_tokens(replica)
        self.spec = bool(self.args.speculative_algorithm)
        self.vocab = server.model.vocab_size
        self.waiting = collections.deque()
        self.running = []
        self.activations = 0             # bytes the caching allocator holds for activations (high-water mark)
        self.completed = 0
        self.retracted = 0               # requests retracted (sglang:num_retracted_requests_total); the simulator
        #                                  reserves each request's whole output, so it never retracts
        self.peak_reserved = 0           # the most tokens running requests reserved at once
        self.decode_steps = 0
        self.last_output = 0.0
        self.last_gen_throughput = 0.0
        self.cond = threading.Condition()
        self.thread = threading.Thread(target=self._loop, name="scheduler-dp%d" % dp_rank, daemon=True)

    def start(self):
        """Start the event loop."""
        self.thread.start()

    # -- API -------------------------------------------------------------------------------------------------

    def submit(self, request: Request):
        """Queue a request; one that can never fit fails at once with SGLang's message."""
        limit = self.replica.max_req_input_len
        if request.input_len >= limit:
            request.finish("abort", "Input length (%d tokens) exceeds the maximum allowed length (%d tokens). "
                           "Use a shorter input or enable --allow-auto-truncate." % (request.input_len, limit))
            return
        max_req_len = min(self.args.context_len - 1, self.pool - 1)
        request.max_new_tokens = max(1, min(request.max_new_tokens, max_req_len - request.input_len))
        with self.cond:
            self.waiting.append(request)
            self.cond.notify()

    def load(self) -> dict:
        """SGLang's /get_load entry for this DP rank."""
        with self.cond:
            return {"dp_rank": self.dp_rank, "num_reqs": len(self.running), "num_waiting_reqs": len(self.waiting),
                    "num_tokens": sum(request.held for request in self.running)}

    def token_usage(self) -> float:
        """Share of the pool held now."""
        with self.cond:
            return sum(request.held for request in self.running) / float(self.pool)

    # -- the loop --------------------------------------------------------------------------------------------

    def _loop(self):
        while True:
            with self.cond:
                while not self.waiting and not self.running:
                    self.cond.wait()
                prefill = self._admit()
                decode = [] if prefill else [r for r in self.running if r.prefilled == r.input_len]
            if prefill:
                self._run_prefill(prefill)
            elif decode:
                self._run_decode(decode)
            else:
                time.sleep(0.001)

    def _admit(self) -> list:
        """(request, tokens) pairs of the next prefill batch; admits waiting requests into ``running``."""
        budget = self.chunk
        batch = []
        for request in self.running:
            if request.prefilled < request.input_len:
                take = min(request.input_len - request.prefilled, budget)
                batch.append((request, take))
                budget -= take
        reserved = sum(request.reserved for request in self.running)
        while self.waiting and budget > 0 and len(self.running) < self.max_running:
            request = self.waiting[0]
            if reserved + request.reserved > self.pool:
                break
            if batch and request.input_len > budget and (self.args.chunked_prefill_size or 0) <= 0:
                break
            self.waiting.popleft()
            self.running.append(request)
            reserved += request.reserved
            take = min(request.input_len, budget) if (self.args.chunked_prefill_size or 0) > 0 else request.input_len
            batch.append((request, take))
            budget -= take
        self.peak_reserved = max(self.peak_reserved, reserved)
        return batch

    def _check_memory(self, activations: int):
        """Grow the allocator's cache to ``activations`` or die with torch's OOM on the ranks that cannot."""
        if activations <= self.activations:
            return
        with self.hooks.allocation():
            # Another server on a shared GPU may have grown into this one's headroom since it started.
            room = {rank.number: rank.free - self.hooks.others_growth(rank.gpu) for rank in self.ranks}
            failing = [rank for rank in self.ranks if activations > room[rank.number]]
            if failing:
                for rank in failing:
                    message = logs.cuda_oom_message(
                        rank.gpu, activations - self.activations, self.server.capacity,
                        room[rank.number] - self.activations, rank.used + self.activations,
                        graphs=self.server.graph_bytes(self.replica))
                    self.log.traceback(rank.tag, logs.RUNTIME_FRAMES, "torch.OutOfMemoryError: " + message)
                self.hooks.fatal()
            self.activations = activations
            self.hooks.publish(now=True)
        self.hooks.memory_changed()

    def _step_seconds(self, prefill_tokens: int, decode_requests: int) -> float:
        realistic = 0.015 + prefill_tokens * 6e-5 + decode_requests * 2e-4
        # Fast, yet a prefill of the whole pool still takes a while (0.3 s for 150k tokens): a load that runs for a
        # duration then waits on the server, as on a GPU, instead of spending the host's CPU on new prompts.
        fast = 0.0005 + prefill_tokens * 2e-6 + decode_requests * 2e-6
        return self.host.seconds(realistic, fast)

    def _logit_bytes(self, batch: list) -> int:
        """The input logprobs' logits of a prefill batch: 4 bytes per vocabulary entry per prompt token whose logprob
        is asked for, within the chunk each request runs now."""
        tokens = 0
        for request, take in batch:
            if request.logprob_start_len is not None:
                start = max(request.prefilled, request.logprob_start_len)
                tokens += max(0, request.prefilled + take - start)
        return tokens * self.vocab * 4

    def _run_prefill(self, batch: list):
        tokens = sum(take for _request, take in batch)
        self._check_memory(self.server.activation_bytes(self.replica, tokens, 0) + self._logit_bytes(batch))
        time.sleep(self._step_seconds(tokens, 0))
        new = sum(1 for request, _take in batch if request.prefilled == 0)
        finished = []
        with self.cond:
            running, queued = len(self.running) - len(batch), len(self.waiting)
            for request, take in batch:
                request.prefilled += take
                if request.prefilled == request.input_len:
                    # The last prefill chunk samples the first output token.
                    self._emit(request, 1, finished)
            usage = sum(request.held for request in self.running) / float(self.pool)
        self.log.record(self.tag, "Prefill batch, #new-seq: %d, #new-token: %d, #cached-token: 0, token usage: "
                        "%.2f, #running-req: %d, #queue-req: %d, input throughput (token/s): 0.00, cuda graph: "
                        "False" % (new, tokens, usage, running, queued))
        self._finish(finished)

    def _run_decode(self, batch: list):
        self._check_memory(self.server.activation_bytes(self.replica, 0, len(batch)))
        started = time.time()
        time.sleep(self._step_seconds(0, len(batch)))
        finished = []
        with self.cond:
            generated = 0
            for request in batch:
                generated += self._emit(request, 2 if self.spec else 1, finished)
            held = sum(request.held for request in self.running)
            queued = len(self.waiting)
        self.last_gen_throughput = generated / max(1e-6, time.time() - started)
        self.decode_steps += 1
        if self.decode_steps % DECODE_LOG_INTERVAL == 0:
            spec = "accept len: 2.00, accept rate: 0.50, " if self.spec else ""
            self.log.record(self.tag, "Decode batch, #running-req: %d, #token: %d, token usage: %.2f, %scuda graph: "
                            "%s, gen throughput (token/s): %.2f, #queue-req: %d, "
                            % (len(batch), held, held / float(self.pool), spec,
                               len(batch) <= self.replica.graph_max_bs, self.last_gen_throughput, queued))
        self._finish(finished)

    def _emit(self, request: Request, count: int, finished: list) -> int:
        """Append up to ``count`` tokens (caller holds the lock); returns how many."""
        count = min(count, request.max_new_tokens - len(request.output_ids))
        with request.changed:
            for _index in range(count):
                request.output_ids.append(output_token(request, len(request.output_ids), self.vocab))
            request.changed.notify_all()
        self.last_output = time.time()
        if len(request.output_ids) >= request.max_new_tokens:
            self.running.remove(request)
            finished.append(request)
        return count

    def _finish(self, finished: list):
        for request in finished:
            request.finish({"type": "length", "length": request.max_new_tokens})
            if request.counted:
                self.completed += 1
                self.hooks.request_done(self)

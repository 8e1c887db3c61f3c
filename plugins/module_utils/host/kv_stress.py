# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A KV-filling load against a local SGLang server, with the GPUs' free memory sampled through it.

I/O here: HTTP to the server (urllib, every call with a timeout) and the injected GPU probe function, called from a
sampler thread. Planning (:func:`plan_requests`), error classification (:func:`classify_error`) and summarising
(:func:`summarize_run`) are pure. Standard library only: this runs on the managed host.
"""
from __future__ import annotations

import http.client
import json
import math
import random
import socket
import threading
import time
import urllib.error
import urllib.request
from typing import Any, Callable, cast

from ansible_collections.llmserve.sglang.plugins.module_utils.host.lazy_opener import LazyOpener

GIB = 2 ** 30
DEFAULT_CHUNK = 8192          # SGLang's chunked_prefill_size on large GPUs when the server does not say
VOCAB_LOW, VOCAB_HIGH = 100, 30000
MAX_ERROR_MESSAGES = 5
_OPENER = LazyOpener(urllib.request.ProxyHandler({}))


class KvStressError(ValueError):
    """Bad input or a server that cannot be stressed (no server info); the message names the value."""


# --------------------------------------------------------------------------------------------------
# Pure helpers
# --------------------------------------------------------------------------------------------------

def server_limits(info: dict) -> dict:
    """pool_tokens, max_running_requests, context_length, max_input_tokens and chunk_tokens from /get_server_info."""
    if not isinstance(info, dict):
        raise KvStressError("server info is not a JSON object: %r" % (info,))
    pool = info.get("max_total_num_tokens")
    if not isinstance(pool, int) or isinstance(pool, bool) or pool <= 0:
        raise KvStressError("server info has no positive max_total_num_tokens: %r" % (pool,))
    running = info.get("max_running_requests")
    for state in info.get("internal_states") or []:
        value = state.get("effective_max_running_requests_per_dp") if isinstance(state, dict) else None
        if isinstance(value, int) and value > 0:
            running = value
            break
    if not isinstance(running, int) or running <= 0:
        running = None
    context = info.get("context_length") or info.get("context_len")
    context = context if isinstance(context, int) and context > 0 else None
    max_input = info.get("max_req_input_len")
    max_input = max_input if isinstance(max_input, int) and max_input > 0 else None
    chunk = info.get("chunked_prefill_size")
    chunk = chunk if isinstance(chunk, int) and chunk > 0 else DEFAULT_CHUNK
    return {"pool_tokens": pool, "max_running_requests": running, "context_length": context,
            "max_input_tokens": max_input, "chunk_tokens": chunk}


def plan_requests(limits: dict, fill_ratio: float = 0.95, max_new_tokens: int = 32, concurrency: int | None = None) -> dict:
    """How many concurrent requests of how many input tokens hold ``fill_ratio`` of the pool at once.

    Prompts are longer than the largest prefill chunk where the context allows (so a full chunk is prefilled),
    at most ``concurrency`` (default: max_running_requests) requests, each with input + output within the context
    and the server's max input length, and all of them together within ``fill_ratio`` of the pool (the scheduler
    admits them all at once). Returns {requests, input_tokens, max_new_tokens, target_tokens, planned_tokens}.
    """
    if not 0 < fill_ratio <= 1:
        raise KvStressError("fill_ratio must be in (0, 1], not %r" % (fill_ratio,))
    if max_new_tokens < 1:
        raise KvStressError("max_new_tokens must be at least 1, not %r" % (max_new_tokens,))
    if concurrency is not None and concurrency < 1:
        raise KvStressError("concurrency must be at least 1, not %r" % (concurrency,))
    pool = limits["pool_tokens"]
    target = int(pool * fill_ratio)
    slots = concurrency or limits.get("max_running_requests") or 1
    if limits.get("max_running_requests"):
        slots = min(slots, limits["max_running_requests"])
    # The longest a request may be: context - 1 for its input and output together, the server's input limit, the pool.
    longest = pool - 1
    if limits.get("context_length"):
        longest = min(longest, limits["context_length"] - 1)
    max_input = longest - max_new_tokens
    if limits.get("max_input_tokens"):
        max_input = min(max_input, limits["max_input_tokens"] - 1)
    if max_input < 1:
        raise KvStressError("max_new_tokens %d leaves no room for input in a context of %d tokens" % (max_new_tokens, longest + 1))
    wanted = max(limits.get("chunk_tokens") or DEFAULT_CHUNK, target // slots - max_new_tokens)
    per_request = min(max_input, wanted) + max_new_tokens
    count = max(1, min(slots, target // per_request))
    if per_request - max_new_tokens == max_input and count < slots:
        # Prompts as long as the context allows: one more of them comes closer to the target (still within it).
        count = min(slots, int(math.ceil(target / float(per_request))))
    input_tokens = max(1, min(max_input, target // count - max_new_tokens))
    return {"requests": count, "input_tokens": input_tokens, "max_new_tokens": max_new_tokens, "target_tokens": target,
            "planned_tokens": count * (input_tokens + max_new_tokens)}


def classify_error(exc: BaseException) -> tuple:
    """(kind, message) of a failed HTTP call: server_down (refused, reset, closed), timeout, http, other."""
    if isinstance(exc, urllib.error.HTTPError):
        return "http", "HTTP %d: %s" % (exc.code, exc.reason)
    reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    if isinstance(reason, (socket.timeout, TimeoutError)):
        return "timeout", "timed out: %s" % (reason or "no answer")
    if isinstance(reason, (ConnectionRefusedError, ConnectionResetError, ConnectionAbortedError, BrokenPipeError,
                           http.client.RemoteDisconnected, http.client.IncompleteRead)):
        return "server_down", "%s: %s" % (type(reason).__name__, reason)
    if isinstance(reason, OSError) and "timed out" in str(reason):
        return "timeout", "timed out: %s" % reason
    return "other", "%s: %s" % (type(reason).__name__, reason)


def min_free_per_gpu(samples: list) -> dict:
    """{gpu index: least free bytes} over probe results (lists of GPU dicts with memory_free_bytes)."""
    least: dict[Any, int] = {}
    for gpus in samples:
        for gpu in gpus:
            free = gpu.get("memory_free_bytes")
            if free is None:
                continue
            index = gpu.get("index")
            least[index] = free if index not in least else min(least[index], free)
    return least


def summarize_run(pool_tokens: int, plan: dict, outcomes: list, samples: list, server_alive: bool, duration_s: float,
                  peak_tokens_seen: int | None = None, failure_reason: str | None = None) -> dict:
    """The module's result from the run's facts.

    ``outcomes``: one dict per request, {ok, tokens (prompt + completion when ok), kind, message}; ``samples``: GPU
    lists from the probe; ``peak_tokens_seen``: the most tokens the server reported held (None: estimate from the
    first round when all of it was answered, ``plan["requests"]`` requests at once; the larger of both is taken).
    """
    errors = [outcome for outcome in outcomes if not outcome["ok"]]
    completed = len(outcomes) - len(errors)
    tokens = sum(outcome.get("tokens") or 0 for outcome in outcomes if outcome["ok"])
    # A complete round's requests were all admitted at once (the plan fits the pool and the running slots).
    first_round = outcomes[:plan["requests"]]
    estimate = 0
    if len(first_round) == plan["requests"] and all(outcome["ok"] for outcome in first_round):
        estimate = sum(outcome.get("tokens") or 0 for outcome in first_round)
    peak = min(max(peak_tokens_seen or 0, estimate), pool_tokens)
    least = min_free_per_gpu(samples)
    per_gpu = {str(index): round(value / float(GIB), 3) for index, value in sorted(least.items())}
    if failure_reason is None and not server_alive:
        failure_reason = "the server is not answering after the load"
    if failure_reason is None and errors:
        failure_reason = "%d of %d requests failed: %s" % (len(errors), len(outcomes), errors[0]["message"])
    return {
        "held": bool(server_alive and not errors and completed > 0 and failure_reason is None),
        "errors": {"count": len(errors), "messages": [error["message"] for error in errors[:MAX_ERROR_MESSAGES]]},
        "requests_completed": completed,
        "peak_tokens_held": peak,
        "pool_tokens": pool_tokens,
        "fill_reached": round(peak / float(pool_tokens), 4) if pool_tokens else 0.0,
        "min_free_gib_per_gpu": per_gpu,
        "min_free_gib": min(per_gpu.values()) if per_gpu else None,
        "samples": len(samples),
        "server_alive_at_end": bool(server_alive),
        "throughput_tokens_per_s": round(tokens / duration_s, 1) if duration_s > 0 else 0.0,
        "duration_s": round(duration_s, 3),
        "failure_reason": failure_reason,
        "plan": dict(plan),
    }


def merge_runs(main: dict, others: dict) -> dict:
    """The result of loading several servers that share GPUs at once (``others``: url -> that server's run): the
    main server's, held only when every other server held its own load too, with the least free memory any run saw
    on each GPU. The other servers' own results are under ``also``."""
    merged = dict(main)
    per_gpu = dict(main.get("min_free_gib_per_gpu") or {})
    for url, other in sorted(others.items()):
        for index, free in (other.get("min_free_gib_per_gpu") or {}).items():
            per_gpu[index] = min(per_gpu.get(index, free), free)
        if merged["held"] and not other.get("held"):
            merged["held"] = False
            merged["failure_reason"] = "%s, loaded at the same time on the same GPUs: %s" % (
                url, other.get("failure_reason") or "it did not hold its load")
    merged["min_free_gib_per_gpu"] = per_gpu
    merged["min_free_gib"] = min(per_gpu.values()) if per_gpu else main.get("min_free_gib")
    keys = ("held", "failure_reason", "pool_tokens", "fill_reached", "requests_completed", "server_alive_at_end")
    merged["also"] = {url: {key: other.get(key) for key in keys} for url, other in others.items()}
    return merged


# --------------------------------------------------------------------------------------------------
# I/O
# --------------------------------------------------------------------------------------------------

def http_json(url: str, body: Any = None, api_key: str | None = None, timeout: float = 30.0) -> Any:
    """GET (body None) or POST JSON; the parsed answer. Raises urllib / OS errors (see :func:`classify_error`)."""
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = "Bearer " + api_key
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers=headers)
    with _OPENER.open(req, timeout=timeout) as response:
        return json.loads(response.read().decode() or "null")


def read_server_info(base_url: str, api_key: str | None = None, timeout: float = 10.0) -> dict:
    """/get_server_info, else /server_info."""
    failures: list[str] = []
    for path in ("/get_server_info", "/server_info"):
        try:
            return http_json(base_url + path, api_key=api_key, timeout=timeout)
        except (OSError, ValueError, http.client.HTTPException) as exc:
            failures.append("%s: %s" % (path, classify_error(exc)[1]))
    raise KvStressError("cannot read the server info at %s (%s)" % (base_url, "; ".join(failures)))


def _alive(base_url: str, api_key: str | None, timeout: float) -> bool:
    try:
        http_json(base_url + "/get_server_info", api_key=api_key, timeout=timeout)
        return True
    except urllib.error.HTTPError as exc:
        return exc.code < 500
    except (OSError, ValueError, http.client.HTTPException):
        return False


# A sample through nvidia-smi starts processes (one or two, tens to hundreds of ms of a CPU core each on an 8-GPU
# host, where NVML answers in-process in about a millisecond): the sampler waits at least this many times as long as
# a sample took, so it spends at most a fifth of its time sampling and takes no core from the server it measures.
SAMPLE_WAIT_FACTOR = 4


def sample_wait(interval: float, took: float) -> float:
    """Seconds to wait before the next sample: the rest of ``interval``, and never less than SAMPLE_WAIT_FACTOR
    times what the sample took (``took``)."""
    return max(0.0, interval - took, SAMPLE_WAIT_FACTOR * took)


class _Sampler(threading.Thread):
    """Calls probe() every interval (GPU lists kept) and polls /get_load for the tokens held, until stopped."""

    def __init__(self, probe: Callable[[], Any] | None, interval: float, base_url: str, api_key: str | None) -> None:
        super().__init__(daemon=True)
        self.probe, self.interval, self.base_url, self.api_key = probe, interval, base_url, api_key
        self.samples: list[list[dict[str, Any]]] = []
        self.probe_errors: list[str] = []
        self.peak_tokens: int | None = None
        self.stopped = threading.Event()

    def sample_once(self) -> None:
        """One GPU sample and one load reading; failures are recorded, never raised."""
        if self.probe is not None:
            try:
                self.samples.append(list(self.probe()))
            except Exception as exc:  # pylint: disable=broad-except
                self.probe_errors.append(str(exc))
        try:
            load = http_json(self.base_url + "/get_load", api_key=self.api_key, timeout=2)
            held = sum(int(entry.get("num_tokens") or 0) for entry in (load if isinstance(load, list) else [load]))
            self.peak_tokens = held if self.peak_tokens is None else max(self.peak_tokens, held)
        except (OSError, ValueError, TypeError, AttributeError, http.client.HTTPException):
            pass

    def run(self) -> None:
        while not self.stopped.is_set():
            started = time.time()
            self.sample_once()
            self.stopped.wait(sample_wait(self.interval, time.time() - started))


def _one_request(base_url: str, plan: dict[str, Any], rng_seed: float, api_key: str | None,
                 timeout: float) -> dict[str, Any]:
    rng = random.Random(rng_seed)
    body = {"input_ids": [rng.randint(VOCAB_LOW, VOCAB_HIGH) for _position in range(plan["input_tokens"])],
            "sampling_params": {"max_new_tokens": plan["max_new_tokens"], "temperature": 0, "ignore_eos": True}}
    try:
        answer = http_json(base_url + "/generate", body, api_key=api_key, timeout=timeout)
        meta = (answer or {}).get("meta_info") or {} if isinstance(answer, dict) else {}
        tokens = int(meta.get("prompt_tokens") or plan["input_tokens"]) + int(meta.get("completion_tokens") or 0)
        return {"ok": True, "tokens": tokens, "kind": None, "message": None}
    except (OSError, ValueError, http.client.HTTPException) as exc:
        kind, message = classify_error(exc)
        return {"ok": False, "tokens": 0, "kind": kind, "message": message}


def run_stress(base_url: str = "http://127.0.0.1:30000", api_key: str | None = None, fill_ratio: float = 0.95,
               duration: float | None = None, rounds: int | None = None, max_new_tokens: int = 32,
               concurrency: int | None = None, request_timeout: float = 120.0, sample_interval: float = 0.1,
               probe: Callable[[], Any] | None = None, seed: int | None = None) -> dict:
    """Fill the KV pool with concurrent /generate rounds for ``duration`` seconds or ``rounds`` rounds (default one
    round), sampling ``probe()`` (a list of GPU dicts) every ``sample_interval`` s; :func:`summarize_run`'s dict.

    A server that stops answering ends the run at once; the whole run has a deadline (duration or rounds times the
    request timeout, plus one request timeout), so nothing waits forever.
    """
    base_url = base_url.rstrip("/")
    if duration is not None and duration <= 0:
        raise KvStressError("duration must be positive, not %r" % (duration,))
    if rounds is not None and rounds < 1:
        raise KvStressError("rounds must be at least 1, not %r" % (rounds,))
    if request_timeout <= 0 or sample_interval <= 0:
        raise KvStressError("request_timeout and sample_interval must be positive")
    limits = server_limits(read_server_info(base_url, api_key, min(request_timeout, 10.0)))
    plan = plan_requests(limits, fill_ratio, max_new_tokens, concurrency)
    if duration is None and rounds is None:
        rounds = 1
    started = time.time()
    deadline = started + (duration if duration is not None else cast(int, rounds) * request_timeout) + request_timeout
    seeds = random.Random(seed)
    sampler = _Sampler(probe, sample_interval, base_url, api_key)
    sampler.sample_once()
    sampler.start()
    outcomes: list[dict[str, Any]] = []
    failure: str | None = None
    done_rounds = 0
    try:
        while failure is None:
            if rounds is not None and done_rounds >= rounds:
                break
            if duration is not None and done_rounds > 0 and time.time() - started >= duration:
                break
            timeout = max(1.0, min(request_timeout, deadline - time.time()))
            results: list[dict[str, Any] | None] = [None] * plan["requests"]

            def worker(position: int, request_seed: float, timeout: float = timeout,
                       results: list[dict[str, Any] | None] = results) -> None:
                results[position] = _one_request(base_url, plan, request_seed, api_key, timeout)

            threads = [threading.Thread(target=worker, args=(position, seeds.random()), daemon=True)
                       for position in range(plan["requests"])]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(max(0.0, deadline - time.time()))
            done_rounds += 1
            unfinished = sum(1 for result in results if result is None)
            outcomes += [result for result in results if result is not None]
            outcomes += [{"ok": False, "tokens": 0, "kind": "timeout", "message": "no answer before the run's deadline"}
                         for _position in range(unfinished)]
            down = [result for result in results if result is not None and result["kind"] == "server_down"]
            if down:
                failure = "the server stopped answering under load (%s)" % down[0]["message"]
            elif unfinished or time.time() >= deadline:
                failure = "the run passed its deadline with %d requests unanswered" % unfinished
    finally:
        sampler.stopped.set()
        sampler.join(5)
    sampler.sample_once()
    alive = _alive(base_url, api_key, min(request_timeout, 5.0))
    if failure is not None and not alive and "stopped answering" not in failure:
        failure = "the server died under load: " + failure
    result = summarize_run(limits["pool_tokens"], plan, outcomes, sampler.samples, alive, time.time() - started,
                           sampler.peak_tokens, failure)
    result["rounds"] = done_rounds
    result["probe_errors"] = sampler.probe_errors[:MAX_ERROR_MESSAGES]
    return result

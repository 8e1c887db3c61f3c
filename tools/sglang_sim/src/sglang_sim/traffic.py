# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang-sim-traffic: bounded, production-like traffic for an SGLang server (the simulator or a real one).

    sglang-sim-traffic --url http://198.18.0.2:30000 --seconds 20 --fill 0.95 [--seed 1] [--api-key K]

Unlike a stress load (every request the same length, the pool filled at once), it sends a mix: prompt lengths drawn
from a long-tailed set (chat turns, RAG contexts, a few long documents; none longer than a quarter of the pool),
output lengths from short answers to long generations, a steady stream of small requests and, every --burst-every
seconds, a burst of --burst-seconds during which finished requests are replaced at once, so that the requests in
flight reserve about --fill of the pool (read from /get_server_info's max_total_num_tokens). With --logprob-share,
that share of the requests asks for the logprobs of the last --logprob-tokens tokens of its prompt (return_logprob,
logprob_start_len), as evaluation and reranking clients do: SGLang computes their logits in the prefill, memory a
stress load of plain generations never takes. Bounded: at most --concurrency requests in flight, nothing sent after
--seconds; it prints one JSON line (requests sent, answered, statuses, the pool) at the end.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import threading
import time
import urllib.error
import urllib.request

# Prompt lengths (tokens) and their weights: short chat turns most often, RAG contexts, the odd long document.
PROMPTS = ((200, 30), (800, 25), (2000, 20), (4000, 12), (8000, 8), (16000, 5))
OUTPUTS = ((16, 30), (64, 30), (256, 25), (1024, 15))
# No prompt longer than this share of the pool: on a small pool a burst is still several requests, not one document.
LONGEST_PROMPT_SHARE = 0.25


def _choose(rng, table):
    return rng.choices([value for value, _weight in table], weights=[weight for _value, weight in table])[0]


def _post(url, body, api_key, timeout):
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = "Bearer " + api_key
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            answer.read()
            return answer.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0


def pool_tokens(url, api_key=None):
    headers = {"Authorization": "Bearer " + api_key} if api_key else {}
    with urllib.request.urlopen(urllib.request.Request(url + "/get_server_info", headers=headers), timeout=10) as answer:
        info = json.loads(answer.read())
    states = info.get("internal_states") or [info]
    return int(states[0].get("max_total_num_tokens") or info.get("max_total_num_tokens"))


def run(url, seconds, fill, seed=0, concurrency=256, burst_every=5.0, api_key=None, context_len=None,
        logprob_share=0.0, logprob_tokens=1024, burst_seconds=1.0):
    rng = random.Random(seed)
    pool = pool_tokens(url, api_key)

    def prompt(table):
        return min(_choose(rng, table), max(4, int(pool * LONGEST_PROMPT_SHARE)))

    longest = min(pool - 1, context_len or pool)
    slots = threading.BoundedSemaphore(concurrency)
    statuses = {}
    lock = threading.Lock()
    reserved = [0]
    threads = []
    deadline = time.monotonic() + seconds

    def one(prompt, output, logprobs):
        body = {"input_ids": [rng.randrange(100, 30000)] * prompt, "sampling_params": {"max_new_tokens": output}}
        if logprobs:
            body.update(return_logprob=True, logprob_start_len=max(0, prompt - logprob_tokens))
        try:
            status = _post(url + "/generate", body, api_key, seconds + 60)
        finally:
            with lock:
                reserved[0] -= prompt + output
            slots.release()
        with lock:
            statuses[status] = statuses.get(status, 0) + 1

    def send(prompt, output, block=True):
        if not slots.acquire(blocking=block, timeout=1 if block else None):
            return False
        prompt = max(1, min(prompt, longest - output))
        with lock:
            reserved[0] += prompt + output
        thread = threading.Thread(target=one, args=(prompt, output, rng.random() < logprob_share), daemon=True)
        thread.start()
        threads.append(thread)
        return True

    next_burst = burst_until = time.monotonic()
    sent = 0
    while time.monotonic() < deadline:
        now = time.monotonic()
        if now >= next_burst:
            burst_until, next_burst = now + burst_seconds, now + burst_every
        if now < burst_until:
            # A burst: new requests as the ones in flight finish, so that they reserve about `fill` of the pool
            # for the whole burst.
            if reserved[0] < fill * pool:
                if send(prompt(PROMPTS), _choose(rng, OUTPUTS)):
                    sent += 1
                continue
            time.sleep(0.005)
        else:
            if send(prompt(PROMPTS[:3]), _choose(rng, OUTPUTS[:2]), block=False):
                sent += 1          # the steady stream of small requests between bursts
            time.sleep(rng.uniform(0.02, 0.1))
    for thread in threads:
        thread.join(60)
    return {"sent": sent, "answered": sum(count for status, count in statuses.items() if status == 200),
            "statuses": {str(status): count for status, count in sorted(statuses.items())}, "pool_tokens": pool}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--fill", type=float, default=0.95,
                        help="the share of the pool a burst asks for (over 1: some of it waits in the queue)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--burst-every", type=float, default=5.0)
    parser.add_argument("--burst-seconds", type=float, default=1.0)
    parser.add_argument("--api-key")
    parser.add_argument("--logprob-share", type=float, default=0.0)
    parser.add_argument("--logprob-tokens", type=int, default=1024)
    args = parser.parse_args(argv)
    result = run(args.url.rstrip("/"), args.seconds, args.fill, args.seed, args.concurrency, args.burst_every,
                 args.api_key, logprob_share=args.logprob_share, logprob_tokens=args.logprob_tokens,
                 burst_seconds=args.burst_seconds)
    print(json.dumps(result), flush=True)
    return 0 if result["answered"] else 1


if __name__ == "__main__":
    sys.exit(main())

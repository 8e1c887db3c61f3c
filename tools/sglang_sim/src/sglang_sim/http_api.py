# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""SGLang's HTTP endpoints (http_server.py), served by the standard library's ThreadingHTTPServer.

Paths, status codes and response shapes follow SGLang 0.5.9: ``/health`` and ``/health_generate`` answer 503
while the server is starting and otherwise run a one-token generation (200 as soon as any scheduler output
arrives, 503 after 20 s without); ``--api-key`` guards every path except those starting with ``/health`` or
``/metrics`` (401 ``{"error": "Unauthorized"}``). Text is "tokenized" as one token per 4 UTF-8 bytes, and the
sampler never emits EOS, so a request always generates ``max_new_tokens`` (default 128) tokens.
"""
from __future__ import annotations

import hmac
import itertools
import json
import os
import signal
import threading
import time
import urllib.request
import uuid
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from sglang_sim import args as server_args
from sglang_sim import hostspec
from sglang_sim.hostspec import GIB
from sglang_sim.scheduler import Request, Scheduler

HEALTH_CHECK_TIMEOUT = 20
# The warmup talks to this process itself: never through an http_proxy from the environment.
_LOCAL_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
DEFAULT_MAX_NEW_TOKENS = 128
_WORDS = ("the", "of", "and", "to", "in", "a", "is", "that", "for", "it", "as", "was", "with", "be", "by", "on")


def tokenize(text: str) -> list:
    """One token per 4 UTF-8 bytes (at least one), ids derived from the bytes."""
    data = text.encode("utf-8")
    return [int.from_bytes(data[i:i + 4].ljust(4, b" "), "big") % 32000 for i in range(0, max(len(data), 1), 4)]


def detokenize(ids: list) -> str:
    """Words for generated ids."""
    return " ".join(_WORDS[token % len(_WORDS)] for token in ids)


class BadRequest(Exception):
    """A request body SGLang would reject with 400."""


class Api:
    """The HTTP side of the process: dispatch to schedulers, health, info."""

    def __init__(self, process):
        self.process = process
        self.args = process.args
        self.plan = process.plan
        self.counter = itertools.count()
        self.lock = threading.Lock()

    def next_scheduler(self) -> Scheduler:
        """Round-robin over DP ranks (load_balance_method round_robin)."""
        schedulers = self.process.schedulers
        with self.lock:
            return schedulers[next(self.counter) % len(schedulers)]

    def run(self, input_ids: list, max_new_tokens: int, counted: bool = True, scheduler=None,
            logprob_start_len: int | None = None) -> Request:
        """Submit one request and return it (not waiting)."""
        request = Request(uuid.uuid4().hex, input_ids, max_new_tokens, counted, logprob_start_len)
        (scheduler or self.next_scheduler()).submit(request)
        return request

    @staticmethod
    def wait(request: Request):
        """Block until the request is finished (it always finishes, or the process dies)."""
        with request.changed:
            while not request.done:
                request.changed.wait(1.0)

    def health(self) -> int:
        """SGLang's health_generate: a 1-token request; any scheduler output after the start is healthy."""
        if self.process.status != "Up":
            return 503
        started = time.time()
        requests = [self.run([0], 1, counted=False, scheduler=scheduler) for scheduler in self.process.schedulers]
        deadline = started + self.process.host.seconds(HEALTH_CHECK_TIMEOUT, HEALTH_CHECK_TIMEOUT)
        while time.time() < deadline:
            time.sleep(self.process.host.seconds(1.0, 0.02))
            if any(scheduler.last_output > started for scheduler in self.process.schedulers):
                return 200
            if all(request.error for request in requests):
                break
        self.process.log.record("", "Health check failed. Server couldn't get a response from detokenizer for "
                                "last %d seconds." % HEALTH_CHECK_TIMEOUT)
        return 503

    def model_info(self) -> dict:
        """/model_info."""
        model = self.process.model
        return {"model_path": self.args.model_path, "tokenizer_path": self.args.tokenizer_path,
                "is_generation": True, "preferred_sampling_params": self.args.preferred_sampling_params,
                "weight_version": self.args.weight_version, "has_image_understanding": model.is_multimodal,
                "has_audio_understanding": False, "model_type": model.model_type,
                "architectures": model.config.get("architectures")}

    def server_info(self) -> dict:
        """/server_info: resolved server args, scheduler info, per-DP internal state with memory usage."""
        plan = self.plan
        first = plan.replicas[0]
        info = server_args.as_dict(self.args)
        info.update({"status": "ready", "max_total_num_tokens": first.tokens,
                     "max_req_input_len": first.max_req_input_len})
        states = []
        for scheduler in self.process.schedulers:
            replica = scheduler.replica
            state = server_args.as_dict(self.args)
            state["last_gen_throughput"] = scheduler.last_gen_throughput
            state["memory_usage"] = {
                "weight": round(plan.weight_bytes / GIB, 2),
                "kvcache": round(plan.kv_bytes(replica) / GIB, 2),
                "token_capacity": int(replica.tokens),
                "graph": round(plan.graph_bytes(replica) / GIB, 2)}
            state["effective_max_running_requests_per_dp"] = replica.max_running_requests
            states.append(state)
        info["internal_states"] = states
        info["version"] = self.process.host.sglang_version
        return info

    def models(self) -> dict:
        """/v1/models."""
        name = self.args.served_model_name
        return {"object": "list", "data": [{"id": name, "object": "model", "created": int(time.time()),
                                            "owned_by": "sglang", "root": name, "parent": None,
                                            "max_model_len": self.args.context_len}]}

    def metrics(self) -> str:
        """/metrics (with --enable-metrics): SGLang's scheduler gauges and retraction counter, as prometheus_client's
        multiprocess collector prints them (labels sorted; TP rank 0's scheduler per DP rank; the counter with
        ``_total`` in HELP and TYPE). The host's faults.metrics_garbage, read now, answers an error page instead."""
        if hostspec.load_host(self.process.host.path).faults.get("metrics_garbage"):
            return "<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>\n"
        lines = []
        for name, kind, what in (
                ("num_running_reqs", "gauge", "The number of running requests."),
                ("num_queue_reqs", "gauge", "The number of requests in the waiting queue."),
                ("num_used_tokens", "gauge", "The number of used tokens."),
                ("token_usage", "gauge", "The token usage."),
                ("max_total_num_tokens", "gauge", "Maximum total number of tokens in the KV cache pool."),
                ("num_retracted_requests_total", "counter", "Total number of retracted requests.")):
            lines += ["# HELP sglang:%s %s" % (name, what), "# TYPE sglang:%s %s" % (name, kind)]
            for scheduler in self.process.schedulers:
                load = scheduler.load()
                value = {"num_running_reqs": load["num_reqs"], "num_queue_reqs": load["num_waiting_reqs"],
                         "num_used_tokens": load["num_tokens"], "token_usage": scheduler.token_usage(),
                         "max_total_num_tokens": scheduler.pool,
                         "num_retracted_requests_total": scheduler.retracted}[name]
                labels = {"engine_type": "unified", "model_name": self.args.served_model_name, "moe_ep_rank": "0",
                          "pp_rank": "0", "tp_rank": "0"}
                if len(self.process.schedulers) > 1:
                    labels["dp_rank"] = str(scheduler.dp_rank)
                lines.append("sglang:%s{%s} %s" % (name, ",".join('%s="%s"' % item for item in sorted(labels.items())),
                                                   float(value)))
        return "\n".join(lines) + "\n"

    # -- generation ------------------------------------------------------------------------------------------

    def generate_inputs(self, body: dict) -> tuple:
        """([input ids per prompt], [max_new_tokens per prompt], batched) of a /generate body."""
        if "input_ids" in body and body["input_ids"] is not None:
            ids = body["input_ids"]
            batched = bool(ids) and isinstance(ids[0], list)
            prompts = ids if batched else [ids]
            if not all(isinstance(p, list) and all(isinstance(t, int) for t in p) for p in prompts):
                raise BadRequest("input_ids must be a list of token ids or a list of such lists")
        elif "text" in body and body["text"] is not None:
            text = body["text"]
            batched = isinstance(text, list)
            prompts = [tokenize(str(item)) for item in (text if batched else [text])]
        else:
            raise BadRequest("Either text, input_ids or input_embeds should be provided.")
        params = body.get("sampling_params") or {}
        params = params if isinstance(params, list) else [params] * len(prompts)
        max_new = []
        for param in params:
            value = param.get("max_new_tokens", DEFAULT_MAX_NEW_TOKENS) if isinstance(param, dict) else None
            max_new.append(DEFAULT_MAX_NEW_TOKENS if value is None else int(value))
        return prompts, max_new, batched

    def generate_result(self, request: Request) -> dict:
        """SGLang's /generate response for one finished request."""
        return {"text": detokenize(request.output_ids), "output_ids": list(request.output_ids),
                "meta_info": {"id": request.rid, "finish_reason": request.finish_reason,
                              "prompt_tokens": request.input_len, "weight_version": self.args.weight_version,
                              "total_retractions": 0, "completion_tokens": len(request.output_ids),
                              "cached_tokens": 0,
                              "e2e_latency": round((request.finished_at or time.time()) - request.created, 6)}}

    def chat_prompt(self, body: dict) -> list:
        """Token ids of an OpenAI chat body: the messages' text plus a few template tokens per message."""
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest("messages must be a non-empty list")
        ids = [0, 1, 2]
        for message in messages:
            content = message.get("content") if isinstance(message, dict) else None
            if isinstance(content, list):
                parts = [part.get("text", "") for part in content if isinstance(part, dict)]
                images = sum(1 for part in content if isinstance(part, dict) and part.get("type") == "image_url")
                ids += [3] * (256 * images)
                content = " ".join(parts)
            ids += [4, 5, 6] + tokenize(str(content or ""))
        return ids

    def chat_max_tokens(self, body: dict) -> int:
        """max_completion_tokens / max_tokens, default 128."""
        for key in ("max_completion_tokens", "max_tokens"):
            if body.get(key) is not None:
                return int(body[key])
        return DEFAULT_MAX_NEW_TOKENS


class _HttpServer(ThreadingHTTPServer):
    """A thread per connection; a deep listen backlog, since load tests open hundreds of connections at once."""

    daemon_threads = True
    request_queue_size = 1024


class _Methods(BaseHTTPRequestHandler):
    """GET, POST and PUT (SGLang accepts PUT on /generate) all go to ``_route(method)``."""

    def do_GET(self):  # pylint: disable=invalid-name
        """GET routes."""
        self._route("GET")

    def do_POST(self):  # pylint: disable=invalid-name
        """POST routes."""
        self._route("POST")

    def do_PUT(self):  # pylint: disable=invalid-name
        """PUT routes."""
        self._route("PUT")

    def _route(self, method: str):
        raise NotImplementedError


class Handler(_Methods):
    """Routes SGLang's paths; logs uvicorn's access lines."""

    protocol_version = "HTTP/1.1"
    api: Api = None
    raw_body = b""

    def log_message(self, format, *args):  # pylint: disable=redefined-builtin
        """Access lines are written by _access (uvicorn's format)."""

    def _access(self, status: int):
        try:
            phrase = HTTPStatus(status).phrase
        except ValueError:
            phrase = ""
        self.api.process.log.record("", 'INFO:     %s:%d - "%s %s HTTP/1.1" %d %s' % (
            self.client_address[0], self.client_address[1], self.command, self.path.split("?")[0], status, phrase))

    def _send(self, status: int, body=None, content_type="application/json"):
        data = b"" if body is None else (body.encode() if isinstance(body, str) else json.dumps(body).encode())
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self._access(status)

    def _body(self) -> dict:
        try:
            data = json.loads(self.raw_body.decode("utf-8") or "{}")
        except ValueError as exc:
            raise BadRequest("Invalid JSON body: %s" % exc)
        if not isinstance(data, dict):
            raise BadRequest("the request body must be a JSON object")
        return data

    def _authorized(self, path: str) -> bool:
        key = self.api.args.api_key
        if not key or path.startswith("/health") or path.startswith("/metrics"):
            return True
        parts = (self.headers.get("Authorization") or "").split(" ", 1)
        return len(parts) == 2 and parts[0].lower() == "bearer" and hmac.compare_digest(parts[1], key)

    def _route(self, method: str):
        # Read the whole body first, even for a request that is refused: the connection may be kept alive.
        length = int(self.headers.get("Content-Length") or 0)
        self.raw_body = self.rfile.read(length) if length > 0 else b""
        path = self.path.split("?")[0]
        if not self._authorized(path):
            self._send(401, {"error": "Unauthorized"})
            return
        api = self.api
        try:
            if method == "GET" and path in ("/health", "/health_generate"):
                self._send(api.health())
            elif method == "GET" and path in ("/model_info", "/get_model_info"):
                self._send(200, api.model_info())
            elif method == "GET" and path in ("/server_info", "/get_server_info"):
                self._send(200, api.server_info())
                api.process.info_asked()
            elif method == "GET" and path == "/get_load":
                self._send(200, [scheduler.load() for scheduler in api.process.schedulers])
            elif method == "GET" and path == "/v1/models":
                self._send(200, api.models())
            elif method == "GET" and path == "/metrics" and api.args.enable_metrics:
                self._send(200, api.metrics(), "text/plain; version=0.0.4; charset=utf-8")
            elif path == "/flush_cache" and method in ("GET", "POST"):
                self._send(200, "Cache flushed.\nPlease check backend logs for more details. (When there are "
                           "running or waiting requests, the operation will not be performed.)\n", "text/plain")
            elif path == "/generate" and method in ("POST", "PUT"):
                self._generate(self._body())
            elif path == "/v1/chat/completions" and method == "POST":
                self._chat(self._body())
            elif path == "/v1/completions" and method == "POST":
                self._completion(self._body())
            else:
                self._send(404, {"detail": "Not Found"})
        except BadRequest as exc:
            self._send(400, {"error": {"message": str(exc)}})
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _generate(self, body: dict):
        api = self.api
        prompts, max_new, batched = api.generate_inputs(body)
        # return_logprob: SGLang's default logprob_start_len (-1) asks for the output's logprobs only.
        start = body.get("logprob_start_len", -1) if body.get("return_logprob") else -1
        start = None if not isinstance(start, int) or isinstance(start, bool) or start < 0 else start
        requests = [api.run(ids, count, logprob_start_len=start) for ids, count in zip(prompts, max_new)]
        if body.get("stream"):
            self._stream(requests[0], lambda request, _sent: api.generate_result(request))
            return
        for request in requests:
            api.wait(request)
        errors = [request.error for request in requests if request.error]
        if errors:
            self._send(400, {"error": {"message": errors[0]}})
            return
        results = [api.generate_result(request) for request in requests]
        self._send(200, results if batched else results[0])

    def _openai(self, body: dict, prompt: list, chat: bool):
        api = self.api
        request = api.run(prompt, api.chat_max_tokens(body))
        created = int(time.time())
        ident = uuid.uuid4().hex
        kind = "chat.completion" if chat else "text_completion"
        if body.get("stream"):
            def chunk(req, sent):
                text = detokenize(req.output_ids[sent:])
                choice = {"index": 0, "finish_reason": "length" if req.done else None}
                choice.update({"delta": {"role": "assistant", "content": text}} if chat else {"text": text})
                return {"id": ident, "object": kind + ".chunk" if chat else kind, "created": created,
                        "model": api.args.served_model_name, "choices": [choice]}
            self._stream(request, chunk)
            return
        api.wait(request)
        if request.error:
            self._send(400, {"object": "error", "message": request.error, "type": "BadRequestError", "code": 400})
            return
        text = detokenize(request.output_ids)
        choice = {"index": 0, "logprobs": None, "finish_reason": "length", "matched_stop": None}
        choice.update({"message": {"role": "assistant", "content": text, "reasoning_content": None,
                                   "tool_calls": None}} if chat else {"text": text})
        usage = {"prompt_tokens": request.input_len, "total_tokens": request.input_len + len(request.output_ids),
                 "completion_tokens": len(request.output_ids), "prompt_tokens_details": None}
        self._send(200, {"id": ident, "object": kind, "created": created, "model": api.args.served_model_name,
                         "choices": [choice], "usage": usage})

    def _chat(self, body: dict):
        self._openai(body, self.api.chat_prompt(body), True)

    def _completion(self, body: dict):
        prompt = body.get("prompt")
        ids = prompt if isinstance(prompt, list) and prompt and isinstance(prompt[0], int) else tokenize(str(prompt))
        self._openai(body, ids, False)

    def _stream(self, request: Request, chunk_of):
        """Server-sent events: one chunk per scheduler step that produced tokens, then ``data: [DONE]``."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        sent = 0
        while True:
            with request.changed:
                while len(request.output_ids) == sent and not request.done:
                    request.changed.wait(1.0)
                done, count = request.done, len(request.output_ids)
            if request.error:
                self._chunk({"error": {"message": request.error}})
                break
            if count > sent or done:
                self._chunk(chunk_of(request, sent))
                sent = count
            if done:
                break
        self._chunk(None)
        self.wfile.write(b"0\r\n\r\n")
        self._access(200)

    def _chunk(self, payload):
        data = ("data: %s\n\n" % ("[DONE]" if payload is None else json.dumps(payload))).encode()
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()


def serve(process):
    """Bind --host/--port (after the schedulers are ready, as SGLang does), warm up, serve until the end."""
    for replica in process.plan.replicas:
        for dp_rank in replica.schedulers:
            process.schedulers.append(Scheduler(process.plan, replica, dp_rank, process.log, process))
    for scheduler in process.schedulers:
        scheduler.start()
    args = process.args
    handler = type("SimHandler", (Handler,), {"api": Api(process)})
    try:
        httpd = _HttpServer((args.host, args.port), handler)
    except OSError as exc:
        process.log.record("", "ERROR:    [Errno %s] error while attempting to bind on address ('%s', %d): %s"
                           % (exc.errno, args.host, args.port, (exc.strerror or str(exc)).lower()))
        process.state.clear()
        os._exit(1)  # pylint: disable=protected-access
    signal.signal(signal.SIGTERM, process.shutdown)
    signal.signal(signal.SIGINT, process.shutdown)
    log = process.log
    for line in ("Started server process [%d]" % os.getpid(), "Waiting for application startup.",
                 "Application startup complete.",
                 "Uvicorn running on http://%s:%d (Press CTRL+C to quit)" % (args.host, args.port)):
        log.record("", "INFO:     " + line)
    local = "127.0.0.1" if args.host in ("0.0.0.0", "::", "") else args.host
    threading.Thread(target=_warmup, args=(process, "http://%s:%d" % (local, args.port)), daemon=True).start()
    httpd.serve_forever()


class _DummyHandler(_Methods):
    """launch_dummy_health_check_server's app: /health, /health_generate and /ping answer 200 with no body; any
    other path is FastAPI's 404 (405 for another method on a health path)."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):  # pylint: disable=redefined-builtin
        """uvicorn runs at log level warning there: no access lines."""

    _PATHS = ("/health", "/health_generate", "/ping")

    def _route(self, method: str):
        length = int(self.headers.get("Content-Length") or 0)
        if length > 0:
            self.rfile.read(length)
        path = self.path.split("?")[0]
        if path in self._PATHS and method == "GET":
            status, body = 200, b""
        elif path in self._PATHS:
            status, body = 405, b'{"detail":"Method Not Allowed"}'
        else:
            status, body = 404, b'{"detail":"Not Found"}'
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        if body:
            self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)


def serve_node(process):
    """A node of --node-rank > 0: no tokenizer, no API; once its schedulers are ready SGLang starts a dummy health
    check server on --host/--port and waits on the schedulers (_launch_subprocesses)."""
    args = process.args
    try:
        httpd = _HttpServer((args.host, args.port), _DummyHandler)
    except OSError as exc:
        process.log.record("", "ERROR:    [Errno %s] error while attempting to bind on address ('%s', %d): %s"
                           % (exc.errno, args.host, args.port, (exc.strerror or str(exc)).lower()))
        process.state.clear()
        os._exit(1)  # pylint: disable=protected-access
    signal.signal(signal.SIGTERM, process.stop_node)
    signal.signal(signal.SIGINT, process.stop_node)
    process.status = "Up"
    process.log.record("", "Starting dummy health check server at %s:%d" % (args.host, args.port))
    httpd.serve_forever()


def _warmup(process, base_url):
    try:
        warmup(process, base_url)
    except OSError as exc:
        process.log.record("", "Initialization failed. warmup error: %s" % exc)
        process.fatal()


def warmup(process, base_url: str):
    """SGLang's _wait_and_warmup: GET /model_info, then one generation of 8 tokens; then ready
    (--skip-server-warmup: ready at once)."""
    args = process.args
    if args.skip_server_warmup:
        process.status = "Up"
        process.log.record("", "The server is fired up and ready to roll!")
        return
    headers = {"Content-Type": "application/json"}
    if args.api_key:
        headers["Authorization"] = "Bearer " + args.api_key
    for _attempt in range(120):
        try:
            probe = urllib.request.Request(base_url + "/model_info", headers=headers)
            with _LOCAL_OPENER.open(probe, timeout=5) as response:
                response.read()
            break
        except OSError:
            time.sleep(0.1)
    if process.model.is_multimodal:
        path = "/v1/chat/completions"
        body = {"model": args.served_model_name, "messages": [{"role": "user", "content": "Describe the image."}],
                "max_tokens": 8, "stream": False, "temperature": 0.0}
    else:
        path = "/generate"
        text = "The capital city of France is"
        body = {"sampling_params": {"temperature": 0, "max_new_tokens": 8},
                "text": text if args.dp_size == 1 else [text] * args.dp_size}
    request = urllib.request.Request(base_url + path, data=json.dumps(body).encode(), headers=headers)
    with _LOCAL_OPENER.open(request, timeout=600) as response:
        response.read()
    process.status = "Up"
    process.log.record("", "The server is fired up and ready to roll!")

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""metrics: /metrics as prometheus_client parses it (tests/fixtures/metrics, sources in SOURCES.md), a number out of
its range, and what a server answers over HTTP (a redirect, an error, too much or too slowly), none of which reaches
the state file but the numbers."""
from __future__ import annotations

import contextlib
import http.server
import os
import stat
import threading
import time
from pathlib import Path

import pytest

from ansible_collections.llmserve.sglang.plugins.module_utils.watch import journal, metrics, store
from ansible_collections.llmserve.sglang.tests.unit.plugins.module_utils.watch.watch_standins import (
    Host,
    METRICS,
    RETRACT,
    _watcher,
)

FIXTURES = Path(__file__).resolve().parents[4] / "fixtures" / "metrics"


def fixture(name):
    return (FIXTURES / name).read_text()


def test_the_multiprocess_exposition_of_sglang_0_5_9_gives_rank_0s_gauges_and_the_counter():
    values = metrics.parse_metrics(fixture("prometheus_client_0.26_sglang_0.5.9_multiprocess.txt"))
    assert values == {"token_usage": 0.87, "used_tokens": 87000, "pool_tokens": 100000, "running": None,
                      "queue": None, "retracted": 3}


def test_an_older_sglang_with_model_name_only_is_read_and_what_it_lacks_is_none():
    values = metrics.parse_metrics(fixture("sglang_docs_shape_model_name_only.txt"))
    assert values == {"token_usage": 0.31, "used_tokens": 123859, "running": 41, "queue": 7, "pool_tokens": None,
                      "retracted": None}


def _gauge(name, samples):
    lines = ["# TYPE %s gauge" % name]
    lines += ["%s{%s} %s" % (name, ",".join('%s="%s"' % item for item in labels.items()), value)
              for labels, value in samples]
    return "\n".join(lines) + "\n"


def test_other_ranks_are_left_out_and_dp_replicas_are_combined():
    text = (_gauge("sglang:token_usage", [({"tp_rank": "0", "dp_rank": "0"}, 0.5), ({"tp_rank": "0", "dp_rank": "1"}, 0.93),
                                          ({"tp_rank": "1", "dp_rank": "0"}, 0.99)])
            + _gauge("sglang:num_running_reqs", [({"tp_rank": "0", "dp_rank": "0"}, 3), ({"tp_rank": "0", "dp_rank": "1"}, 4)])
            + _gauge("sglang:max_total_num_tokens", [({"tp_rank": "0", "dp_rank": "0"}, 1000), ({"tp_rank": "0", "dp_rank": "1"}, 990)])
            + "# TYPE sglang:num_retracted_requests counter\n"
              'sglang:num_retracted_requests_total{tp_rank="0"} 5\nsglang:num_retracted_requests_total{tp_rank="1"} 5\n')
    values = metrics.parse_metrics(text)
    assert (values["token_usage"], values["running"], values["pool_tokens"], values["retracted"]) == (0.93, 7, 990, 5)


@pytest.mark.parametrize("text, why", [
    ("<html><body>502 Bad Gateway</body></html>", "not in Prometheus' text format"),
    ('sglang:token_usage{model_name="x} 0.5\n', "not in Prometheus' text format"),
    ("# TYPE vllm:gpu_cache_usage_perc gauge\nvllm:gpu_cache_usage_perc 0.5\n", "no sglang:token_usage"),
    ("", "no sglang:token_usage"),
])
def test_a_text_that_is_not_sglangs_metrics_is_an_error_that_says_what_came(text, why):
    with pytest.raises(metrics.MetricsError, match=why):
        metrics.parse_metrics(text)


@pytest.mark.parametrize("metric, value", [
    ("sglang:num_retracted_requests_total", "1e400"),      # a float that overflows: inf
    ("sglang:num_used_tokens", "1e308"),                    # finite, but two replicas' sum overflows
    ("sglang:max_total_num_tokens", "-5"),
    ("sglang:num_running_reqs", "1e13"),
    ("sglang:token_usage", "1e400"),
    ("sglang:token_usage", "NaN"),
    ("sglang:token_usage", "-0.5"),
])
def test_a_number_out_of_range_on_metrics_is_an_unreadable_sample_never_the_end_of_the_watch(tmp_path, metric, value):
    host = Host()
    # Two DP replicas of TP rank 0 (one for the usage, which replaces the usual one).
    host.metrics_text = "".join(line + "\n" for line in (METRICS % (0.5, 1)).splitlines()
                                if metric != "sglang:token_usage" or not line.startswith("sglang:token_usage"))
    host.metrics_text += "".join('%s{tp_rank="0",dp_rank="%d"} %s\n' % (metric, rank, value)
                                 for rank in ((0,) if metric == "sglang:token_usage" else (0, 1)))
    watcher = _watcher(tmp_path, host)
    for now in range(4):
        watcher.step(now)
    record = store.read_records(str(tmp_path / "windows.jsonl"))[0][0]
    assert record["errors"] == {"metrics": 4} and record["serving_samples"] == 0
    assert record["peaks"] == {} and record["pool_tokens"] is None and record["retractions"] == 0
    assert record["last_error"].startswith("metrics: /metrics has %s out of range [" % metric)
    with pytest.raises(metrics.MetricsError, match="%s out of range" % metric):
        metrics.parse_metrics(host.metrics_text)


def test_the_largest_numbers_in_range_are_read():
    text = (METRICS % (1.0, metrics.MAX_COUNT)).replace("} 1000\n", "} %d\n" % metrics.MAX_COUNT)
    values = metrics.parse_metrics(text)
    assert (values["token_usage"], values["pool_tokens"], values["retracted"]) == (1.0, metrics.MAX_COUNT, metrics.MAX_COUNT)
    assert journal.journal_counts([RETRACT % metrics.MAX_COUNT]) == (1, metrics.MAX_COUNT, 0, 0)


@contextlib.contextmanager
def http_server(answer):
    """A server on 127.0.0.1 whose every GET is ``answer(handler)``; yields (its URL, the paths it was asked for)."""
    asked = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # pylint: disable=invalid-name
            asked.append(self.path)
            answer(self)

        def log_message(self, *_args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads, server.block_on_close = True, False
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    try:
        yield "http://127.0.0.1:%d" % server.server_address[1], asked
    finally:
        server.shutdown()
        server.server_close()


def _send(handler, status, body=b"", headers=(), reason=None):
    handler.send_response(status, reason)
    for name, value in headers:
        handler.send_header(name, value)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


SECRET = "AKIA-SECRET-OF-THE-METADATA-SERVICE"


GOOD = ('# TYPE sglang:token_usage gauge\nsglang:token_usage{tp_rank="0"} 0.5\n# HELP x %s\n' % SECRET).encode()


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_a_redirect_from_metrics_is_not_followed_and_is_an_unreadable_sample(status):
    # The server would choose where the watch sends a request (a cloud's metadata service, another host's port).
    with http_server(lambda handler: _send(handler, 200, GOOD)) as (elsewhere, asked_elsewhere):
        with http_server(lambda handler: _send(handler, status, headers=[("Location", elsewhere + "/latest")])) as (
                url, _asked):
            with pytest.raises(metrics.MetricsError) as error:
                metrics.fetch_metrics(url + "/metrics")
    assert asked_elsewhere == []
    assert str(error.value) == "/metrics answered HTTP %d, a redirect: not followed" % status
    assert "latest" not in str(error.value)


def test_what_the_server_writes_in_an_error_is_not_repeated():
    def bad_status(handler):
        handler.wfile.write(("HTTP/1.1 %s\r\n\r\n" % SECRET).encode())

    with http_server(lambda handler: _send(handler, 500, SECRET.encode(), reason=SECRET)) as (url, _asked):
        with pytest.raises(metrics.MetricsError) as error:
            metrics.fetch_metrics(url + "/metrics")
    assert str(error.value) == "/metrics answered HTTP 500"
    with http_server(bad_status) as (url, _asked):
        with pytest.raises(metrics.MetricsError) as error:
            metrics.fetch_metrics(url + "/metrics")
    assert SECRET not in str(error.value) and str(error.value).startswith("/metrics cannot be read")


def test_metrics_are_read_up_to_a_size_and_a_time():
    with http_server(lambda handler: _send(handler, 200, GOOD)) as (url, asked):
        assert metrics.fetch_metrics(url + "/metrics") == GOOD.decode() and asked == ["/metrics"]
    with http_server(lambda handler: _send(handler, 200, b"#" * (metrics.MAX_METRICS_BYTES + 1))) as (url, _asked):
        with pytest.raises(metrics.MetricsError, match="more than 4194304 bytes"):
            metrics.fetch_metrics(url + "/metrics")

    def drip(handler):
        handler.send_response(200)
        handler.end_headers()
        try:
            for _tick in range(30):
                handler.wfile.write(b"# a comment a tenth of a second\n")
                handler.wfile.flush()
                time.sleep(0.1)
        except (BrokenPipeError, ConnectionResetError):
            pass            # the watch gave up, as it should

    with http_server(drip) as (url, _asked):
        started = time.monotonic()
        with pytest.raises(metrics.MetricsError, match="took more than 1 s"):
            metrics.fetch_metrics(url + "/metrics", timeout=1)
        assert time.monotonic() - started < 2.5
    with pytest.raises(metrics.MetricsError, match="must be an http:// or https:// URL"):
        metrics.fetch_metrics("file:///etc/shadow")


@pytest.mark.parametrize("text", [
    "<html><body>%s</body></html>" % SECRET,                                           # not Prometheus' format
    'sglang:token_usage{tp_rank="0"} %s\n' % SECRET,                                    # a value that is not a number
    "# TYPE %s gauge\n%s 1\n" % (SECRET.replace("-", "_"), SECRET.replace("-", "_")),   # no sglang:token_usage
])
def test_nothing_the_server_answers_reaches_the_state_file_but_the_numbers(tmp_path, text):
    # The state file is 0644 (a capacity report may run as a user that is not root): what the server answers must
    # not reach it, nor the watch's journal, only the numbers a window needs and the watch's own words.
    host, said = Host(), []
    host.metrics_text = text
    watcher = _watcher(tmp_path, host, said)
    for now in range(4):
        watcher.step(now)
    written = (tmp_path / "windows.jsonl").read_text()
    assert SECRET not in written and SECRET.replace("-", "_") not in written
    assert not any(SECRET in line or SECRET.replace("-", "_") in line for line in said)
    record = store.read_records(str(tmp_path / "windows.jsonl"))[0][0]
    assert record["errors"] == {"metrics": 4} and record["last_error"].startswith("metrics: /metrics ")
    assert stat.S_IMODE(os.stat(tmp_path / "windows.jsonl").st_mode) == 0o644

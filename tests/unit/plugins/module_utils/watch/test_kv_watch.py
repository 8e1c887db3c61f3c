# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""kv_watch: /metrics as prometheus_client parses it (tests/fixtures/metrics, sources in SOURCES.md), the windows the
watch folds its samples into, the bounded state file, the watcher's loop against scripted sources (a server that
restarts, garbage on /metrics, a full disk) and the verdict on the windows since a pin."""
from __future__ import annotations

import contextlib
import errno
import http.server
import json
import os
import stat
import threading
import time
from pathlib import Path

import pytest

from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner import run_settings
from ansible_collections.llmserve.sglang.plugins.module_utils.watch import kv_watch as kw

FIXTURES = Path(__file__).resolve().parents[4] / "fixtures" / "metrics"
GIB = 2 ** 30


def fixture(name):
    return (FIXTURES / name).read_text()


# --- /metrics ----------------------------------------------------------------------------------------------------------

def test_the_multiprocess_exposition_of_sglang_0_5_9_gives_rank_0s_gauges_and_the_counter():
    values = kw.parse_metrics(fixture("prometheus_client_0.26_sglang_0.5.9_multiprocess.txt"))
    assert values == {"token_usage": 0.87, "used_tokens": 87000, "pool_tokens": 100000, "running": None,
                      "queue": None, "retracted": 3}


def test_an_older_sglang_with_model_name_only_is_read_and_what_it_lacks_is_none():
    values = kw.parse_metrics(fixture("sglang_docs_shape_model_name_only.txt"))
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
    values = kw.parse_metrics(text)
    assert (values["token_usage"], values["running"], values["pool_tokens"], values["retracted"]) == (0.93, 7, 990, 5)


@pytest.mark.parametrize("text, why", [
    ("<html><body>502 Bad Gateway</body></html>", "not in Prometheus' text format"),
    ('sglang:token_usage{model_name="x} 0.5\n', "not in Prometheus' text format"),
    ("# TYPE vllm:gpu_cache_usage_perc gauge\nvllm:gpu_cache_usage_perc 0.5\n", "no sglang:token_usage"),
    ("", "no sglang:token_usage"),
])
def test_a_text_that_is_not_sglangs_metrics_is_an_error_that_says_what_came(text, why):
    with pytest.raises(kw.MetricsError, match=why):
        kw.parse_metrics(text)


def test_the_journal_lines_of_retractions_and_ooms_are_counted():
    lines = ["[2026-12-05 10:00:01 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 3, #new_token_ratio: 0.7",
             "[2026-12-05 10:00:02 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 1",
             "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
             "Decode batch. #running-req: 12"]
    assert kw.journal_counts(lines) == (2, 4, 1, 0)


RETRACT = "KV cache pool is full. Retract requests. #retracted_reqs: %s"


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
    record = kw.read_records(str(tmp_path / "windows.jsonl"))[0][0]
    assert record["errors"] == {"metrics": 4} and record["serving_samples"] == 0
    assert record["peaks"] == {} and record["pool_tokens"] is None and record["retractions"] == 0
    assert record["last_error"].startswith("metrics: /metrics has %s out of range [" % metric)
    with pytest.raises(kw.MetricsError, match="%s out of range" % metric):
        kw.parse_metrics(host.metrics_text)


@pytest.mark.parametrize("count", [str(10 ** 400), "9" * 5000, "1" + "0" * 12 + "1"])
def test_a_journal_line_with_a_huge_count_is_left_out_and_counted_never_the_end_of_the_verdict(tmp_path, count):
    lines = [RETRACT % count, RETRACT % 2, "torch.OutOfMemoryError: CUDA out of memory."]
    assert kw.journal_counts(lines) == (1, 2, 1, 1)
    watcher = _watcher(tmp_path, Host())
    for now in range(4):
        watcher.step(now)
    records = kw.read_records(str(tmp_path / "windows.jsonl"))[0]
    record = kw.attach_journal(records, [(1.5, line) for line in lines])[0]
    assert (record["retract_lines"], record["retracted_logged"], record["oom_lines"]) == (1, 2, 1)
    assert record["errors"] == {"journal": 1}


def test_the_largest_numbers_in_range_are_read():
    text = (METRICS % (1.0, kw.MAX_COUNT)).replace("} 1000\n", "} %d\n" % kw.MAX_COUNT)
    values = kw.parse_metrics(text)
    assert (values["token_usage"], values["pool_tokens"], values["retracted"]) == (1.0, kw.MAX_COUNT, kw.MAX_COUNT)
    assert kw.journal_counts([RETRACT % kw.MAX_COUNT]) == (1, kw.MAX_COUNT, 0, 0)


@pytest.mark.parametrize("argv, value", [
    (["python3", "-m", "sglang.launch_server", "--mem-fraction-static", "0.915"], 0.915),
    (["python3", "--mem-fraction-static=0.9"], 0.9),
    (["python3", "--port", "30000"], None),
    (["python3", "--mem-fraction-static"], None),
])
def test_the_running_value_is_read_from_the_command_line(argv, value):
    assert kw.fraction_of_argv(argv) == value


# --- what the server answers on /metrics ---------------------------------------------------------------------------

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
            with pytest.raises(kw.MetricsError) as error:
                kw.fetch_metrics(url + "/metrics")
    assert asked_elsewhere == []
    assert str(error.value) == "/metrics answered HTTP %d, a redirect: not followed" % status
    assert "latest" not in str(error.value)


def test_what_the_server_writes_in_an_error_is_not_repeated():
    def bad_status(handler):
        handler.wfile.write(("HTTP/1.1 %s\r\n\r\n" % SECRET).encode())

    with http_server(lambda handler: _send(handler, 500, SECRET.encode(), reason=SECRET)) as (url, _asked):
        with pytest.raises(kw.MetricsError) as error:
            kw.fetch_metrics(url + "/metrics")
    assert str(error.value) == "/metrics answered HTTP 500"
    with http_server(bad_status) as (url, _asked):
        with pytest.raises(kw.MetricsError) as error:
            kw.fetch_metrics(url + "/metrics")
    assert SECRET not in str(error.value) and str(error.value).startswith("/metrics cannot be read")


def test_metrics_are_read_up_to_a_size_and_a_time():
    with http_server(lambda handler: _send(handler, 200, GOOD)) as (url, asked):
        assert kw.fetch_metrics(url + "/metrics") == GOOD.decode() and asked == ["/metrics"]
    with http_server(lambda handler: _send(handler, 200, b"#" * (kw.MAX_METRICS_BYTES + 1))) as (url, _asked):
        with pytest.raises(kw.MetricsError, match="more than 4194304 bytes"):
            kw.fetch_metrics(url + "/metrics")

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
        with pytest.raises(kw.MetricsError, match="took more than 1 s"):
            kw.fetch_metrics(url + "/metrics", timeout=1)
        assert time.monotonic() - started < 2.5
    with pytest.raises(kw.MetricsError, match="must be an http:// or https:// URL"):
        kw.fetch_metrics("file:///etc/shadow")


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
    record = kw.read_records(str(tmp_path / "windows.jsonl"))[0][0]
    assert record["errors"] == {"metrics": 4} and record["last_error"].startswith("metrics: /metrics ")
    assert stat.S_IMODE(os.stat(tmp_path / "windows.jsonl").st_mode) == 0o644


# --- windows -----------------------------------------------------------------------------------------------------------

def _gpu(index, free_gib, others_gib=0.0, total_gib=80.0):
    return {"index": index, "free_bytes": int(free_gib * GIB), "total_bytes": int(total_gib * GIB),
            "others_bytes": int(others_gib * GIB)}


def test_a_window_keeps_the_least_free_memory_while_serving_and_per_band_of_usage():
    window = kw.Window("sglang.service", 1000.0, 5)
    window.add(gpus=[_gpu(0, 0.4), _gpu(1, 0.3)], metrics=None, invocation="a")        # starting: not counted
    window.add(gpus=[_gpu(0, 2.0), _gpu(1, 1.5, others_gib=0.5)],
               metrics={"token_usage": 0.95, "used_tokens": 950, "running": 8, "queue": 1, "pool_tokens": 1000},
               invocation="a", value=0.91, retracted_since=2)
    window.add(gpus=[_gpu(0, 1.2), _gpu(1, 1.8)], metrics={"token_usage": 0.6, "pool_tokens": 1000}, invocation="a")
    record = window.record(1300.0)
    assert (record["least_free_gib"], record["least_free_gpu"], record["usage_at_least_free"]) == (1.2, 0, 0.6)
    assert record["bands"]["0.95"] == {"seconds": 5, "least_free_gib": 1.5, "gpu": 1}
    assert record["bands"]["0.6"] == {"seconds": 10, "least_free_gib": 1.2, "gpu": 0}
    assert record["gpus"]["1"] == {"least_free_gib": 1.5, "usage_then": 0.95, "total_gib": 80.0,
                                   "others_peak_gib": 0.5}
    assert (record["samples"], record["serving_samples"]) == (3, 2)
    assert record["peaks"] == {"token_usage": 0.95, "used_tokens": 950, "running": 8, "queue": 1}
    assert (record["value"], record["pool_tokens"], record["retractions"]) == (0.91, 1000, 2)
    assert record["retract_lines"] == record["oom_lines"] == 0   # the journal is root's to read, not the watch's


# --- the state file ----------------------------------------------------------------------------------------------------

def test_the_state_file_keeps_a_bounded_number_of_windows(tmp_path):
    path = str(tmp_path / "windows.jsonl")
    for end in range(1, 31):
        kw.append_records(path, [{"v": 1, "start": end - 1, "end": end}], keep=20)
    records, bad = kw.read_records(path)
    assert bad == [] and 20 <= len(records) <= 22 and records[-1]["end"] == 30
    assert [record["end"] for record in kw.read_records(path, since=27)[0]] == [28, 29, 30]


def test_lines_that_are_not_windows_are_reported_not_read(tmp_path):
    path = tmp_path / "windows.jsonl"
    path.write_text('{"v": 1, "start": 4, "end": 5}\nnot json\n{"v": 2, "end": 6}\n' + "x" * 20000 + "\n")
    records, bad = kw.read_records(str(path))
    assert records == [{"v": 1, "start": 4, "end": 5}]
    assert [line.split(":")[0] for line in bad] == ["line 2", "line 3", "line 4"]
    assert "not a window of this watch" in bad[1] and "longer than" in bad[2]


BROKEN = [  # (what is changed in a window since the pin, what the reader says)
    ({"start": None}, "no start"),
    ({"start": "1970-01-01"}, "start is not a time"),
    ({"end": float("inf")}, "end is not a time"),
    ({"end": 1e300}, "end is not a time"),
    ({"end": 0.0}, "end is before start"),
    ({"value": "0.9"}, "value is not a fraction or null"),
    ({"retractions": "3"}, "retractions is not a count"),
    ({"retracted_logged": 1e400}, "retracted_logged is not a count"),
    ({"oom_lines": True}, "oom_lines is not a count"),
    ({"oom_lines": -1}, "oom_lines is not a count"),
    ({"invocations": 5}, "invocations is not a list of texts"),
    ({"invocations": [1]}, "invocations is not a list of texts"),
    ({"least_free_gib": "0.2"}, "least_free_gib is not a number or null"),
    ({"usage_at_least_free": [0.9]}, "usage_at_least_free is not a number or null"),
    ({"least_free_gpu": {}}, "least_free_gpu is not a GPU or null"),
    ({"gpus": []}, "gpus is not an object of GPUs"),
    ({"gpus": {"3": {"total_gib": "80"}}}, "gpus is not an object of GPUs"),
    ({"bands": {"0.9": 5}}, "bands is not an object of bands"),
    ({"bands": {"0.9": {"seconds": "all"}}}, "bands is not an object of bands"),
    ({"peaks": "high"}, "peaks is not an object of numbers"),
    ({"errors": {"metrics": "many"}}, "errors is not an object of counts"),
    ({"last_error": 5}, "last_error is not a text or null"),
    ({"unit": None}, "unit is not a text"),
]


@pytest.mark.parametrize("change, why", BROKEN, ids=[why for _change, why in BROKEN])
def test_a_line_whose_fields_are_not_a_windows_is_reported_and_named_never_a_crash(tmp_path, change, why):
    records = _day(1.9)
    broken = dict(records[5], **change)
    if change == {"start": None}:
        del broken["start"]
    path = tmp_path / "windows.jsonl"
    path.write_text("".join(json.dumps(record) + "\n" for record in records[:5] + [broken] + records[6:]))
    found, bad = kw.read_records(str(path))
    result = kw.verdict(PIN, found)            # root's reader: a verdict on the other windows, never a traceback
    assert bad == ["line 6: not a window of this watch: %s" % why]
    assert len(found) == 23 and result["verdict"] == "not_enough_traffic"


def test_every_window_the_watch_writes_is_one_the_reader_takes(tmp_path):
    host = Host()
    watcher = _watcher(tmp_path, host)
    for now in range(8):
        watcher.step(now)
    host.invocation = None
    for now in range(8, 12):
        watcher.step(now)
    records, bad = kw.read_records(str(tmp_path / "windows.jsonl"))
    assert len(records) == 3 and bad == []


def test_a_window_of_a_crash_looping_server_stays_under_the_line_limit_and_its_restarts_count(tmp_path):
    # A server that restarts every sample: every start's InvocationID, an OOM line each, a long error.
    window = kw.Window("sglang.service", PIN["time"] + 10, 0.5)
    for start in range(600):
        window.add(gpus=[_gpu(index, 30.0) for index in range(8)], metrics={"token_usage": 0.95},
                   invocation="%032x" % start, value=0.9)
    window.error("unit", "x" * 100000)
    path = str(tmp_path / "windows.jsonl")
    kw.append_records(path, [window.record(PIN["time"] + 310)], keep=10)
    records, bad = kw.read_records(path)
    assert bad == [] and len(records) == 1
    assert len(Path(path).read_bytes()) <= kw.MAX_LINE_BYTES
    record = records[0]
    assert record["invocation_count"] == 600 and record["invocations"][-1] == "%032x" % 599
    assert len(record["last_error"]) <= 300 and record["errors"] == {"unit": 1}
    assert kw.verdict(PIN, records)["evidence"]["restarts"] == 599


def test_the_restarts_of_windows_that_kept_only_their_last_starts_are_counted():
    records = [_window(PIN["time"] + 3600, least_full=3.5, invocations=["a", "b"], invocation_count=40),
               _window(PIN["time"] + 7200, least_full=3.5, invocations=["b", "c"], invocation_count=2)]
    assert kw.verdict(PIN, records)["evidence"]["restarts"] == 40      # a..b and 38 more, then c


def test_a_window_of_more_gpus_than_a_line_holds_keeps_its_figures_without_the_per_gpu_entries(tmp_path):
    window = kw.Window("sglang.service", PIN["time"] + 10, 5)
    window.add(gpus=[_gpu(index, 30.0 + index) for index in range(300)], metrics={"token_usage": 0.95},
               invocation="a", value=0.9)
    record = window.record(PIN["time"] + 310)
    assert len(json.dumps(record, sort_keys=True, separators=(",", ":"))) <= kw.MAX_LINE_BYTES
    assert record["gpus"] == {} and record["least_free_gib"] == 30.0 and record["errors"] == {"size": 1}
    assert record["last_error"] == "size: 300 GPUs are more than a line of 16384 bytes holds: their entries left out"


def test_lines_left_out_are_counted_and_named_in_the_verdict():
    result = kw.verdict(PIN, _day(3.5), unreadable=["line 14: longer than 16384 bytes", "line 20: not JSON (x)"])
    assert result["verdict"] == "headroom" and result["evidence"]["unreadable_lines"] == 2
    assert result["reasons"][-1] == ("2 line(s) of the watch's state file could not be read and are left out of this "
                                     "verdict (line 14: longer than 16384 bytes)")
    assert kw.verdict(PIN, _day(3.5))["evidence"]["unreadable_lines"] == 0


def test_a_missing_file_is_no_windows_and_a_link_a_fifo_or_a_huge_file_is_refused(tmp_path, monkeypatch):
    assert kw.read_records(str(tmp_path / "none.jsonl")) == ([], [])
    os.symlink("/etc/shadow", str(tmp_path / "link.jsonl"))
    with pytest.raises(kw.WatchError, match="cannot open"):
        kw.read_records(str(tmp_path / "link.jsonl"))
    os.mkfifo(str(tmp_path / "fifo.jsonl"))        # opened without blocking, then refused
    with pytest.raises(kw.WatchError, match="not a regular file"):
        kw.read_records(str(tmp_path / "fifo.jsonl"))
    (tmp_path / "big.jsonl").write_text('{"v": 1, "end": 5}\n' * 10)
    monkeypatch.setattr(kw, "MAX_STATE_BYTES", 100)
    with pytest.raises(kw.WatchError, match="more than the 100 a watch writes"):
        kw.read_records(str(tmp_path / "big.jsonl"))


# --- the watcher's loop ------------------------------------------------------------------------------------------------

METRICS = ('# TYPE sglang:token_usage gauge\nsglang:token_usage{tp_rank="0"} %s\n'
           '# TYPE sglang:max_total_num_tokens gauge\nsglang:max_total_num_tokens{tp_rank="0"} 1000\n'
           '# TYPE sglang:num_retracted_requests counter\nsglang:num_retracted_requests_total{tp_rank="0"} %d\n')


class Host:
    """Scripted sources: what each call answers is the current state, which the test changes between steps."""

    def __init__(self):
        self.invocation, self.unit_pids, self.usage, self.retracted, self.free = "a", {101, 102}, 0.95, 0, 1.5
        self.metrics_text = None
        self.trial = False

    def unit(self):
        return None if self.invocation is None else {"invocation": self.invocation, "main_pid": 101,
                                                     "control_group": "/system.slice/sglang.service",
                                                     "trial": self.trial}

    def pids(self, _group):
        return set(self.unit_pids)

    def argv(self, _pid):
        return ["python3", "-m", "sglang.launch_server", "--mem-fraction-static", "0.9"]

    def metrics(self):
        if self.metrics_text is not None:
            return self.metrics_text
        return METRICS % (self.usage, self.retracted)

    def gpus(self):
        def gpu(index, processes):
            return {"index": index, "memory_free_bytes": int(self.free * GIB), "memory_total_bytes": 80 * GIB,
                    "compute_processes": processes}
        return [gpu(0, [{"pid": 101, "used_memory_bytes": 70 * GIB}]),
                gpu(1, [{"pid": 102, "used_memory_bytes": 70 * GIB}, {"pid": 999, "used_memory_bytes": 2 * GIB}]),
                gpu(2, [{"pid": 500, "used_memory_bytes": 9 * GIB}])]   # another server's GPU


def _watcher(tmp_path, host, said=None):
    return kw.Watcher("sglang.service", host, str(tmp_path / "windows.jsonl"), interval=1, window=3, keep=100,
                      log=(said.append if said is not None else None))


def test_the_watcher_follows_the_unit_through_a_restart_and_counts_only_increases(tmp_path):
    host = Host()
    watcher = _watcher(tmp_path, host)
    for now, retracted in ((0, 10), (1, 13)):
        host.retracted = retracted
        watcher.step(now)
    host.invocation, host.retracted = "b", 1      # restarted: the counter starts again
    watcher.step(2)
    host.retracted = 4
    watcher.step(3)
    records, _bad = kw.read_records(str(tmp_path / "windows.jsonl"))
    assert len(records) == 1
    record = records[0]
    assert (record["retractions"], record["invocations"]) == (6, ["a", "b"])
    assert sorted(record["gpus"]) == ["0", "1"] and record["gpus"]["1"]["others_peak_gib"] == 2.0
    assert record["value"] == 0.9 and record["bands"]["0.9"]["least_free_gib"] == 1.5


def test_garbage_on_metrics_is_counted_and_said_once_and_the_watch_goes_on(tmp_path):
    host, said = Host(), []
    watcher = _watcher(tmp_path, host, said)
    host.metrics_text = "<html>oops</html>"
    for now in range(4):
        watcher.step(now)
    host.metrics_text = None
    for now in range(4, 8):
        watcher.step(now)
    first, second = kw.read_records(str(tmp_path / "windows.jsonl"))[0]
    assert first["errors"] == {"metrics": 4} and first["serving_samples"] == 0 and first["least_free_gib"] is None
    assert "not in Prometheus' text format" in first["last_error"]
    assert second["errors"] == {} and second["serving_samples"] == 4
    assert len([line for line in said if "/metrics cannot be read" in line]) == 1


def test_a_server_that_is_down_gives_samples_without_memory_verdicts(tmp_path):
    host = Host()
    host.invocation = None
    watcher = _watcher(tmp_path, host)
    for now in range(4):
        watcher.step(now)
    record = kw.read_records(str(tmp_path / "windows.jsonl"))[0][0]
    assert (record["samples"], record["serving_samples"], record["least_free_gib"]) == (4, 0, None)


def test_a_full_disk_keeps_the_windows_in_memory_until_they_can_be_written(tmp_path, monkeypatch):
    host, said = Host(), []
    watcher = _watcher(tmp_path, host, said)
    real = kw.append_records

    def full(*_args, **_kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(kw, "append_records", full)
    for now in range(8):
        watcher.step(now)
    assert len(watcher.pending) == 2 and not (tmp_path / "windows.jsonl").exists()
    assert len(said) == 1 and "No space left on device" in said[0] and "kept in memory until it can" in said[0]
    monkeypatch.setattr(kw, "append_records", real)
    for now in range(8, 12):
        watcher.step(now)
    assert len(kw.read_records(str(tmp_path / "windows.jsonl"))[0]) == 3 and watcher.pending == []
    assert said[-1].endswith("written again, with the 3 window(s) kept meanwhile")


# --- the verdict -------------------------------------------------------------------------------------------------------

PIN = {"mem_fraction_static": 0.9, "time": 1000.0, "settings": {"safety_gib": 1.0, "resolution": 0.005}}


def _window(end, least_full=None, least=None, full_seconds=3600.0, value=0.9, **extra):
    full = {"seconds": full_seconds, "least_free_gib": least_full, "gpu": 3}
    record = {"v": 1, "start": end - 3600, "end": end, "value": value,
              "least_free_gib": least if least is not None else least_full, "least_free_gpu": 3,
              "usage_at_least_free": 0.97, "bands": {"0.9": full, "0.95": full},
              "gpus": {"3": {"total_gib": 80.0, "others_peak_gib": 0.0}}, "peaks": {"token_usage": 0.97},
              "invocations": ["a"]}
    record.update(extra)
    return record


def _day(least_full, **extra):
    return [_window(PIN["time"] + (hour + 1) * 3600, least_full=least_full, **extra) for hour in range(24)]


def test_a_window_begun_before_the_pin_is_the_tuners_own_load_and_does_not_count():
    # The trial's stress load fills the pool at the value then pinned; a window that spans the commit holds it.
    straddling = dict(_window(PIN["time"] + 2, least_full=1.1), start=PIN["time"] - 1)
    result = kw.verdict(PIN, [straddling])
    assert result["verdict"] == "not_enough_traffic" and result["evidence"]["windows"] == 0, result
    assert kw.verdict(PIN, [straddling] + _day(3.5))["evidence"]["windows"] == 24


def test_memory_under_the_margin_is_a_near_miss_with_where_and_when():
    records = _day(2.0)
    records[5] = _window(records[5]["end"], least_full=2.0, least=0.62)
    result = kw.verdict(PIN, records)
    assert result["verdict"] == "near_miss"
    assert "0.62 GiB on GPU 3" in result["reasons"][0] and "under the pin's margin of 1.00 GiB" in result["reasons"][0]


@pytest.mark.parametrize("extra, reason", [
    ({"oom_lines": 1}, "1 out-of-memory line(s)"),
    ({"retractions": 25}, "a retraction storm: 25 request(s)"),
    ({"retracted_logged": 30}, "a retraction storm: 30 request(s)"),
])
def test_an_oom_or_a_retraction_storm_is_a_near_miss_whatever_the_free_memory(extra, reason):
    records = _day(5.0)
    records[3].update(extra)
    result = kw.verdict(PIN, records)
    assert result["verdict"] == "near_miss" and reason in result["reasons"][0]


def test_a_day_at_a_full_pool_with_spare_steps_is_headroom_and_proposes_a_value():
    result = kw.verdict(PIN, _day(3.5))
    # one step is 0.005 x 80 GiB = 0.4 GiB; 2.5 GiB over the margin is 6 steps.
    assert result["verdict"] == "headroom"
    assert (result["evidence"]["spare_steps"], result["evidence"]["proposed_value"]) == (6, 0.93)
    assert "the pin could go up to 0.93" in result["reasons"][0]


def test_spare_memory_within_the_headroom_steps_is_ok():
    result = kw.verdict(PIN, _day(1.9))
    assert result["verdict"] == "ok" and result["evidence"]["spare_steps"] == 2


def test_a_pool_that_was_never_full_long_enough_is_not_enough_traffic_not_a_proposal():
    result = kw.verdict(PIN, _day(30.0, full_seconds=60.0))
    assert result["verdict"] == "not_enough_traffic"
    assert "for 0.40 h of the 24.00 h needed" in result["reasons"][0]
    short = kw.verdict(PIN, [_window(5000.0, least_full=2.0, full_seconds=42.0)], headroom_hours=0.05)
    assert "for 42 s of the 180 s needed" in short["reasons"][0]
    assert kw.verdict(PIN, [])["verdict"] == "not_enough_traffic"


def test_windows_before_the_pin_or_at_another_value_are_not_the_pins():
    records = [_window(900.0, least_full=0.1), _window(5000.0, least_full=0.1, value=0.93)] + _day(1.5)
    result = kw.verdict(PIN, records)
    assert result["verdict"] == "ok" and result["evidence"]["windows"] == 24


def test_the_pins_time_is_the_tuners_utc_text():
    assert kw.pin_time("2026-12-05T10:00:00Z") == 1796464800.0
    records = _day(1.9)
    assert kw.verdict(dict(PIN, time="1970-01-01T00:16:40Z"), records)["evidence"]["windows"] == 24
    with pytest.raises(kw.WatchError, match="the pin's time"):
        kw.verdict(dict(PIN, time="yesterday"), records)


def test_a_pin_without_its_margin_is_an_error():
    with pytest.raises(kw.WatchError, match="safety_gib"):
        kw.verdict({"mem_fraction_static": 0.9, "time": 1.0, "settings": {}}, [])


def test_records_are_json():
    window = kw.Window("sglang.service", 0.0, 5)
    window.add(gpus=[_gpu(0, 1.0)], metrics={"token_usage": 0.95})
    assert json.loads(json.dumps(window.record(5.0)))["bands"]["0.9"]["least_free_gib"] == 1.0


def test_a_full_usage_that_is_not_a_band_is_refused():
    with pytest.raises(kw.WatchError, match="full_usage must be one of the watch's bands 0.5, 0.6"):
        kw.verdict(PIN, _day(1.9), full_usage=0.85)
    assert kw.verdict(PIN, _day(1.9, full_seconds=3600.0), full_usage=0.95)["verdict"] == "ok"


# --- what the watch asks of the tuner ----------------------------------------------------------------------------------

def test_a_near_miss_lowers_by_the_missing_memory_in_whole_steps():
    records = _day(2.0)
    records[5] = _window(records[5]["end"], least_full=2.0, least=0.25)
    result = kw.verdict(PIN, records)
    # 0.75 GiB missing, 0.4 GiB a step: 2 steps, 0.9 -> 0.89.
    assert (result["evidence"]["lower_steps"], result["evidence"]["lower_to"]) == (2, 0.89)
    asked = kw.decision(result, PIN)
    assert asked["lower_to"] == 0.89 and "lowering the pin 2 step(s) to 0.89" in asked["retune"]


def test_an_oom_lowers_two_steps_at_least_and_a_storm_alone_is_only_said():
    records = _day(5.0)
    records[3]["oom_lines"] = 1
    for record in records[4:]:     # the unit started again after it: systemd's word, not the server's
        record["invocations"] = ["b"]
    assert kw.decision(kw.verdict(PIN, records), PIN)["lower_to"] == 0.89
    records = _day(5.0)
    records[3]["retractions"] = 40
    asked = kw.decision(kw.verdict(PIN, records), PIN)
    assert asked["retune"] is None and "not lowered: a smaller pool would retract more" in asked["proposal"]


def test_headroom_is_a_proposal_unless_the_action_is_act():
    result = kw.verdict(PIN, _day(3.5))
    assert kw.decision(result, PIN)["retune"] is None
    assert "kv_tune_watch_action=act would search from the pin" in kw.decision(result, PIN)["proposal"]
    assert kw.decision(result, PIN, action="act")["retune"].startswith("headroom under real traffic")
    assert kw.decision(kw.verdict(PIN, _day(1.9)), PIN, action="act") == {"retune": None, "lower_to": None,
                                                                          "proposal": None}


def test_a_pool_smaller_than_the_verified_one_is_a_reason_whatever_the_traffic():
    pin = dict(PIN, tokens=200000)
    asked = kw.decision(None, pin, pool_tokens=188000)
    assert asked["retune"] == ("the pool came back 6% smaller at the same value (188000 tokens, verified 200000): "
                               "something else holds memory")
    assert kw.decision(None, pin, pool_tokens=197000)["retune"] is None      # within 2%


def test_the_running_pool_is_the_last_windows_of_the_same_start_and_recent():
    records = [dict(_window(1000.0), pool_tokens=1234, invocations=["a", "b"])]
    assert kw.current_pool(records, "b", now=1100.0) == 1234
    assert kw.current_pool(records, "c", now=1100.0) is None          # another start
    assert kw.current_pool(records, "b", now=1000.0 + 4 * 3600) is None   # an old window
    assert kw.current_pool([], "b", now=1.0) is None


# --- the settings ------------------------------------------------------------------------------------------------------

def test_headroom_hours_0_is_refused_not_a_crash_of_the_probe():
    # A day at a full pool whose GPUs could not be read: no least free memory at a full pool.
    records = _day(None)
    with pytest.raises(kw.WatchError) as error:
        kw.verdict(PIN, records, headroom_hours=0)
    assert str(error.value) == ("headroom_hours must lie in [0.0005, 8760] hours (got 0): a verdict needs some time at "
                                "a full pool (a test host's 1.8 s at least), and a year at most.")


def test_a_full_pool_whose_memory_was_never_read_is_not_enough_traffic_not_a_crash():
    result = kw.verdict(PIN, _day(None))
    assert result["verdict"] == "not_enough_traffic"
    assert result["reasons"] == ["the pool was at a token usage of 0.90 or more for 24.00 h, but no GPU's memory was "
                                 "read then: nothing to judge the headroom by"]


def test_a_pool_tolerance_below_0_is_refused_not_a_retune_of_a_pin_that_holds():
    pin = dict(PIN, tokens=200000)
    with pytest.raises(kw.WatchError, match=r"pool_tolerance must lie in \[0, 0.5\] of the verified pool \(got -0.5\)"):
        kw.decision(None, pin, pool_tokens=200000, pool_tolerance=-0.5)
    assert kw.decision(None, pin, pool_tokens=200000, pool_tolerance=0)["retune"] is None


def test_keep_0_is_refused_where_the_state_file_would_grow_without_bound(tmp_path):
    with pytest.raises(kw.WatchError, match=r"keep must lie in \[1, 20160\] windows \(got 0\)"):
        kw.Watcher("sglang.service", Host(), str(tmp_path / "windows.jsonl"), interval=1, window=3, keep=0)
    with pytest.raises(kw.WatchError, match=r"keep must lie in \[1, 20160\] windows \(got 0\)"):
        kw.append_records(str(tmp_path / "windows.jsonl"), [{"v": 1}], keep=0)
    assert not (tmp_path / "windows.jsonl").exists()


@pytest.mark.parametrize("name, value, message", [
    ("headroom_hours", 0, "kv_tune_watch_headroom_hours must lie in [0.0005, 8760] hours (got 0)"),
    ("headroom_hours", 1e9, "kv_tune_watch_headroom_hours must lie in [0.0005, 8760] hours (got 1e+09)"),
    ("headroom_hours", float("nan"), "kv_tune_watch_headroom_hours must be finite"),
    ("headroom_hours", "lots", "kv_tune_watch_headroom_hours must be a number, got 'lots'"),
    ("headroom_steps", -1, "kv_tune_watch_headroom_steps must lie in [0, 100] grid steps (got -1)"),
    ("headroom_steps", 2.5, "kv_tune_watch_headroom_steps must be an integer"),
    ("storm_retractions", 0, "kv_tune_watch_storm_retractions must lie in [1, 1000000] requests (got 0)"),
    ("pool_tolerance", -0.5, "kv_tune_watch_pool_tolerance must lie in [0, 0.5] of the verified pool (got -0.5)"),
    ("pool_tolerance", 1, "kv_tune_watch_pool_tolerance must lie in [0, 0.5] of the verified pool (got 1)"),
    ("interval", 0.001, "kv_tune_watch_interval must lie in [1, 300] seconds (got 0.001)"),
    ("window", 1e9, "kv_tune_watch_window must lie in [1, 86400] seconds (got 1e+09)"),
    ("keep", 0, "kv_tune_watch_keep must lie in [1, 20160] windows (got 0)"),
    ("keep", True, "kv_tune_watch_keep must be a number, got True"),
    ("recent", -1, "kv_tune_watch_recent must lie in [0, 20160] windows (got -1)"),
    ("full_usage", 0.85, "kv_tune_watch_full_usage must be one of the watch's bands 0.5, 0.6, 0.7, 0.8, 0.9, 0.95"),
    ("action", "maybe", "kv_tune_watch_action must be one of propose, act (got 'maybe')"),
    ("headroom", 1, "kv_tune_watch_headroom is not a setting of the headroom watch"),
])
def test_every_setting_out_of_its_range_is_refused_with_its_name_and_range(name, value, message):
    with pytest.raises(kw.WatchError) as error:
        kw.check_settings({name: value}, prefix="kv_tune_watch_")
    assert message in str(error.value)


def test_a_window_shorter_than_the_interval_is_refused():
    with pytest.raises(kw.WatchError, match=r"--window \(5\) must not be shorter than --interval \(10\)"):
        kw.check_settings({"interval": 10, "window": 5, "keep": 10}, prefix="--")


@pytest.mark.parametrize("name", sorted(kw.BOUNDS))
def test_each_bound_of_the_watch_itself_is_accepted(name):
    low, high = kw.BOUNDS[name][:2]
    for value in (low, high, str(high)):
        assert kw.check_settings({name: value})[name] == float(value)


def test_the_tuner_refuses_a_watch_setting_out_of_range_before_anything_runs():
    settings = {"unit": "sglang.service", "start": None, "cap": 0.98, "resolution": 0.005, "safety_gib": 1.0,
                "budget": 6, "min_tokens": None, "force": False, "ready_timeout": 1800, "ready_interval": 5,
                "stress_fill_ratio": 0.95, "stress_duration": 120, "confirm_timeout": 2640}
    watch = {"action": "propose", "full_usage": 0.9, "headroom_hours": 24, "headroom_steps": 2,
             "storm_retractions": 20, "pool_tolerance": 0.02}
    assert run_settings.check_settings(dict(settings, watch=watch))["watch"]["headroom_hours"] == 24.0
    with pytest.raises(run_settings.TuneError) as error:
        run_settings.check_settings(dict(settings, watch=dict(watch, pool_tolerance=-0.5)))
    assert str(error.value).startswith("Invalid input for llmserve.sglang.kv_tune: kv_tune_watch_pool_tolerance must "
                                       "lie in [0, 0.5] of the verified pool (got -0.5)")
    with pytest.raises(run_settings.TuneError, match="kv_tune_watch_headroom_hours must lie in"):
        run_settings.check_settings(dict(settings, watch=dict(watch, headroom_hours="0")))
    with pytest.raises(run_settings.TuneError, match="the headroom watch's settings must be a dictionary"):
        run_settings.check_settings(dict(settings, watch="yes"))


def test_the_watch_unit_and_state_file_of_a_server():
    assert kw.watch_unit("sglang@a.service") == "llmserve-kv-watch-sglang-a.service"
    assert kw.state_path("sglang.service") == "/var/lib/llmserve-kv-watch-sglang/windows.jsonl"
    with pytest.raises(kw.WatchError):
        kw.watch_unit("../etc.service/x")


@pytest.mark.parametrize("where", ["same window", "next window"])
def test_an_oom_line_counts_only_with_the_units_restart_after_it(where):
    # issue 32, item 7: a prompt holding "CUDA out of memory", logged with --log-requests, lowered a pin two steps
    # (0.885 -> 0.875) with no memory ever short; the served process writes its own journal
    records = _day(5.0)
    records[3]["oom_lines"] = 2
    result = kw.verdict(PIN, records)
    assert result["verdict"] == "near_miss" and result["evidence"]["claimed_only"]
    assert result["reasons"] == ["2 out-of-memory line(s) in the server's journal since the pin with no restart of "
                                 "the unit after them: claimed by the log only (the server can print anything), not "
                                 "acted on"]
    asked = kw.decision(result, PIN)
    assert asked["retune"] is None and asked["lower_to"] is None
    assert asked["proposal"].startswith("a near miss claimed by the server's journal (2 out-of-memory line(s)")
    # the same lines with the unit's own restart after them: a near miss acted on
    if where == "same window":
        records[3]["invocations"] = ["a", "b"]
    else:
        records[4]["invocations"] = ["b"]
    result = kw.verdict(PIN, records)
    assert result["evidence"]["oom_lines_after_restart"] == 2 and not result["evidence"].get("claimed_only")
    assert "each followed by a restart of the unit" in result["reasons"][0]
    assert kw.decision(result, PIN)["lower_to"] == 0.89


def test_claimed_lines_beside_a_measured_shortfall_are_said_and_do_not_add_steps():
    records = _day(2.0)
    records[5] = _window(records[5]["end"], least_full=2.0, least=0.85, oom_lines=3)
    result = kw.verdict(PIN, records)
    # 0.15 GiB missing: one step, not the two an OOM after which the unit restarted would take
    assert result["evidence"]["lower_steps"] == 1 and "claimed by the log only" in result["reasons"][-1]


def test_headroom_never_asks_to_go_back_to_a_value_that_missed_under_real_traffic():
    # issue 32, item 7b: after a near miss lowered 0.885 -> 0.840, 7 s of plain traffic took it straight back
    result = kw.verdict(PIN, _day(3.5))
    lowered = dict(PIN, fingerprint_hash="H1", missed=0.905)
    asked = kw.decision(result, lowered, action="act")
    assert asked["retune"] is None
    assert asked["proposal"].endswith("but 0.905 missed under real traffic on this fingerprint: the pin stays below it")
    # two steps below the miss, one step up is still below it: the search may go (the tuner caps it below the miss)
    assert kw.decision(result, dict(lowered, missed=0.91), action="act")["retune"].startswith("headroom under real")
    assert kw.missed_value(lowered, "H1") == 0.905
    assert kw.missed_value(lowered, "H2") is None and kw.missed_value(PIN, "H1") is None


def test_a_window_that_saw_a_trial_is_the_tuners_load_never_production(tmp_path):
    # issue 32, item 6: a later run's trial at the pin's value died under the tuner's load and was reverted (the
    # pin's time unchanged); the watch read that window as a near miss in real traffic and the next run lowered the
    # pin 0.885 -> 0.845
    host = Host()
    watcher = _watcher(tmp_path, host)
    host.free = 0.2                       # the tuner's load: under the margin
    host.trial = True                     # its drop-in loaded (systemd's DropInPaths)
    for now in range(0, 4):
        watcher.step(now)
    host.trial, host.free, host.invocation = False, 3.0, "c"   # reverted: the pin's start again, real traffic
    for now in range(4, 8):
        watcher.step(now)
    records, bad = kw.read_records(str(tmp_path / "windows.jsonl"))
    assert not bad and [record["trial_samples"] for record in records] == [4, 0]
    pin = dict(PIN, time=0.0)
    result = kw.verdict(pin, records, headroom_hours=0.0005)
    assert result["verdict"] != "near_miss" and result["evidence"]["trial_windows"] == 1, result
    assert result["evidence"]["windows"] == 1 and result["evidence"]["least_free_gib"] == 3.0
    # the same windows without the trial's mark: the near miss the issue saw
    unmarked = [dict(record, trial_samples=0) for record in records]
    assert kw.verdict(pin, unmarked, headroom_hours=0.0005)["verdict"] == "near_miss"


def test_root_counts_the_servers_journal_lines_in_the_window_each_fell_in():
    # issue 32, item 4: the watch read the unit's whole journal, where SGLang's server_args carry the API key; root
    # now reads the OOM and retraction lines (journalctl --grep, short-unix) and counts them into the windows
    text = ("-- No entries --\n"
            "1000.5 gpu1 python3[4242]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
            "1004.2 gpu1 python3[4242]: [TP0] KV cache pool is full. Retract requests. #retracted_reqs: 3\n"
            "1006.0 gpu1 python3[4242]: [TP0] KV cache pool is full. Retract requests. #retracted_reqs: 2\n"
            "2000.0 gpu1 python3[4242]: torch.OutOfMemoryError: CUDA out of memory.\n")
    events = kw.journal_events(text)
    assert events[0] == (1000.5, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.")
    windows = [{"start": 1000.0, "end": 1003.0, "interval": 1, "oom_lines": 7},
               {"start": 1004.0, "end": 1007.0, "interval": 1}]
    counted = kw.attach_journal(windows, events)
    assert [(w["oom_lines"], w["retract_lines"], w["retracted_logged"]) for w in counted] == [(1, 0, 0), (0, 2, 5)]
    assert windows[0]["oom_lines"] == 7                   # the records given are not changed
    assert kw.attach_journal([], events) == [] and kw.journal_events("") == []
    # the watch's own unit has no access to the journal any more
    unit = Path(__file__).resolve().parents[5] / "roles" / "sglang_service" / "templates" / "kv-watch.service.j2"
    assert "systemd-journal" not in "".join(line for line in unit.read_text().splitlines() if not line.startswith("#"))


def test_a_repin_keeps_the_evidence_only_where_it_changes_nothing_the_windows_describe():
    pin = {"mem_fraction_static": 0.9, "fingerprint_hash": "H1", "tokens": 100000, "time": "2026-12-01T00:00:00Z"}
    assert kw.same_pin(pin, dict(pin, tokens=101000, time="later"))       # the same value, pool and fingerprint
    # a pool that came back smaller (memory held elsewhere: its windows are another picture), another value or
    # fingerprint, or no pin: the windows start again from the new pin
    for changes in ({"tokens": 90000}, {"mem_fraction_static": 0.905}, {"fingerprint_hash": "H2"}, {"tokens": None}):
        assert not kw.same_pin(pin, dict(pin, **changes)), changes
    assert not kw.same_pin(None, pin) and not kw.same_pin(dict(pin, time=None), pin)

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""SGLang's Prometheus ``/metrics`` as the headroom watch reads it: one bounded GET (:func:`fetch_metrics`) and the
numbers the watch keeps (:func:`parse_metrics`: TP rank 0's gauges, the retraction counter), through
prometheus_client's own text parser; a text without them is an error, never a guess.

Stdlib only (prometheus_client is imported by :func:`parse_metrics` when it is called); the only I/O is the GET.

The server is not trusted: it can answer /metrics with anything. No redirect is followed (it would choose where the
watch sends a request), and nothing it wrote reaches the state file or the watch's journal: only the numbers a window
needs, and the watch's own words for what went wrong.
"""
from __future__ import annotations

import http.client
import math
import time
import urllib.error
import urllib.request
from typing import Any

from ansible_collections.llmserve.sglang.plugins.module_utils.host.lazy_opener import LazyOpener

GAUGES = {
    "sglang:token_usage": "token_usage",
    "sglang:num_used_tokens": "used_tokens",
    "sglang:num_running_reqs": "running",
    "sglang:num_queue_reqs": "queue",
    "sglang:max_total_num_tokens": "pool_tokens",
}
RETRACTED = "sglang:num_retracted_requests_total"
# The largest count the watch reads (tokens, requests, retractions): far beyond any pool or batch. A number of the
# server's over it, or not finite, is not a measurement: the sample (or the journal line) is unreadable, and no sum
# of the watch can overflow.
MAX_COUNT = 10 ** 12
# The range of each watched number of /metrics: token usage is a share of the pool (a little over 1 is rounding).
RANGES = dict({name: (0, MAX_COUNT) for name in GAUGES if name != "sglang:token_usage"},
              **{"sglang:token_usage": (0, 2), RETRACTED: (0, MAX_COUNT)})

# The most the watch reads of one /metrics answer (SGLang's is a few KiB; a multiprocess one with histograms, tens).
MAX_METRICS_BYTES = 4 * 2 ** 20
# Seconds one GET of /metrics may take in all (the socket's timeout is per read: a server could drip bytes forever).
METRICS_TIMEOUT = 5.0


class MetricsError(ValueError):
    """/metrics answered something the watch does not read as SGLang's metrics; the message says what."""


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is an unreadable answer, never followed: the server would choose where the watch sends a request
    (a cloud's metadata service, another host), and what came back would be the watch's."""

    # pylint: disable-next=unused-argument,too-many-arguments
    def _refuse(self, req: Any, fp: Any, code: int, msg: str, headers: Any) -> None:
        fp.close()
        raise MetricsError("/metrics answered HTTP %d, a redirect: not followed" % code)

    http_error_301 = http_error_302 = http_error_303 = http_error_307 = http_error_308 = _refuse


# No proxy from the environment either: /metrics is the server's own port on this host.
_OPENER = LazyOpener(urllib.request.ProxyHandler({}), _NoRedirect)


def _os_words(exc: object) -> str:
    """What went wrong in the watch's own words: an OS error's text, else the exception's kind (the message of an
    http.client error quotes what the server sent)."""
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return type(exc).__name__


def fetch_metrics(url: str, timeout: float = METRICS_TIMEOUT) -> str:
    """The text of one GET of the server's /metrics at ``url`` (http or https), at most MAX_METRICS_BYTES within
    ``timeout`` seconds. Raises MetricsError, in the watch's own words (the status, never the server's text), on a
    redirect, any other HTTP error, an answer too long or too slow, or a connection that fails."""
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise MetricsError("the watch's /metrics must be an http:// or https:// URL")
    deadline = time.monotonic() + timeout
    chunks, size = [], 0
    try:
        with _OPENER.open(url, timeout=timeout) as answer:
            while True:
                chunk = answer.read1(65536)     # what has come, not a wait for 64 KiB
                if not chunk:
                    break
                size += len(chunk)
                if size > MAX_METRICS_BYTES:
                    raise MetricsError("/metrics answered more than %d bytes" % MAX_METRICS_BYTES)
                if time.monotonic() > deadline:
                    raise MetricsError("/metrics took more than %g s to answer" % timeout)
                chunks.append(chunk)
    except MetricsError:
        raise
    except urllib.error.HTTPError as exc:
        raise MetricsError("/metrics answered HTTP %d" % exc.code) from None
    except urllib.error.URLError as exc:
        raise MetricsError("/metrics cannot be reached: %s" % _os_words(exc.reason)) from None
    except (OSError, ValueError, http.client.HTTPException) as exc:
        raise MetricsError("/metrics cannot be read: %s" % _os_words(exc)) from None
    return b"".join(chunks).decode("utf-8", "replace")


def _rank0(labels: dict[str, str]) -> bool:
    """A sample of TP rank 0 (SGLang's scheduler gauges are rank 0's; a counter may come from every rank alike)."""
    return labels.get("tp_rank", "0") == "0" and labels.get("pp_rank", "0") == "0"


def parse_metrics(text: str, parser: Any = None) -> dict[str, Any]:
    """The watched numbers of one /metrics answer: token_usage, used_tokens, running, queue and pool_tokens (the
    fullest DP replica's usage, the others summed over replicas, the pool of the smallest) and retracted (the
    counter's total, None where this SGLang has none). ``parser`` is prometheus_client.parser (imported here when
    None). Raises MetricsError on a text prometheus_client cannot parse or one without sglang:token_usage."""
    if parser is None:
        try:
            from prometheus_client import parser as prometheus_parser  # pylint: disable=import-outside-toplevel
        except ImportError as exc:
            raise MetricsError("cannot read /metrics: prometheus_client is not installed (%s)" % exc)
        parser = prometheus_parser
    found, families = _watched_samples(text, parser)
    if "sglang:token_usage" not in found:
        raise MetricsError("/metrics has no sglang:token_usage of TP rank 0 (%d bytes, %d metric families)"
                           % (len(text), families))
    values: dict[str, Any] = {}
    for name, key in GAUGES.items():
        numbers = found.get(name)
        if not numbers:
            values[key] = None
        elif key == "token_usage":
            values[key] = max(numbers)
        elif key == "pool_tokens":
            values[key] = int(min(numbers))
        else:
            values[key] = int(sum(numbers))
    retracted = found.get(RETRACTED)
    values["retracted"] = int(sum(retracted)) if retracted else None
    return values


def _watched_samples(text: str, parser: Any) -> tuple[dict[str, list[float]], int]:
    """({name: [the values of TP rank 0's samples]} of the watched metrics of ``text``, the metric families read).
    Raises MetricsError on a value out of its range (RANGES) or a text that is not Prometheus' format."""
    found: dict[str, list[float]] = {}
    families = 0
    try:
        for family in parser.text_string_to_metric_families(text):
            families += 1
            for sample in family.samples:
                name = sample.name
                if (name in GAUGES or name == RETRACTED) and _rank0(sample.labels):
                    value = float(sample.value)
                    low, high = RANGES[name]
                    if not (math.isfinite(value) and low <= value <= high):
                        # The value itself is the server's: not repeated.
                        raise MetricsError("/metrics has %s out of range [%g, %g]" % (name, low, high))
                    found.setdefault(name, []).append(value)
    except MetricsError:
        raise
    except (ValueError, TypeError, IndexError, KeyError) as exc:
        # The parser's message quotes the line: the server's text, which the watch does not repeat.
        raise MetricsError("/metrics is not in Prometheus' text format (%s after %d metric families)"
                           % (type(exc).__name__, families)) from None
    return found, families

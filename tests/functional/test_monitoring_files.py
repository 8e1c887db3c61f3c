# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The monitoring files (monitoring/): every llmserve_kv_* series their alerts and panels ask for is one the watch
writes (module_utils/watch/exposition.py), and every sglang:* one is a metric the watch reads of SGLang's /metrics
(metrics.py: names read in the 0.5.9 and 0.5.23 wheels). A renamed metric is an alert that never fires, silently.
What the rules do is `make monitoring`'s (promtool test rules)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from ansible_collections.llmserve.sglang.plugins.module_utils.watch import exposition, metrics

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "monitoring" / "prometheus" / "llmserve-kv.rules.yml"
DASHBOARD = REPO / "monitoring" / "grafana" / "llmserve-kv-headroom.json"
NAME = re.compile(r"\b(llmserve_kv_[a-z_]+|sglang:[a-z_]+)")
KNOWN = {exposition.PREFIX + name for name in exposition.METRICS} | set(metrics.GAUGES) | {metrics.RETRACTED}


def expressions(node):
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("expr", "query", "definition") and isinstance(value, str):
                yield value
            else:
                yield from expressions(value)
    elif isinstance(node, list):
        for item in node:
            yield from expressions(item)


def test_every_series_the_alerts_ask_for_is_written_by_the_watch():
    rules = yaml.safe_load(RULES.read_text(encoding="utf-8"))["groups"][0]["rules"]
    used = {name for rule in rules for name in NAME.findall(rule["expr"])}
    assert used and used <= KNOWN, used - KNOWN
    assert {rule["alert"] for rule in rules} == {"LlmserveKvNearMiss", "LlmserveKvPoolSmallerThanVerified",
                                                 "LlmserveKvWatchStale", "LlmserveKvWatchDown",
                                                 "LlmserveKvHeadroomHeld"}


def test_every_series_of_the_dashboard_is_the_watchs_or_sglangs_own():
    dashboard = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    used = {name for expr in expressions(dashboard) for name in NAME.findall(expr)}
    assert {"sglang:token_usage", "sglang:num_retracted_requests_total", "llmserve_kv_verdict"} <= used
    assert used <= KNOWN, used - KNOWN
    assert len({panel["id"] for panel in dashboard["panels"]}) == len(dashboard["panels"])

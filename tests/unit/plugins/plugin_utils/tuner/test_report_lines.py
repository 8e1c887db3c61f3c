# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""tuner/report_lines.py: the lines and rows a tune reports."""
from __future__ import annotations

from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner import report_lines
from ansible_collections.llmserve.sglang.tests.unit.plugins.plugin_utils.tuner.tuner_standins import FP


PIN = {"mem_fraction_static": 0.91, "fingerprint_hash": "H", "fingerprint": FP, "tokens": 202389,
       "time": "2026-11-30T10:00:00Z", "settings": {"resolution": 0.005}}


def test_unchanged_line():
    assert report_lines.unchanged_line("h1", "sglang.service", PIN) == (
        "h1: sglang.service keeps 0.910 (202,389 KV tokens), pinned 2026-11-30T10:00:00Z: fingerprint unchanged.")


def test_summary_rows_tell_a_later_batch_from_a_failed_host():
    rows = report_lines.summary_rows({"a": {"status": "unchanged", "pin": PIN}, "b": None, "c": None}, pending={"a", "c"})
    assert [row["status"] for row in rows] == ["unchanged",
                                               "not tuned: failed or unreachable, left on its last-known-good value",
                                               "not tuned: its batch has not run"]
    assert rows[2]["line"].startswith("c: NOT STARTED")


def test_the_restarts_each_kind_of_tune_spent():
    rows = [{"status": "tuned", "restarts": 2, "search": "search"}, {"status": "tuned", "restarts": 1, "search": "verified"},
            {"status": "tuned", "restarts": 1, "search": "verified"}, {"status": "tuned", "restarts": 3, "search": "fallback"},
            {"status": "unchanged", "restarts": 0}, {"status": "not tuned: its batch has not run"}]
    assert report_lines.restarts_line(rows) == ("restarts: 7 in all (failed verifications and searches 3 on 1 host, "
                                                "searches 2 on 1 host, verifications 2 on 2 hosts)")
    assert report_lines.restarts_line([]) == "restarts: 0 in all"

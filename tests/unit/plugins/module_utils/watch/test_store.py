# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""store: the bounded state file, and the reader that names every line that is not a window."""
from __future__ import annotations

import json
import os

import pytest

from ansible_collections.llmserve.sglang.plugins.module_utils.watch import settings as watch_settings
from ansible_collections.llmserve.sglang.plugins.module_utils.watch import store
from ansible_collections.llmserve.sglang.plugins.module_utils.watch.verdict import verdict
from ansible_collections.llmserve.sglang.tests.unit.plugins.module_utils.watch.watch_standins import (
    PIN,
    _day,
)


def test_the_state_file_keeps_a_bounded_number_of_windows(tmp_path):
    path = str(tmp_path / "windows.jsonl")
    for end in range(1, 31):
        store.append_records(path, [{"v": 1, "start": end - 1, "end": end}], keep=20)
    records, bad = store.read_records(path)
    assert bad == [] and 20 <= len(records) <= 22 and records[-1]["end"] == 30
    assert [record["end"] for record in store.read_records(path, since=27)[0]] == [28, 29, 30]


def test_lines_that_are_not_windows_are_reported_not_read(tmp_path):
    path = tmp_path / "windows.jsonl"
    path.write_text('{"v": 1, "start": 4, "end": 5}\nnot json\n{"v": 2, "end": 6}\n' + "x" * 20000 + "\n")
    records, bad = store.read_records(str(path))
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
    found, bad = store.read_records(str(path))
    result = verdict(PIN, found)            # root's reader: a verdict on the other windows, never a traceback
    assert bad == ["line 6: not a window of this watch: %s" % why]
    assert len(found) == 23 and result["verdict"] == "not_enough_traffic"


def test_a_missing_file_is_no_windows_and_a_link_a_fifo_or_a_huge_file_is_refused(tmp_path, monkeypatch):
    assert store.read_records(str(tmp_path / "none.jsonl")) == ([], [])
    os.symlink("/etc/shadow", str(tmp_path / "link.jsonl"))
    with pytest.raises(watch_settings.WatchError, match="cannot open"):
        store.read_records(str(tmp_path / "link.jsonl"))
    os.mkfifo(str(tmp_path / "fifo.jsonl"))        # opened without blocking, then refused
    with pytest.raises(watch_settings.WatchError, match="not a regular file"):
        store.read_records(str(tmp_path / "fifo.jsonl"))
    (tmp_path / "big.jsonl").write_text('{"v": 1, "end": 5}\n' * 10)
    monkeypatch.setattr(store, "MAX_STATE_BYTES", 100)
    with pytest.raises(watch_settings.WatchError, match="more than the 100 a watch writes"):
        store.read_records(str(tmp_path / "big.jsonl"))

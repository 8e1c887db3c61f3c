# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""journal: the server's OOM and retraction lines, as root reads them, counted into the windows each fell in."""
from __future__ import annotations

from pathlib import Path

import pytest

from ansible_collections.llmserve.sglang.plugins.module_utils.watch import journal, store
from ansible_collections.llmserve.sglang.tests.unit.plugins.module_utils.watch.watch_standins import (
    Host,
    RETRACT,
    _watcher,
)


def test_the_journal_lines_of_retractions_and_ooms_are_counted():
    lines = ["[2026-12-05 10:00:01 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 3, #new_token_ratio: 0.7",
             "[2026-12-05 10:00:02 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 1",
             "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
             "Decode batch. #running-req: 12"]
    assert journal.journal_counts(lines) == (2, 4, 1, 0)


@pytest.mark.parametrize("count", [str(10 ** 400), "9" * 5000, "1" + "0" * 12 + "1"])
def test_a_journal_line_with_a_huge_count_is_left_out_and_counted_never_the_end_of_the_verdict(tmp_path, count):
    lines = [RETRACT % count, RETRACT % 2, "torch.OutOfMemoryError: CUDA out of memory."]
    assert journal.journal_counts(lines) == (1, 2, 1, 1)
    watcher = _watcher(tmp_path, Host())
    for now in range(4):
        watcher.step(now)
    records = store.read_records(str(tmp_path / "windows.jsonl"))[0]
    record = journal.attach_journal(records, [(1.5, line) for line in lines])[0]
    assert (record["retract_lines"], record["retracted_logged"], record["oom_lines"]) == (1, 2, 1)
    assert record["errors"] == {"journal": 1}


def test_root_counts_the_servers_journal_lines_in_the_window_each_fell_in():
    # issue 32, item 4: the watch read the unit's whole journal, where SGLang's server_args carry the API key; root
    # now reads the OOM and retraction lines (journalctl --grep, short-unix) and counts them into the windows
    text = ("-- No entries --\n"
            "1000.5 gpu1 python3[4242]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
            "1004.2 gpu1 python3[4242]: [TP0] KV cache pool is full. Retract requests. #retracted_reqs: 3\n"
            "1006.0 gpu1 python3[4242]: [TP0] KV cache pool is full. Retract requests. #retracted_reqs: 2\n"
            "2000.0 gpu1 python3[4242]: torch.OutOfMemoryError: CUDA out of memory.\n")
    events = journal.journal_events(text)
    assert events[0] == (1000.5, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.")
    windows = [{"start": 1000.0, "end": 1003.0, "interval": 1, "oom_lines": 7},
               {"start": 1004.0, "end": 1007.0, "interval": 1}]
    counted = journal.attach_journal(windows, events)
    assert [(w["oom_lines"], w["retract_lines"], w["retracted_logged"]) for w in counted] == [(1, 0, 0), (0, 2, 5)]
    assert windows[0]["oom_lines"] == 7                   # the records given are not changed
    assert journal.attach_journal([], events) == [] and journal.journal_events("") == []
    # the watch's own unit has no access to the journal any more
    unit = Path(__file__).resolve().parents[5] / "roles" / "sglang_service" / "templates" / "kv-watch.service.j2"
    assert "systemd-journal" not in "".join(line for line in unit.read_text().splitlines() if not line.startswith("#"))

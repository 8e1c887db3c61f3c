# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the two fleet summaries share: the hosts that have not had their turn, the registered results, the file."""
from __future__ import annotations

import json

from ansible_collections.llmserve.sglang.plugins.plugin_utils import report_files

# A play of four hosts in serial batches: a done in an earlier batch, b in this batch, c dropped (unreachable), d
# in a later batch; e is taken by a later play.
TASK_VARS = {"ansible_play_hosts_all": ["a", "b", "c", "d"], "ansible_play_hosts": ["a", "b", "d"],
             "ansible_play_batch": ["b"]}


def test_pending_hosts_are_later_batches_and_later_plays_not_dropped_ones():
    assert report_files.pending_hosts(TASK_VARS, ["a", "b", "c", "d", "e"]) == {"a", "d"}
    assert report_files.pending_hosts(TASK_VARS, ["a", "b", "c", "d", "e"], later={"c", "e"}) == {"a", "d", "e"}


def test_registered_outcomes_skip_localhost_and_copy():
    hostvars = {"a": {"kv_tune_outcome": {"status": "tuned"}}, "b": {}, "localhost": {"kv_tune_outcome": {}}}
    outcomes = report_files.registered_outcomes(hostvars, ["a", "b", "gone", "localhost"], "kv_tune_outcome")
    assert outcomes == {"a": {"status": "tuned"}, "b": None, "gone": None}
    assert outcomes["a"] is not hostvars["a"]["kv_tune_outcome"]


def test_write_summary_only_when_the_rows_change(tmp_path):
    path = tmp_path / "sub" / "summary.json"
    rows = [{"host": "a", "line": "a: unchanged"}]
    assert report_files.write_summary(str(path), rows, check_mode=True) and not path.exists()
    assert report_files.write_summary(str(path), rows) and json.loads(path.read_text()) == rows
    assert not report_files.write_summary(str(path), rows)
    assert oct(path.stat().st_mode & 0o777) == "0o644"

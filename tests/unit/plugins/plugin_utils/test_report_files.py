# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the two fleet summaries share: the hosts that have not had their turn, the registered results, the file."""
from __future__ import annotations

import json

import pytest

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


def test_workflow_stats_count_the_statuses_and_name_the_failed_hosts():
    rows = [{"host": "a", "status": "tuned"}, {"host": "b", "status": "failed"}, {"host": "c", "status": "tuned"}]
    stats = report_files.workflow_stats(rows, "/r", lambda row: row["status"] == "failed", restarts=3)
    assert stats == {"hosts": rows, "counts": {"tuned": 2, "failed": 1}, "failed": ["b"], "report_dir": "/r",
                     "report_artifacts": None, "restarts": 3}


@pytest.mark.parametrize("report_dir, expected", [
    ("/runner/artifacts/7/kv_tune_reports", "kv_tune_reports"),   # the default under ansible-runner
    ("/runner/artifacts/7/a/b", "a/b"),
    ("/runner/artifacts/7", "."),
    ("/srv/reports", None),                                        # the user's own directory: not in the artifacts
    ("/runner/artifacts/70/kv_tune_reports", None),
])
def test_workflow_stats_place_the_reports_in_the_jobs_artifacts(report_dir, expected):
    """Under streaming (transmit | worker | process) report_dir is the worker's path; the place inside the artifacts
    is where process unpacked them, wherever that is."""
    environ = {"AWX_ISOLATED_DATA_DIR": "/runner/artifacts/7"}
    assert report_files.workflow_stats([], report_dir, bool, environ=environ)["report_artifacts"] == expected


def test_handed_on_is_what_set_stats_gives_the_strategy():
    stats = {"hosts": [], "counts": {}, "failed": [], "report_dir": "/r"}
    # The shape ansible.builtin.set_stats returns with per_host and aggregate false: one value for the run, replaced.
    assert report_files.handed_on("llmserve_kv_tune", stats) == {
        "ansible_stats": {"data": {"llmserve_kv_tune": stats}, "per_host": False, "aggregate": False}}
    assert not report_files.handed_on("", stats)


@pytest.mark.parametrize("environ, cwd, playbook_dir, expected", [
    # ansible-runner (AWX, Automation Platform): the job's artifacts, wherever it was started
    ({"AWX_ISOLATED_DATA_DIR": "/runner/artifacts/42"}, "/srv/ops", "/srv/ops/playbooks", "/runner/artifacts/42/r"),
    ({}, "/srv/ops", "/srv/ops/playbooks", "/srv/ops/r"),
    # cron or a systemd unit (cwd /): beside the playbook of a checkout
    ({}, "/", "/srv/ops/playbooks", "/srv/ops/playbooks/r"),
    # started inside an installed collection: beside the playbook when that is not in one too
    ({}, "/usr/share/ansible/collections/ansible_collections/llmserve/sglang", "/srv/ops", "/srv/ops/r"),
    # ansible-playbook llmserve.sglang.tune_kv from /: never inside the installed collection
    ({}, "/", "/home/ops/.ansible/collections/ansible_collections/llmserve/sglang/playbooks", "/home/ops/r"),
    ({}, "", "", "/home/ops/r"),
])
def test_default_report_dir(environ, cwd, playbook_dir, expected):
    assert report_files.default_report_dir("r", environ, cwd, playbook_dir, "/home/ops") == expected


RUNNER = {"AWX_ISOLATED_DATA_DIR": "/runner/artifacts/42"}


@pytest.mark.parametrize("host_vars_dir, environ, in_container, says", [
    ("/runner/project/inventories/prod/host_vars", RUNNER, False, "inside the job's private data directory /runner"),
    ("/runner", RUNNER, True, "inside the job's private data directory /runner"),
    ("/srv/inventory/host_vars", RUNNER, True, "runs in a container"),
    ("/srv/inventory/host_vars", RUNNER, False, None),      # ansible-runner on a machine: the files stay
    ("/runner-other/host_vars", RUNNER, False, None),       # a sibling of the private data directory is outside it
    ("/srv/inventory/host_vars", {}, True, None),           # not under ansible-runner
    ("", RUNNER, True, None),                               # no write-back asked for
])
def test_host_vars_warning(host_vars_dir, environ, in_container, says):
    warning = report_files.host_vars_warning(host_vars_dir, environ, in_container)
    if says is None:
        assert warning is None
    else:
        assert says in warning and "will not persist" in warning and host_vars_dir in warning

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The kv_tune_report action: one host's report files and its pins in host_vars, written on the controller."""
from __future__ import annotations

import json
import os
from unittest import mock

import pytest
import yaml
from ansible.errors import AnsibleActionFail
from ansible.playbook.play_context import PlayContext

from ansible_collections.llmserve.sglang.plugins.action import kv_tune_report

RESULT = {"after": {"mem_fraction_static": 0.915, "tokens": 202389}, "fingerprint_hash": "0123abcd",
          "time": "2026-12-06T10:00:00Z", "trials": [{"text": "0.915"}]}
ONE_UNIT = {"status": "tuned", "label": "gpu1", "unit": "sglang.service", "line": "gpu1: tuned", "result": RESULT,
            "report": "# gpu1\n"}
TWO_UNITS = {"status": "tuned", "units": {
    "sglang@a.service": dict(ONE_UNIT, label="gpu1/sglang@a", unit="sglang@a.service", report="# a\n"),
    "sglang@b.service": dict(ONE_UNIT, label="gpu1/sglang@b", unit="sglang@b.service", status="no_stable_value",
                             report="# b\n")}}


def run(args, host="gpu1", check_mode=False):
    task = mock.MagicMock()
    task.args = args
    task.async_val = False
    task.check_mode = check_mode
    action = kv_tune_report.ActionModule(task, mock.MagicMock(), PlayContext(), loader=None, templar=None)
    return action.run(task_vars={"inventory_hostname": host})


def test_the_reports_of_one_unit_and_its_pin_in_host_vars(tmp_path):
    reports, host_vars = tmp_path / "reports", tmp_path / "host_vars"
    result = run({"outcome": ONE_UNIT, "report_dir": str(reports), "host_vars_dir": str(host_vars)})
    assert result["changed"] and sorted(os.path.basename(path) for path in result["written"]) == [
        "gpu1.json", "gpu1.md", "kv_tune.yml"]
    assert json.loads((reports / "gpu1.json").read_text()) == RESULT
    assert (reports / "gpu1.json").read_text() == json.dumps(RESULT, indent=4, sort_keys=True) + "\n"   # to_nice_json
    assert (reports / "gpu1.md").read_text() == "# gpu1\n"
    assert oct((reports / "gpu1.md").stat().st_mode & 0o777) == "0o644"
    pinned = (host_vars / "gpu1" / "kv_tune.yml").read_text()
    assert pinned.startswith("---\n# Written by llmserve.sglang.kv_tune")
    assert yaml.safe_load(pinned) == {"kv_tune_pinned": {"sglang.service": {
        "mem_fraction_static": 0.915, "tokens": 202389, "fingerprint_hash": "0123abcd",
        "tuned_at": "2026-12-06T10:00:00Z"}}}
    again = run({"outcome": ONE_UNIT, "report_dir": str(reports), "host_vars_dir": str(host_vars)})
    assert not again["changed"] and again["written"] == [] and len(again["files"]) == 3


def test_several_units_each_have_reports_and_only_the_tuned_ones_a_pin(tmp_path):
    result = run({"outcome": TWO_UNITS, "report_dir": str(tmp_path), "host_vars_dir": str(tmp_path / "hv")})
    assert [report["name"] for report in result["reports"]] == ["gpu1_sglang@a", "gpu1_sglang@b"]
    assert (tmp_path / "gpu1_sglang@b.md").read_text() == "# b\n"
    assert list(yaml.safe_load((tmp_path / "hv" / "gpu1" / "kv_tune.yml").read_text())["kv_tune_pinned"]) == [
        "sglang@a.service"]


def test_check_mode_writes_nothing_and_says_what_would_change(tmp_path):
    result = run({"outcome": ONE_UNIT, "report_dir": str(tmp_path / "r")}, check_mode=True)
    assert result["changed"] and len(result["written"]) == 2 and not (tmp_path / "r").exists()


def test_nothing_searched_writes_nothing(tmp_path):
    result = run({"outcome": {"status": "unchanged", "line": "keeps"}, "report_dir": str(tmp_path / "r"),
                  "host_vars_dir": str(tmp_path / "hv")})
    assert not result["changed"] and result["files"] == [] and not (tmp_path / "r").exists()


def test_a_host_name_that_would_leave_host_vars_is_refused(tmp_path):
    with pytest.raises(AnsibleActionFail, match="cannot name a file"):
        run({"outcome": ONE_UNIT, "report_dir": str(tmp_path), "host_vars_dir": str(tmp_path / "hv")}, host="..")
    assert list(tmp_path.iterdir()) == []

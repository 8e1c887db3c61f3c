# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""kv_trial: the cases of test_kv_trial.yaml, with the drop-ins, the revert script, the lock and the fact in a
temporary directory (the test moves kv_pin's paths there; the module is the same)."""
from __future__ import annotations

import contextlib
import json
import os
import time
from unittest import mock

import pytest

from ansible_collections.llmserve.sglang.plugins.module_utils.service import kv_pin
from ansible_collections.llmserve.sglang.plugins.modules import kv_trial
from ansible_collections.llmserve.sglang.tests.unit.plugins.modules import uthelper

NOW = "20261201T000000Z"


def _in(tmp_path, value):
    """The case with $TMP, $NOW and the locks filled in."""
    live = json.dumps({"run_id": "9a8b7c6d", "controller": "ops2 pid 99", "renewed": 1, "expires": time.time() + 3600})
    stale = json.dumps({"run_id": "9a8b7c6d", "controller": "ops2 pid 99", "renewed": 1, "expires": 2})
    text = json.dumps(value).replace("$TMP", str(tmp_path)).replace("$NOW", NOW)
    text = text.replace('"$LIVE_LOCK"', json.dumps(live)).replace('"$STALE_LOCK"', json.dumps(stale))
    return json.loads(text)


@contextlib.contextmanager
def _host_in(tmp_path):
    """kv_pin's paths, the revert script and the clock of a case, in ``tmp_path``."""
    real_paths = kv_pin.paths

    def paths(unit, run_id=None):
        return dict(real_paths(unit, run_id), pin=str(tmp_path / "pin.conf"), trial=str(tmp_path / "trial.conf"),
                    lock=str(tmp_path / "lock"))

    with mock.patch.object(kv_pin, "paths", paths), \
            mock.patch.object(kv_pin, "REVERT_SCRIPT", str(tmp_path / "llmserve-kv-revert")), \
            mock.patch.object(kv_trial.time, "strftime", lambda fmt, *args: NOW):
        yield


@pytest.mark.parametrize("case", uthelper.cases(__file__, extra_keys=("before", "files")))
def test_kv_trial(case, tmp_path):
    case = _in(tmp_path, case)
    for path, text in (case.get("before") or {}).items():
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
    with _host_in(tmp_path):
        uthelper.run_case(kv_trial, {key: case[key] for key in ("id", "input", "output", "mocks") if key in case})
    for path, text in (case.get("files") or {}).items():
        if text is None:
            assert not os.path.exists(path), path
        else:
            with open(path, encoding="utf-8") as handle:
                assert text in handle.read(), path


def test_committed_moves_what_prepared_wrote_into_place(tmp_path):
    """A commit after a prepare is a rename of the prepared files (the same inodes): it needs no space."""
    given = {"unit": "sglang.service", "value": "0.910", "fact_path": str(tmp_path / "sglang_kv.fact"),
             "fact": {"mem_fraction_static": 0.91, "tokens": 1}}
    stop = [{"command": ["/usr/bin/systemctl", "stop", "llmserve-kv-revert-sglang.timer"]},
            {"command": ["/usr/bin/systemctl", "reset-failed", "llmserve-kv-revert-sglang.timer",
                         "llmserve-kv-revert-sglang.service"]},
            {"command": ["/usr/bin/systemctl", "daemon-reload"]}]
    with _host_in(tmp_path):
        uthelper.run_case(kv_trial, {"id": "prepared", "input": dict(given, state="prepared"),
                                     "output": {"changed": True}, "mocks": {"run_command": []}})
        prepared = {name: os.stat(tmp_path / (name + kv_trial.PREPARED)).st_ino
                    for name in ("pin.conf", "sglang_kv.fact")}
        uthelper.run_case(kv_trial, {"id": "committed", "input": dict(given, state="committed"),
                                     "output": {"changed": True}, "mocks": {"run_command": stop}})
    assert {name: os.stat(tmp_path / name).st_ino for name in prepared} == prepared
    assert not any((tmp_path / (name + kv_trial.PREPARED)).exists() for name in prepared)

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""kv_trial: the cases of test_kv_trial.yaml, with the drop-ins, the revert script and the fact in a temporary
directory (the test moves kv_pin's paths there; the module is the same)."""
from __future__ import annotations

import json
import os
from unittest import mock

import pytest

from ansible_collections.llmserve.sglang.plugins.module_utils import kv_pin
from ansible_collections.llmserve.sglang.plugins.modules import kv_trial
from ansible_collections.llmserve.sglang.tests.unit.plugins.modules import uthelper


def _in(tmp_path, value):
    """The case with $TMP replaced by the test's directory."""
    return json.loads(json.dumps(value).replace("$TMP", str(tmp_path)))


@pytest.mark.parametrize("case", uthelper.cases(__file__, extra_keys=("before", "files")))
def test_kv_trial(case, tmp_path):
    case = _in(tmp_path, case)
    real_paths = kv_pin.paths

    def paths(unit):
        return dict(real_paths(unit), pin=str(tmp_path / "pin.conf"), trial=str(tmp_path / "trial.conf"))

    for path, text in (case.get("before") or {}).items():
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
    with mock.patch.object(kv_pin, "paths", paths), \
            mock.patch.object(kv_pin, "REVERT_SCRIPT", str(tmp_path / "llmserve-kv-revert")):
        uthelper.run_case(kv_trial, {key: case[key] for key in ("id", "input", "output", "mocks") if key in case})
    for path, text in (case.get("files") or {}).items():
        if text is None:
            assert not os.path.exists(path), path
        else:
            with open(path, encoding="utf-8") as handle:
                assert text in handle.read(), path

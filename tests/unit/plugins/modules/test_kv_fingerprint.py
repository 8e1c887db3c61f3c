# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""kv_fingerprint: the cases of test_kv_fingerprint.yaml, with the model, the fact file and the trial drop-in in a
temporary directory and the server's command line given by the case (the module is the same)."""
from __future__ import annotations

import json
from unittest import mock

import pytest

from ansible_collections.llmserve.sglang.plugins.module_utils import kv_pin, server_args
from ansible_collections.llmserve.sglang.plugins.module_utils.fingerprint import fingerprint, fingerprint_hash
from ansible_collections.llmserve.sglang.plugins.modules import kv_fingerprint
from ansible_collections.llmserve.sglang.tests.unit.plugins.modules import uthelper

H200 = [{"name": "NVIDIA H200", "memory_total_mib": 143771}]


def _pinned_hash(case, config_text):
    """The hash the module computes for the case's server (the H200 capture, SGLang 0.5.9)."""
    args = server_args.from_argv(case["argv"])
    fp = fingerprint(H200, "580.159.04", "13.0", "0.5.9", args["model_path"], config_text=config_text,
                     server_args=args)
    return fingerprint_hash(fp), fp


@pytest.mark.parametrize("case", uthelper.cases(__file__, extra_keys=("argv", "config", "pin", "trial_pending")))
def test_kv_fingerprint(case, tmp_path):
    case = json.loads(json.dumps(case).replace("$TMP", str(tmp_path)))
    config_text = None
    if "config" in case:
        (tmp_path / "model").mkdir()
        config_text = json.dumps(case["config"], indent=2)
        (tmp_path / "model" / "config.json").write_text(config_text)
    pin = case.get("pin")
    if pin is not None:
        if pin == "same" or (isinstance(pin, dict) and pin.get("fingerprint_hash") == "same"):
            digest, fp = _pinned_hash(case, config_text)
            pin = dict({"mem_fraction_static": 0.88, "fingerprint": fp}, **(pin if isinstance(pin, dict) else {}))
            pin["fingerprint_hash"] = digest
        text = pin if isinstance(pin, str) else json.dumps({"sglang.service": pin})
        (tmp_path / "sglang_kv.fact").write_text(text)
    if case.get("trial_pending"):
        (tmp_path / "trial.conf").write_text("[Service]\n")
    real_paths = kv_pin.paths

    def paths(unit):
        return dict(real_paths(unit), trial=str(tmp_path / "trial.conf"))

    with mock.patch.object(kv_pin, "paths", paths), \
            mock.patch.object(kv_fingerprint, "read_argv", lambda pid: case["argv"]):
        uthelper.run_case(kv_fingerprint, {key: case[key] for key in ("id", "input", "output", "mocks") if key in case})

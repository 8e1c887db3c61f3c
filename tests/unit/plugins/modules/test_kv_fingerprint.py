# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""kv_fingerprint: the cases of test_kv_fingerprint.yaml, with the venv, the model, the fact file, the lock and the
trial drop-in in a root-owned temporary directory under /run, and the server's command line and start time given by
the case (the module is the same)."""
from __future__ import annotations

import functools
import json
import os
import time
from unittest import mock

import pytest

from ansible_collections.llmserve.sglang.plugins.module_utils.host import host_files
from ansible_collections.llmserve.sglang.plugins.module_utils.service import kv_pin, server_args
from ansible_collections.llmserve.sglang.plugins.module_utils.service.fingerprint import fingerprint, fingerprint_hash
from ansible_collections.llmserve.sglang.plugins.modules import kv_fingerprint
from ansible_collections.llmserve.sglang.tests.unit.plugins.modules import uthelper

H200 = [{"name": "NVIDIA H200", "memory_total_mib": 143771}]
EXTRA = ("argv", "pinned_argv", "config", "pin", "trial_pending", "timers", "lock", "installed_after_start", "writable_venv",
         "stale_contains", "env_file", "process_gone", "argv_error", "dropin_after_start")
STARTED = time.time() - 1000
MONOTONIC_SHIFT = 10000.0
REAL_MONOTONIC = time.monotonic


def _venv(base, writable):
    site = os.path.join(base, "venv", "lib", "python3.11", "site-packages", "sglang-0.5.9.dist-info")
    os.makedirs(site)
    with open(os.path.join(site, "METADATA"), "w", encoding="utf-8") as handle:
        handle.write("Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.9\n")
    os.utime(os.path.join(site, "METADATA"), (STARTED - 86400, STARTED - 86400))
    if writable:
        os.chmod(os.path.join(base, "venv", "lib"), 0o777)
    return os.path.join(site, "METADATA")


def _pinned(case, config_text):
    """The pin of the case's server under the fingerprint the module computes (the H200 capture, SGLang 0.5.9)."""
    args = server_args.from_argv(case.get("pinned_argv") or case["argv"])
    fp = fingerprint(H200, "580.159.04", "13.0", "0.5.9", args["model_path"], config_text=config_text,
                     server_args=args)
    return fingerprint_hash(fp), fp


def _argv(case, _pid):
    if case.get("argv_error"):
        raise PermissionError(13, "Permission denied")
    return case["argv"]


@pytest.mark.parametrize("case", uthelper.cases(__file__, extra_keys=EXTRA))
def test_kv_fingerprint(case, root_dir):
    base = root_dir
    timers = json.dumps(case.get("timers", ""))[1:-1]
    # a stopped unit's last start, on systemd's monotonic clock (microseconds), when the server of the case started;
    # that clock is shifted by MONOTONIC_SHIFT, since this machine may have been up for less than the case's 1000 s
    began = str(int((time.monotonic() + MONOTONIC_SHIFT - (time.time() - STARTED)) * 1e6))
    case = json.loads(json.dumps(case).replace("$TMP", base).replace("$TIMERS", timers).replace("$BEGAN", began))
    metadata = _venv(base, case.get("writable_venv"))
    if case.get("installed_after_start"):
        os.utime(metadata, (STARTED + 10, STARTED + 10))
    config_text = None
    if "config" in case:
        os.mkdir(os.path.join(base, "model"))
        config_text = json.dumps(case["config"], indent=2)
        with open(os.path.join(base, "model", "config.json"), "w", encoding="utf-8") as handle:
            handle.write(config_text)
        os.utime(os.path.join(base, "model", "config.json"), (STARTED - 60, STARTED - 60))
    pin = case.get("pin")
    if pin is not None:
        if pin == "same" or (isinstance(pin, dict) and pin.get("fingerprint_hash") == "same"):
            digest, fp = _pinned(case, config_text)
            pin = dict({"mem_fraction_static": 0.88, "fingerprint": fp}, **(pin if isinstance(pin, dict) else {}))
            pin["fingerprint_hash"] = digest
        with open(os.path.join(base, "sglang_kv.fact"), "w", encoding="utf-8") as handle:
            handle.write(pin if isinstance(pin, str) else json.dumps({"sglang.service": pin}))
    if case.get("trial_pending"):
        with open(os.path.join(base, "trial.conf"), "w", encoding="utf-8") as handle:
            # a value: the drop-in kv_trial writes for it; true: a drop-in without one
            handle.write(kv_pin.dropin_text("sglang.service", case["trial_pending"], True, "1f2e3d4c")
                         if isinstance(case["trial_pending"], str) else "[Service]\n")
    if case.get("dropin_after_start"):   # a drop-in of the unit written after its last start
        with open(os.path.join(base, "50-kv-tune.conf"), "w", encoding="utf-8") as handle:
            handle.write("[Service]\n")
        os.utime(os.path.join(base, "50-kv-tune.conf"), (STARTED + 10, STARTED + 10))
    if case.get("env_file"):   # an EnvironmentFile= of the unit (its secrets too)
        with open(os.path.join(base, "unit.env"), "w", encoding="utf-8") as handle:
            handle.write(case["env_file"])
    if case.get("lock"):
        with open(os.path.join(base, "unit.lock"), "w", encoding="utf-8") as handle:
            json.dump(case["lock"], handle)
    real_paths = kv_pin.paths

    def paths(unit, run_id=None):
        return dict(real_paths(unit, run_id), trial=os.path.join(base, "trial.conf"),
                    lock=os.path.join(base, "unit.lock"))

    with mock.patch.object(kv_pin, "paths", paths), \
            mock.patch.object(host_files, "process_argv", functools.partial(_argv, case)), \
            mock.patch.object(host_files, "process_start_time", lambda pid: STARTED), \
            mock.patch.object(host_files, "process_gone", lambda pid: case.get("process_gone", False)), \
            mock.patch.object(time, "monotonic", lambda: REAL_MONOTONIC() + MONOTONIC_SHIFT):
        result = uthelper.run_case(kv_fingerprint, {key: case[key] for key in ("id", "input", "output", "mocks")
                                                    if key in case})
    if case.get("env_file"):
        assert "s3cret" not in json.dumps(result), result
    if "stale_contains" in case:
        assert case["stale_contains"] in result["stale"][0], result["stale"]


def test_the_processes_of_also_units_are_neither_the_units_nor_others():
    # Two servers share GPU 0: with also_units, the neighbour's process (pid 20) is in neither figure, so what stays
    # in other_bytes is the memory of processes that no server of the host holds.
    gpus = [{"index": 0, "memory_total_bytes": 100, "memory_used_bytes": 70,
             "compute_processes": [{"pid": 10, "used_memory_bytes": 40, "name": "a"},
                                   {"pid": 20, "used_memory_bytes": 20, "name": "b"},
                                   {"pid": 30, "used_memory_bytes": 5, "name": "c"}]}]
    plain, known = kv_fingerprint.gpu_memory(gpus, {10}), kv_fingerprint.gpu_memory(gpus, {10}, {20})
    assert (plain[0]["server_bytes"], plain[0]["other_bytes"]) == (40, 25)
    assert (known[0]["server_bytes"], known[0]["other_bytes"]) == (40, 5)
    assert known[0]["other_processes"] == [{"pid": 30, "name": "c"}] and known[0]["unlisted_bytes"] == 5

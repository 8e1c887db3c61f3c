# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""run/settle.py: the unit settled before its search, and a last-known-good value that no longer starts."""
from __future__ import annotations

import pytest

from ansible_collections.llmserve.sglang.plugins.plugin_utils.run.settle import SETTLE_STEPS
from ansible_collections.llmserve.sglang.plugins.plugin_utils.run.steps import RunFailed
from ansible_collections.llmserve.sglang.tests.unit.plugins.plugin_utils.run.scripted_run import (
    INFO, drive, settled_run, unit_run)

PENDING = dict(INFO, trial_pending=True)


def test_a_pending_trial_is_reverted_and_the_unit_asked_again():
    run = settled_run()
    (info, plan, safe), said = drive(run.settle.settle(PENDING, None), [
        ("kv_trial locked", {}), ("kv_trial reverted", {"changed": True, "invocation_id": "I1"}),
        ("sglang_ready", {"ready": True}), ("kv_fingerprint", {"invocation_id": "I1"})])
    assert (plan["do"], plan["why"], safe, info["invocation_id"]) == ("tune", "never tuned", None, "I1")
    assert said == ["gpu1: a trial of an earlier run was never confirmed"] and run.locked


def test_a_unit_that_does_not_settle_is_not_searched():
    script = [("kv_fingerprint", {"trial_pending": True}), ("kv_trial locked", {})]
    for _attempt in range(SETTLE_STEPS):
        script += [("kv_trial reverted", {}), ("sglang_ready", {"ready": True}),
                   ("kv_fingerprint", {"trial_pending": True})]
    with pytest.raises(RunFailed, match="sglang.service did not settle before the search"):
        drive(unit_run().steps(), script)


def test_a_revert_that_does_not_start_is_read_from_that_start():
    run = settled_run()
    ready = {"ready": False, "reason": "unit_failed", "detail": "exited"}
    (_info, _plan, safe), said = drive(run.settle.settle(PENDING, None), [
        ("kv_trial locked", {}), ("kv_trial reverted", {"invocation_id": "I1"}), ("sglang_ready", ready),
        ("sglang_startup_facts", {"failure": {"kind": "init_oom", "line": "Not enough memory"}})])
    assert safe["why"].startswith("the last-known-good value 0.88 no longer starts (init_oom: Not enough memory)")
    assert said[-1] == "gpu1: " + safe["why"]


def test_a_start_that_failed_for_another_reason_leaves_the_unit_as_it_is():
    run = settled_run()
    ready = {"ready": False, "reason": "unit_failed", "detail": "exited"}
    with pytest.raises(RunFailed, match=r"does not start on its last-known-good value 0.88 \(nccl_error: NCCL"):
        drive(run.settle.after_a_failed_start(INFO, ready, "I1"), [
            ("sglang_startup_facts", {"failure": {"kind": "nccl_error", "line": "NCCL error"}})])

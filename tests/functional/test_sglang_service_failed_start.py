# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The sglang_service role's readiness wait on a server whose start failed (a real SGLang boot log that ran out of
memory at init): it stops at once, long before its timeout, on the unit's failed state, and its message names the
classified failure and what to change. systemctl and journalctl answer as systemd does for such a unit (the
functional host has no systemd); the simulated hosts run the role against real systemd and journald."""
from __future__ import annotations

import os
from pathlib import Path

LOG = Path(__file__).resolve().parents[1] / "fixtures" / "logs" / "current_init_oom_glm47_flash_rtx5090_excerpt.log"
INVOCATION = "0123456789abcdef0123456789abcdef"


def test_a_start_that_failed_stops_the_wait_at_once_and_names_its_failure(ansible, tmp_path):
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "journalctl").write_text("#!/bin/sh\ncat %s\n" % LOG)
    (tools / "systemctl").write_text(
        "#!/bin/sh\n"
        "case \"$*\" in *--value*) echo %s ;; *) printf 'ActiveState=failed\\nSubState=failed\\nResult=exit-code\\n"
        "NRestarts=0\\nExecMainStatus=1\\nInvocationID=%s\\n' ;; esac\n" % (INVOCATION, INVOCATION))
    for tool in ("journalctl", "systemctl"):
        (tools / tool).chmod(0o755)
    play = [{"hosts": "localhost", "gather_facts": False, "tasks": [{
        "name": "wait for the server", "ansible.builtin.include_role": {
            "name": "llmserve.sglang.sglang_service", "tasks_from": "ready"},
        "vars": {"__sglang_service_unit": {"unit": "llmserve-ready-test.service", "url": "http://127.0.0.1:9",
                                           "follower_node": False},
                 "sglang_service_ready_timeout": 600, "sglang_service_ready_delay": 0.5}}]}]
    runner = ansible._run(playbook=play, envvars={"PATH": os.pathsep.join([str(tools), os.environ["PATH"]])})
    results = {event["event_data"]["task"]: event["event_data"]["res"] for event in runner.events
               if event.get("event") in ("runner_on_ok", "runner_on_failed")}
    probe = results["Sglang service | Wait until the server answers a real generation: llmserve-ready-test.service"]
    assert (probe["ready"], probe["reason"]) == (False, "unit_failed") and probe["elapsed_s"] < 60, probe
    msg = results["Sglang service | Fail with the journal and the classified failure"]["msg"]
    assert "(unit_failed after" in msg and "ActiveState=failed" in msg, msg
    assert "Startup failure: init_oom: ValueError: Loaded weights leave no GPU memory for the KV cache" in msg, msg
    assert "What to change: " in msg and "Raise --mem-fraction-static" in msg, msg

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The sglang_service role's failure message when a server does not answer: the journal it quotes holds what the
server printed (its server_args with the API key, a model's environment with the HF token), and neither secret, nor
any other HF token, reaches the message or any event of the run."""
from __future__ import annotations

import json
import os

API_KEY = "sk-ready-test-0123456789abcdef"
HF_TOKEN = "hf_" + "Ab1" * 12          # the role's token
OTHER_TOKEN = "hf_" + "Zz9" * 12       # one the server found elsewhere


def test_the_failure_message_masks_every_secret_the_server_printed(ansible, tmp_path):
    tools = tmp_path / "bin"
    tools.mkdir()
    journal = ("server_args=ServerArgs(model_path='/models/m', api_key='%s', port=9)\n"
               "model init: environment HF_TOKEN=%s HF_HOME_TOKEN=%s\n"
               "RuntimeError: model init failed\n" % (API_KEY, HF_TOKEN, OTHER_TOKEN))
    # The host's journal as this server left it (the functional host has no systemd journal of its own).
    (tools / "journalctl").write_text("#!/bin/sh\ncat <<'EOF'\n%sEOF\n" % journal)
    (tools / "journalctl").chmod(0o755)
    play = [{"hosts": "localhost", "gather_facts": False, "tasks": [{
        "name": "wait for the server", "ansible.builtin.include_role": {
            "name": "llmserve.sglang.sglang_service", "tasks_from": "ready"},
        "vars": {"__sglang_service_unit": {"unit": "llmserve-ready-test.service", "url": "http://127.0.0.1:9",
                                           "follower_node": False},
                 "sglang_service_api_key": API_KEY, "sglang_service_hf_token": HF_TOKEN,
                 "sglang_service_ready_timeout": 1, "sglang_service_ready_delay": 0.5}}]}]
    runner = ansible._run(playbook=play, envvars={"PATH": os.pathsep.join([str(tools), os.environ["PATH"]])})
    failed = [event["event_data"]["res"] for event in runner.events if event.get("event") == "runner_on_failed"
              and event["event_data"].get("task") == "Sglang service | Fail with the journal and the classified failure"]
    assert failed, runner.stdout.read()[-3000:]
    msg = failed[0]["msg"]
    assert "llmserve-ready-test.service did not answer a real generation" in msg, msg
    assert "model init: environment HF_TOKEN=******** HF_HOME_TOKEN=********" in msg, msg
    assert "api_key='********'" in msg, msg
    everything = json.dumps(list(runner.events)) + runner.stdout.read()
    assert not [secret for secret in (API_KEY, HF_TOKEN, OTHER_TOKEN) if secret in everything]

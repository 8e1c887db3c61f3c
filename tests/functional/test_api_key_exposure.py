# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The sglang_service role warns when an API key is set and /proc lets every local user read it (issue 18): its
api_key_exposure tasks on localhost, whose /proc mount is read for real."""
from __future__ import annotations

from conftest import REPO

SECRET = "s3cret-key-for-the-test"


def _run(ansible, api_key):
    play = [{"hosts": "localhost", "gather_facts": False, "tasks": [{
        "name": "the role's check", "ansible.builtin.include_role": {
            "name": "llmserve.sglang.sglang_service", "tasks_from": "api_key_exposure.yml"},
        "vars": {"sglang_service_api_key": api_key}}]}]
    return ansible._run(playbook=play, project_dir=str(REPO))


def _hidden():
    with open("/proc/self/mounts", encoding="utf-8") as handle:
        proc = [line.split()[3] for line in handle if line.split()[1:3] == ["/proc", "proc"]]
    return bool(proc) and "hidepid=" in proc[-1] and "hidepid=0" not in proc[-1]


def test_a_key_on_a_host_without_hidepid_is_warned_about_and_not_printed(ansible):
    runner = _run(ansible, SECRET)
    output = runner.stdout.read()
    assert runner.status == "successful", output[-3000:]
    if _hidden():
        assert "WARNING: sglang_service_api_key is set" not in output
    else:
        assert "WARNING: sglang_service_api_key is set and /proc is mounted without hidepid" in output, output[-3000:]
    assert SECRET not in output


def test_no_key_no_warning(ansible):
    runner = _run(ansible, "")
    output = runner.stdout.read()
    assert runner.status == "successful", output[-3000:]
    assert "WARNING: sglang_service_api_key" not in output

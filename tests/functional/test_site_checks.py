# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""playbooks/site.yml on a shared fleet: it runs on sglang_servers, checks every role's variables on every host before
any host is changed, and its parts have tags. Two hosts on the controller (local connection), of which one has a bad
variable in its host_vars: no role starts on either."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, _collections_path

BIN = Path(sys.executable).parent
SITE = REPO / "playbooks" / "site.yml"
# Valid for every role without touching the controller: the driver is another tool's, the model comes from the Hub.
GOOD = {"ansible_become": False, "site_nvidia_driver": False, "sglang_model_repo": "example-org/example-model"}


def inventory(tmp_path: Path, bad: dict) -> Path:
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    hosts = {"sglang_servers": {"hosts": {"gpu1": dict(local), "gpu2": dict(local, **bad)}},
             "databases": {"hosts": {"db1": dict(local)}}}
    path = tmp_path / "hosts.yml"
    path.write_text(json.dumps({"all": {"children": hosts}}))
    return path


def site(tmp_path: Path, *args: str, bad: dict | None = None) -> subprocess.CompletedProcess:
    env = {"PATH": "%s:/usr/sbin:/usr/bin:/sbin:/bin" % BIN, "HOME": str(tmp_path), "ANSIBLE_COLLECTIONS_PATH": _collections_path(),
           "ANSIBLE_NOCOLOR": "1", "ANSIBLE_CALLBACK_RESULT_FORMAT": "json",
           "ANSIBLE_LOCAL_TEMP": str(tmp_path / "tmp")}
    return subprocess.run([str(BIN / "ansible-playbook"), str(SITE), "-i", str(inventory(tmp_path, bad or {})),
                           "-e", json.dumps(GOOD), *args], cwd=str(tmp_path), env=env, capture_output=True,
                          text=True, timeout=300, check=False)


@pytest.mark.parametrize("bad, message", [
    ({"sglang_service_port": "http"}, "sglang_service_port"),                 # a type the argument spec refuses
    ({"sglang_service_user": "root"}, "sglang_service_user must not be root"),  # a check the spec cannot express
    # A range (watch.settings.BOUNDS): a keep of 0 let the headroom watch's state file grow without bound.
    ({"sglang_service_kv_watch_keep": 0}, "sglang_service_kv_watch_keep must lie in [1, 20160] windows (got 0)"),
])
def test_a_bad_variable_on_one_host_changes_no_host(tmp_path, bad, message):
    # --check: should the checks ever let the deployment start, it still changes nothing on this machine.
    run = site(tmp_path, "--check", bad=bad)
    out = run.stdout + run.stderr
    assert run.returncode != 0, out[-3000:]
    assert message in out, out[-3000:]
    # The deployment play never started, on either host; the host outside sglang_servers was never touched.
    assert "PLAY [Check every role's variables on every host before any change]" in out
    assert "PLAY [Deploy the NVIDIA driver, SGLang and its service]" not in out, out[-3000:]
    assert "db1" not in out


def tasks_listed(tmp_path: Path, *args: str) -> list[str]:
    run = site(tmp_path, "--list-tasks", *args)
    assert run.returncode == 0, run.stdout + run.stderr
    return [line.strip().split("\t")[0] for line in run.stdout.splitlines() if "TAGS:" in line]


def roles_of(tasks: list[str]) -> set[str]:
    # "llmserve.sglang.sglang : Sglang | Create the user ...": the prefix every task name of a role carries.
    return {task.split(" : ")[-1].split(" | ")[0] for task in tasks if " | " in task}


def test_every_part_has_its_tag(tmp_path):
    assert roles_of(tasks_listed(tmp_path, "-e", "site_nvidia_driver=true")) == {
        "Nvidia driver", "Sglang", "Sglang service"}
    assert roles_of(tasks_listed(tmp_path, "--skip-tags", "nvidia_driver")) == {"Sglang", "Sglang service"}
    # The service alone still resolves SGLang's model directory (its default model path), installing nothing.
    service = tasks_listed(tmp_path, "--tags", "sglang_service")
    assert roles_of(service) == {"Sglang", "Sglang service"}
    assert [task for task in service if "Sglang | " in task] == [
        "llmserve.sglang.sglang : Sglang | Check the variables against the argument specs",
        "llmserve.sglang.sglang : Sglang | Resolve the model directories",
        "llmserve.sglang.sglang : Sglang | Record the model directories",
        "llmserve.sglang.sglang : Sglang | Check the variables that argument_specs cannot express",
        "llmserve.sglang.sglang : Sglang | Look for config.json in the local model directories",
        "llmserve.sglang.sglang : Sglang | Fail when a local model directory has no config.json"], service
    assert roles_of(tasks_listed(tmp_path, "--tags", "nvidia_driver", "-e", "site_nvidia_driver=true")) == {
        "Nvidia driver"}
    # The inventory check runs whatever the tags.
    assert "Check that the host pattern matches at least one host" in tasks_listed(tmp_path, "--tags", "sglang")

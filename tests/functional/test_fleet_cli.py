# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""llmserve-fleet's -e through the console command, as an operator types it: each form reaches ansible-playbook as
given, a bad one is refused before anything runs, and a secret given with -e is in no file a failed run leaves."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from conftest import REPO

FLEET = os.path.join(os.path.dirname(sys.executable), "llmserve-fleet")
HOSTS = ("via-kv", "via-json", "via-yaml", "via-file")


def fleet(args, cwd, timeout=240):
    env = {key: value for key, value in os.environ.items() if not key.startswith("ANSIBLE_")}
    env.update(PATH=os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")]), ANSIBLE_NOCOLOR="1",
               ANSIBLE_CONFIG=str(REPO / "ansible.cfg"))
    return subprocess.run([FLEET] + args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
                          check=False)


@pytest.fixture(name="work")
def fixture_work(tmp_path):
    (tmp_path / "hosts.yml").write_text("sglang_servers:\n  hosts:\n" + "".join(
        "    %s:\n      ansible_host: 127.0.0.1\n      ansible_port: 9\n" % host for host in HOSTS))
    (tmp_path / "vars.yml").write_text("kv_tune_hosts: via-file\n")
    return tmp_path


@pytest.mark.parametrize("given, host", [
    ("kv_tune_hosts=via-kv", "via-kv"),
    ('{"kv_tune_hosts": "via-json"}', "via-json"),
    ("{kv_tune_hosts: via-yaml}", "via-yaml"),
    ("@vars.yml", "via-file"),
])
def test_each_extra_vars_form_reaches_ansible_playbook(work, given, host):
    done = fleet(["tune", "-i", "hosts.yml", "--list-hosts", "-e", given], work)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    listed = set(re.findall(r"^\s+(via-\w+)$", done.stdout, re.M))
    assert listed == {host}, done.stdout[-2000:]


def test_a_bad_extra_var_is_refused_before_anything_runs(work):
    done = fleet(["tune", "-i", "hosts.yml", "-e", '{"a":', "--report-dir", "reports"], work)
    assert done.returncode == 2
    assert done.stderr.startswith("llmserve-fleet: -e {\"a\":: not valid YAML or JSON"), done.stderr
    assert "Traceback" not in done.stderr and not (work / "reports").exists()


def test_a_secret_given_with_e_is_in_no_file_a_failed_run_leaves(work):
    secret = "sk-llmserve-test-0123456789"
    done = fleet(["tune", "-i", "hosts.yml", "--plain", "--report-dir", "reports", "-e", "kv_tune_hosts=via-kv",
                  "-e", "sglang_service_api_key=" + secret], work)
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    kept = re.search(r"ansible-runner's artifacts of this run \(its events and output\): (\S+)", done.stdout)
    assert kept, done.stdout[-2000:]
    left = [os.path.join(top, name) for where in (kept.group(1), str(work / "reports"))
            for top, _dirs, names in os.walk(where) for name in names]
    assert any(path.endswith("stdout") for path in left), left
    holding = [path for path in left if secret.encode() in open(path, "rb").read()]
    assert holding == [] and secret not in done.stdout + done.stderr, holding

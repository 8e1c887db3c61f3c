# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""inventories/prod, the example fleet inventory, as Ansible reads it (no host is contacted): its groups and hosts,
each hardware class's variables, the vaulted secrets decrypted with the example's password and mapped onto the roles'
variables, the playbooks' host lists; and a playbook run on an inventory or a pattern that matches no host fails."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import ansible_runner
import pytest
import yaml

from conftest import REPO

PROD = REPO / "inventories" / "prod"
PASSWORD_FILE = PROD / "vault-password.example.txt"
BIN = Path(sys.executable).parent
CLASSES = {
    "rtx6000_8x": ["gpu-r01.example.internal", "gpu-r02.example.internal", "gpu-r03.example.internal"],
    "h200_8x": ["gpu-h01.example.internal", "gpu-h02.example.internal"],
}
HOSTS = sorted(host for hosts in CLASSES.values() for host in hosts)
# The example's fake secrets, as group_vars/all/vault.yml holds them once decrypted.
FAKE_HF_TOKEN = "hf_FAKE_example_token_not_a_real_secret"
FAKE_API_KEY = "FAKE-example-api-key-not-a-real-secret"
EXPECTED_CLASS_VARS = {
    "rtx6000_8x": {"sglang_model_path": "/models/kimi-k2.5", "sglang_version": "0.5.23", "nvidia_driver_branch": "580",
                   "sglang_service_server_args": {"served_model_name": "kimi-k2.5", "tp_size": 8,
                                                  "trust_remote_code": True}},
    "h200_8x": {"sglang_model_path": "/models/deepseek-v3", "sglang_version": "0.5.23", "nvidia_driver_branch": "580",
                "sglang_service_server_args": {"served_model_name": "deepseek-v3", "tp_size": 8,
                                               "trust_remote_code": True}},
}


def _env() -> dict[str, str]:
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    env.pop("ANSIBLE_VAULT_PASSWORD_FILE", None)
    env.setdefault("ANSIBLE_COLLECTIONS_PATH", str(Path(sys.prefix) / "collections"))
    return env


def _run(tool: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / tool), *args], cwd=str(REPO), env=_env(), capture_output=True, text=True,
                          timeout=300, check=False)


@pytest.fixture(name="inventory", scope="module")
def fixture_inventory() -> dict:
    run = _run("ansible-inventory", "-i", str(PROD), "--list", "--vault-password-file", str(PASSWORD_FILE))
    assert run.returncode == 0, run.stdout + run.stderr
    return json.loads(run.stdout)


def test_graph_shows_both_classes_under_sglang_servers():
    run = _run("ansible-inventory", "-i", str(PROD), "--graph", "--vault-password-file", str(PASSWORD_FILE))
    assert run.returncode == 0, run.stdout + run.stderr
    assert "@sglang_servers:" in run.stdout
    for group, hosts in CLASSES.items():
        assert f"|  |--@{group}:" in run.stdout, run.stdout
        for host in hosts:
            assert f"|--{host}" in run.stdout


def test_only_the_example_hosts(inventory):
    # Every other file in the inventory directory is an inventory source too: the example's password file is a .txt,
    # which Ansible skips, so that its one line never becomes a host.
    assert sorted(inventory["_meta"]["hostvars"]) == HOSTS
    assert not inventory.get("ungrouped", {}).get("hosts")
    assert sorted(inventory["sglang_servers"]["children"]) == sorted(CLASSES)
    for group, hosts in CLASSES.items():
        assert sorted(inventory[group]["hosts"]) == sorted(hosts)
    for host, hostvars in inventory["_meta"]["hostvars"].items():
        assert hostvars["ansible_host"].startswith(("192.0.2.", "198.51.100.")), host  # documentation ranges


def test_list_decrypts_the_vault_and_each_class_has_its_vars(inventory):
    for group, hosts in CLASSES.items():
        for host in hosts:
            hostvars = inventory["_meta"]["hostvars"][host]
            assert hostvars["vault_sglang_hf_token"] == FAKE_HF_TOKEN
            assert hostvars["vault_sglang_service_api_key"] == FAKE_API_KEY
            assert hostvars["sglang_hf_token"] == "{{ vault_sglang_hf_token }}"
            assert hostvars["sglang_service_api_key"] == "{{ vault_sglang_service_api_key }}"
            for name, value in EXPECTED_CLASS_VARS[group].items():
                assert hostvars[name] == value, (host, name)


def test_vault_file_is_encrypted_and_needed():
    text = (PROD / "group_vars" / "all" / "vault.yml").read_text()
    assert text.startswith("$ANSIBLE_VAULT;1.1;AES256\n")
    assert FAKE_HF_TOKEN not in text and FAKE_API_KEY not in text
    run = _run("ansible-inventory", "-i", str(PROD), "--list")
    assert run.returncode != 0 and "no vault secrets" in run.stderr, run.stdout + run.stderr


def test_variables_resolve_for_the_roles_on_each_class(tmp_path):
    """The mapped names template to the vault's values, and the pins go to this inventory's host_vars."""
    play = [{"hosts": "sglang_servers", "gather_facts": False, "tasks": [{
        "name": "resolved", "ansible.builtin.debug": {"msg": {
            "sglang_hf_token": "{{ sglang_hf_token }}",
            "sglang_service_api_key": "{{ sglang_service_api_key }}",
            "kv_tune_host_vars_dir": "{{ kv_tune_host_vars_dir }}",
            "kv_tune_report_dir": "{{ kv_tune_report_dir }}",
            "served_model_name": "{{ sglang_service_server_args.served_model_name }}"}}}]}]
    runner = ansible_runner.run(
        private_data_dir=str(tmp_path), playbook=play, inventory=str(PROD),
        cmdline=f"--vault-password-file {PASSWORD_FILE}", envvars=_env(), quiet=True)
    assert runner.status == "successful", runner.stdout.read()
    resolved = {event["event_data"]["host"]: event["event_data"]["res"]["msg"] for event in runner.events
                if event.get("event") == "runner_on_ok" and event["event_data"].get("task") == "resolved"}
    assert sorted(resolved) == HOSTS
    for group, hosts in CLASSES.items():
        for host in hosts:
            assert resolved[host] == {
                "sglang_hf_token": FAKE_HF_TOKEN, "sglang_service_api_key": FAKE_API_KEY,
                "kv_tune_host_vars_dir": str(PROD / "host_vars"), "kv_tune_report_dir": str(PROD / "kv_tune_reports"),
                "served_model_name": EXPECTED_CLASS_VARS[group]["sglang_service_server_args"]["served_model_name"]}


def test_group_vars_name_only_variables_the_roles_define():
    known = set()
    for spec in REPO.glob("roles/*/meta/argument_specs.yml"):
        for entry in yaml.safe_load(spec.read_text())["argument_specs"].values():
            known.update(entry.get("options", {}))
    for path in [PROD / "group_vars" / "all" / "main.yml", *sorted((PROD / "group_vars").glob("*.yml"))]:
        for name in yaml.safe_load(path.read_text()):
            assert name in known, f"{path.relative_to(REPO)}: {name} is no variable of the collection's roles"


def test_the_vaulted_variables_are_no_log():
    no_log = {}
    for spec in REPO.glob("roles/*/meta/argument_specs.yml"):
        for entry in yaml.safe_load(spec.read_text())["argument_specs"].values():
            no_log.update({name: option.get("no_log") for name, option in entry.get("options", {}).items()})
    for name in ("sglang_hf_token", "sglang_service_hf_token", "sglang_service_api_key", "kv_tune_api_key",
                 "rollout_api_key"):
        assert no_log[name] is True, name


@pytest.mark.parametrize("playbook", ["site.yml", "tune_kv.yml", "capacity_report.yml"])
def test_list_hosts_has_every_example_host(playbook):
    run = _run("ansible-playbook", str(REPO / "playbooks" / playbook), "-i", str(PROD), "--list-hosts",
               "--vault-password-file", str(PASSWORD_FILE))
    assert run.returncode == 0, run.stdout + run.stderr
    play = run.stdout.split("play #2", 1)[1]
    assert f"hosts ({len(HOSTS)}):" in play, run.stdout
    for host in HOSTS:
        assert f"      {host}\n" in play


@pytest.mark.parametrize("playbook, args, pattern", [
    ("site.yml", ["-i", str(REPO / "inventories" / "does-not-exist")], "sglang_servers"),
    ("tune_kv.yml", ["-i", str(REPO / "inventories" / "does-not-exist")], "sglang_servers"),
    ("tune_kv.yml", ["-i", str(PROD), "--vault-password-file", str(PASSWORD_FILE), "-e", "kv_tune_hosts=nosuchgroup"],
     "nosuchgroup"),
], ids=["site-no-inventory", "tune_kv-no-inventory", "tune_kv-no-such-group"])
def test_no_matching_host_fails(playbook, args, pattern):
    run = _run("ansible-playbook", str(REPO / "playbooks" / playbook), *args)
    assert run.returncode != 0, run.stdout + run.stderr
    assert f"No host matches '{pattern}' in the inventory" in run.stdout + run.stderr, run.stdout + run.stderr
    assert "nothing was done" in run.stdout + run.stderr

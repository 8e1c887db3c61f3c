# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Every ansible-playbook command README.md and docs/usage.md show, run as written from the checkout (the user's
environment: no ANSIBLE_CONFIG, the checkout's ansible.cfg), and the capacity report from the collection installed
from its built tarball, run from another directory without any ansible.cfg."""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FIXTURES, REPO

BIN = os.path.dirname(sys.executable)
VAULT = "inventories/prod/vault-password.example.txt"
FIELD_ROW = "| logged by SGLang | 0.88 | torch.bfloat16 | - | 10.42 | 159,277 |"


PAGES = ("README.md", "docs/usage.md")


def readme_commands(tool="ansible-playbook", pages=PAGES):
    """The ``tool`` commands of the ``pages``: lines of their code blocks (less a trailing comment, and the indent
    of a block in a list) and inline code spans."""
    found, in_block = [], False
    for line in (line.strip() for page in pages for line in (REPO / page).read_text().splitlines()):
        if line.startswith("```"):
            in_block = not in_block
        elif in_block and line.startswith(tool + " "):
            found.append(line.split("   #")[0].split("  #")[0].strip())
        elif not in_block:
            found += re.findall(r"`(%s [^`]+)`" % re.escape(tool), line)
    return found


def user_environment(**extra):
    """The environment of a user's shell with the venv on PATH: none of make's ANSIBLE_* settings."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("ANSIBLE_")}
    env.update(PATH=os.pathsep.join([BIN, env.get("PATH", "")]), ANSIBLE_NOCOLOR="1", **extra)
    return env


def run(argv, cwd, env, timeout=300):
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)


def test_the_readme_shows_the_commands_this_test_runs():
    commands = readme_commands(pages=("README.md",))
    assert len(commands) >= 7, commands
    assert len(readme_commands("llmserve-fleet", pages=("README.md",))) >= 2
    assert sum("inventories/local" in command for command in readme_commands()) >= 2, commands
    for playbook in ("site.yml", "tune_kv.yml", "rollout.yml", "capacity_report.yml"):
        assert any(playbook in command for command in commands), playbook


@pytest.mark.parametrize("command", sorted(set(readme_commands())))
def test_a_readme_command_runs_as_written(command):
    argv = shlex.split(command)
    if "inventories/prod" in argv:
        # The example fleet's hosts do not exist: its commands are checked up to the plays' hosts.
        argv += ["--list-hosts"] + ([] if "--vault-password-file" in argv else ["--vault-password-file", VAULT])
    done = run(argv, REPO, user_environment())
    assert done.returncode == 0, (command, done.stdout[-3000:], done.stderr[-3000:])
    if "capacity_report" in command and "inventories/local" in argv:
        assert FIELD_ROW in done.stdout, done.stdout[-3000:]


@pytest.fixture(name="collections", scope="module")
def fixture_collections(tmp_path_factory) -> Path:
    """The collection built into its tarball and installed from it, as a user gets it: its collections path."""
    where = tmp_path_factory.mktemp("installed")
    built = run([os.path.join(BIN, "ansible-galaxy"), "collection", "build", "--output-path", str(where), str(REPO)],
                where, user_environment())
    assert built.returncode == 0, built.stdout + built.stderr
    installed = run([os.path.join(BIN, "ansible-galaxy"), "collection", "install", "--force", "-p",
                     str(where / "collections"), str(next(where.glob("llmserve-sglang-*.tar.gz")))], where,
                    user_environment())
    assert installed.returncode == 0, installed.stdout + installed.stderr
    return where / "collections"


@pytest.mark.parametrize("command", sorted(set(readme_commands("llmserve-fleet"))))
def test_a_readme_llmserve_fleet_command_runs_as_written(command):
    # The example fleet's hosts do not exist: the command is run up to the hosts each play would touch.
    done = run(shlex.split(command) + ["--list-hosts"], REPO, user_environment())
    assert done.returncode == 0, (command, done.stdout[-3000:], done.stderr[-3000:])
    assert "gpu-r01.example.internal" in done.stdout, done.stdout[-3000:]
    # the playbook of the collection this checkout's ansible.cfg finds, as ansible-playbook run here would
    assert "playbook: %s/" % REPO in done.stdout or "playbook: %s/" % os.path.realpath(REPO) in done.stdout \
        or ".venv/collections/ansible_collections/llmserve/sglang/playbooks/" in done.stdout, done.stdout[:500]


def test_the_installed_collection_reports_from_paths_relative_to_where_it_runs(tmp_path, collections):
    work = tmp_path / "work"
    (work / "logs").mkdir(parents=True)
    shutil.copy(FIXTURES / "logs" / "field_kimi_k25_rtx6000_tp8_eagle3.log", work / "logs" / "field.log")
    shutil.copy(FIXTURES / "configs" / "kimi-k2.5-int4.json", work / "logs" / "config.json")
    (work / "hosts.yml").write_text("all:\n  hosts:\n    localhost:\n      ansible_connection: local\n"
                                    "      ansible_python_interpreter: \"{{ ansible_playbook_python }}\"\n")
    done = run(["ansible-playbook", "llmserve.sglang.capacity_report", "-i", "hosts.yml",
                "-e", "capacity_report_log_path=logs/field.log", "-e", "capacity_report_model_config=logs/config.json",
                "-e", "capacity_report_sglang_version=0.5.9", "-e", "capacity_report_output_dir=reports"],
               work, user_environment(ANSIBLE_COLLECTIONS_PATH=str(collections)))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    # Ansible's own defaults (JSON results): the report's lines are lines, not one string of escaped newlines.
    lines = [line.strip().rstrip(",") for line in done.stdout.splitlines()]
    assert '"%s"' % FIELD_ROW in lines, done.stdout[-3000:]
    assert "\\n|" not in done.stdout
    assert FIELD_ROW in (work / "reports" / "localhost.md").read_text()


def test_the_installed_collection_keeps_reports_out_of_itself(tmp_path, collections):
    """Where reports go when no directory is named (lookup llmserve.sglang.report_dir): the job's artifacts under
    ansible-runner, the working directory, and never the installed collection."""
    inside = collections / "ansible_collections" / "llmserve" / "sglang"

    def default_dir(cwd, **env):
        done = run(["ansible", "localhost", "-c", "local", "-m", "ansible.builtin.debug", "-a",
                    "msg={{ lookup('llmserve.sglang.report_dir', 'kv_tune_reports') }}"], cwd,
                   user_environment(ANSIBLE_COLLECTIONS_PATH=str(collections), HOME=str(tmp_path / "home"), **env))
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        return re.search(r'"msg": "([^"]+)"', done.stdout).group(1)

    assert default_dir(tmp_path) == str(tmp_path / "kv_tune_reports")
    assert default_dir(tmp_path, AWX_ISOLATED_DATA_DIR="/runner/artifacts/7") == "/runner/artifacts/7/kv_tune_reports"
    assert default_dir(inside) == str(tmp_path / "home" / "kv_tune_reports")


def test_the_console_command_installs_from_the_installed_collection(tmp_path, collections):
    """pip install <the installed collection>/cli, as the README says: llmserve-fleet then runs the installed
    collection's code, found where Ansible finds collections."""
    cli = collections / "ansible_collections" / "llmserve" / "sglang" / "cli"
    target = tmp_path / "site"
    pip = run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(cli)],
              tmp_path, user_environment())
    assert pip.returncode == 0, pip.stdout + pip.stderr
    env = user_environment(ANSIBLE_COLLECTIONS_PATH=str(collections), PYTHONPATH=str(target))
    shown = run([sys.executable, "-c", "import sys; from llmserve_sglang_fleet import main; sys.exit(main())",
                 "--help"], tmp_path, env)
    assert shown.returncode == 0 and "llmserve-fleet" in shown.stdout, shown.stdout + shown.stderr
    # The code it runs is the installed collection's, not this checkout's.
    where = run([sys.executable, "-c", WHICH_FLEET_VIEW], tmp_path, env)
    assert where.stdout.strip().startswith(str(collections)), where.stdout + where.stderr


WHICH_FLEET_VIEW = """
import contextlib, io
from llmserve_sglang_fleet import main
with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):
    main(["--help"])
from ansible_collections.llmserve.sglang.plugins.plugin_utils import fleet_view
print(fleet_view.__file__)
"""

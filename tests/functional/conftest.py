# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Run the collection's modules and playbooks for real, through ansible-runner, on localhost."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import ansible_runner
import pytest

REPO = Path(__file__).resolve().parents[2]

# ansible-runner starts ansible-playbook from PATH: use the one beside this interpreter (the venv's).
os.environ["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
FIXTURES = REPO / "tests" / "fixtures"


def _collections_path() -> str:
    # `make venv` links the checkout here as ansible_collections/llmserve/sglang.
    return os.environ.get("ANSIBLE_COLLECTIONS_PATH") or str(Path(sys.prefix) / "collections")


class Ansible:
    """Runs one module or one playbook on localhost and hands back what Ansible reported."""

    def __init__(self, tmp_path: Path):
        self.tmp_path = tmp_path
        self._n = 0

    def _run(self, envvars: dict | None = None, **kwargs) -> ansible_runner.Runner:
        self._n += 1
        private = self.tmp_path / f"run{self._n}"
        private.mkdir(parents=True)
        env = {
            "ANSIBLE_COLLECTIONS_PATH": _collections_path(),
            "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
            "ANSIBLE_NOCOLOR": "1",
        }
        env.update(envvars or {})
        return ansible_runner.run(
            private_data_dir=str(private),
            # In sglang_servers, the group the collection's playbooks run on by default.
            inventory={"all": {"children": {"sglang_servers": {"hosts": {"localhost": {
                "ansible_connection": "local",
                "ansible_python_interpreter": sys.executable,
            }}}}}},
            envvars=env,
            quiet=True,
            **kwargs,
        )

    def module(self, name: str, args: dict | None = None, check: bool = False,
               envvars: dict | None = None) -> dict:
        """Run `llmserve.sglang.<name>` once; return its result dict (with 'failed' set on failure)."""
        play = [{
            "hosts": "localhost",
            "gather_facts": False,
            "tasks": [{"name": "module under test", f"llmserve.sglang.{name}": args or {},
                       "register": "result", "ignore_errors": True}],
        }]
        runner = self._run(playbook=play, cmdline="--check" if check else None, envvars=envvars)
        for event in runner.events:
            if event.get("event") in ("runner_on_ok", "runner_on_failed") and \
                    event["event_data"].get("task") == "module under test":
                result = dict(event["event_data"]["res"])
                # ansible-core 2.19 leaves 'failed' out of the event's result; the event kind says it.
                result["failed"] = event["event"] == "runner_on_failed"
                return result
        raise AssertionError(f"module {name} produced no result; status={runner.status}\n"
                             + runner.stdout.read())

    def playbook(self, path: str | Path, extravars: dict | None = None,
                 envvars: dict | None = None) -> ansible_runner.Runner:
        """Run a playbook of the collection against localhost."""
        return self._run(playbook=str(Path(path).resolve()), extravars=extravars or {},
                         envvars=envvars, project_dir=str(REPO))


@pytest.fixture
def ansible(tmp_path: Path) -> Ansible:
    return Ansible(tmp_path)

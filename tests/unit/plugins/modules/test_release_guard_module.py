# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""release_guard, the module: armed, restored and disarmed on a venv, pins and a fact file in a temporary directory
(the test moves the guard's and kv_pin's paths there; cp really copies, systemctl and systemd-run are recorded)."""
from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import tempfile
from collections import namedtuple
from pathlib import Path
from unittest import mock

import pytest

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args

from ansible_collections.llmserve.sglang.plugins.module_utils.service import kv_pin, release_guard
from ansible_collections.llmserve.sglang.plugins.modules import release_guard as module

RUN = "1f2e3d4c"


@pytest.fixture
def host():
    """A host in a directory under /run (the venv's metadata is read only where root alone controls the way to it,
    which /tmp is not): a root-owned venv with sglang 0.5.9, one unit's pin and the fact file."""
    tmp_path = Path(tempfile.mkdtemp(prefix="release-guard-test-", dir="/run"))
    try:
        yield from _host(tmp_path)
    finally:
        shutil.rmtree(tmp_path)


def _host(tmp_path):
    site = tmp_path / "opt" / "venv" / "lib" / "python3.11" / "site-packages"
    (site / "sglang-0.5.9.dist-info").mkdir(parents=True)
    (site / "sglang-0.5.9.dist-info" / "METADATA").write_text("Name: sglang\nVersion: 0.5.9\n")
    (site / "sglang").mkdir()
    (site / "sglang" / "__init__.py").write_text("x = 1\n")
    (tmp_path / "pin.conf").write_text("pin 0.910\n")
    (tmp_path / "sglang_kv.fact").write_text('{"sglang.service": {"mem_fraction_static": 0.91}}\n')
    real_paths = kv_pin.paths

    def paths(unit, run_id=None):
        return dict(real_paths(unit, run_id), pin=str(tmp_path / "pin.conf"), lock=str(tmp_path / "lock"),
                    trial=str(tmp_path / "trial.conf"))

    with mock.patch.object(kv_pin, "paths", paths), \
            mock.patch.object(release_guard, "STATE_DIR", str(tmp_path / "state")), \
            mock.patch.object(release_guard, "SCRIPT_PATH", str(tmp_path / "llmserve-release-guard")), \
            mock.patch.object(release_guard, "UNIT_DIR", str(tmp_path / "units")):
        (tmp_path / "units").mkdir()
        yield tmp_path


Call = namedtuple("Call", "result commands")


def call(state, fail_cp=False, **args):
    """The module's result and the commands it ran (cp run for real)."""
    commands = []

    def run_command(self, argv, environ_update=None, **_kwargs):  # pylint: disable=unused-argument
        commands.append(list(argv))
        if argv[0] == "cp" and not fail_cp:
            done = subprocess.run(argv, capture_output=True, text=True, check=False)
            return done.returncode, done.stdout, done.stderr
        return (1, "", "cp: No space left on device") if argv[0] == "cp" else (0, "", "")

    stdout = io.StringIO()
    with patch_module_args(dict(args, run_id=RUN, state=state)), \
            mock.patch.object(basic.AnsibleModule, "run_command", run_command), \
            mock.patch.object(basic.AnsibleModule, "get_bin_path", lambda self, name, **_: "/usr/bin/" + name), \
            contextlib.redirect_stdout(stdout), pytest.raises(SystemExit):
        module.main()
    return Call(json.loads(stdout.getvalue().splitlines()[-1]), commands)


def armed(host, **args):
    return call("armed", **dict({"units": ["sglang.service"], "venv": str(host / "opt" / "venv"), "version": "0.5.10",
                                 "fact_path": str(host / "sglang_kv.fact")}, **args))


def test_armed_keeps_the_venv_the_pin_and_the_facts_and_starts_the_timer(host):
    done = armed(host)
    assert done.result["changed"] and done.result["armed"], done.result
    kept = host / "opt" / "venv.before-1f2e3d4c"
    assert done.result["kept"] == str(kept)
    assert "kept sglang 0.5.9" in done.result["why"] and "upgrade to 0.5.10" in done.result["why"]
    assert (kept / "lib" / "python3.11" / "site-packages" / "sglang" / "__init__.py").read_text() == "x = 1\n"
    data = json.loads((host / "state" / RUN / "manifest.json").read_text())
    assert (host / "state" / RUN / "kept-0").read_text() == "pin 0.910\n"
    assert data["saved"] == {str(host / "pin.conf"): str(host / "state" / RUN / "kept-0"),
                             str(host / "sglang_kv.fact"): str(host / "state" / RUN / "kept-1")}
    assert oct(os.stat(host / "state" / RUN / "manifest.json").st_mode & 0o777) == "0o600"
    script = (host / "llmserve-release-guard").read_text()
    assert script.startswith("#!") and "def decide(" in script
    assert done.commands[-2:] == [["/usr/bin/systemctl", "daemon-reload"],
                                  ["/usr/bin/systemctl", "enable", "--now", "llmserve-release-guard-1f2e3d4c.timer"]]
    assert sorted(os.listdir(host / "units")) == ["llmserve-release-guard-1f2e3d4c.service",
                                                  "llmserve-release-guard-1f2e3d4c.timer"]
    assert "ExecStart=%s 1f2e3d4c check" % (host / "llmserve-release-guard") in (
        host / "units" / "llmserve-release-guard-1f2e3d4c.service").read_text()
    # a second call of the same run keeps nothing more
    again = armed(host)
    assert (again.result["changed"], again.result["armed"], again.commands) == (False, True, [])


def test_armed_keeps_nothing_where_the_version_does_not_change(host):
    done = armed(host, version="0.5.9")
    assert (done.result["changed"], done.result["armed"], done.result["kept"]) == (False, False, None)
    assert "installed already" in done.result["why"] and done.commands == []
    assert not (host / "state").exists()


def test_a_copy_that_fails_leaves_nothing_half_armed(host):
    done = armed(host, fail_cp=True)
    assert done.result["failed"] and "No space left on device" in done.result["msg"], done.result
    assert "nothing was changed" in done.result["msg"]
    assert sorted(os.listdir(host / "opt")) == ["venv"] and not (host / "state" / RUN).exists()
    assert ["/usr/bin/systemctl", "enable", "--now", "llmserve-release-guard-1f2e3d4c.timer"] not in done.commands
    assert os.listdir(host / "units") == []


def test_armed_refuses_a_file_system_without_room_for_the_copy(host):
    statvfs = namedtuple("statvfs", "f_bavail f_frsize")
    with mock.patch.object(module.os, "statvfs", lambda _path: statvfs(1024, 4096)):
        done = armed(host)
    assert done.result["failed"] and "needs 1.0 GiB free beside it, and 0.0 GiB are" in done.result["msg"]
    assert done.commands == [] and not (host / "state").exists()


@pytest.mark.parametrize("args, message", [
    ({"units": ["sglang"]}, "systemd service name"),
    ({"interval": 2}, "interval must lie in"),
    ({"venv": "/nonexistent/venv"}, "no sglang distribution is installed"),
])
def test_armed_refuses_bad_input_before_any_change(host, args, message):
    done = armed(host, **args)
    assert done.result["failed"] and message in done.result["msg"], done.result
    assert done.commands == [] and not (host / "state").exists()


def test_restored_puts_the_kept_venv_back_and_retires_the_guard(host):
    armed(host)
    new = host / "opt" / "venv" / "lib" / "python3.11" / "site-packages"
    os.rename(new / "sglang-0.5.9.dist-info", new / "sglang-0.5.10.dist-info")   # the upgrade
    done = call("restored")
    assert (done.result["changed"], done.result["armed"]) == (True, False), done.result
    assert "is back in" in done.result["why"]
    assert sorted(os.listdir(new)) == ["sglang", "sglang-0.5.9.dist-info"]
    assert sorted(os.listdir(host / "opt")) == ["venv"] and not (host / "state" / RUN).exists()
    assert done.commands == [["/usr/bin/systemctl", "disable", "--now", "--no-block",
                              "llmserve-release-guard-1f2e3d4c.timer"], ["/usr/bin/systemctl", "daemon-reload"]]
    assert os.listdir(host / "units") == []
    # nothing kept any more: a second restore (a roll-back after the timer's) changes nothing
    assert call("restored").result["changed"] is False


def test_disarmed_removes_the_copy_and_leaves_the_new_release(host):
    armed(host)
    done = call("disarmed")
    assert (done.result["changed"], done.result["armed"]) == (True, False)
    assert sorted(os.listdir(host / "opt")) == ["venv"] and not (host / "state" / RUN).exists()
    assert os.listdir(host / "units") == []
    assert call("disarmed").result["changed"] is False


def test_armed_refuses_while_the_guard_of_another_run_is_still_armed(host):
    """A rollout killed mid-upgrade left its guard, which puts the host back once its locks lapse: a new rollout
    waits for that instead of keeping the half-upgraded release as the one to go back to."""
    (host / "state" / "9a8b7c6d").mkdir(parents=True)
    (host / "state" / "9a8b7c6d" / "manifest.json").write_text("{}")
    done = armed(host)
    assert done.result["failed"] and "the release guard of run 9a8b7c6d is still armed" in done.result["msg"]
    assert done.commands == [] and sorted(os.listdir(host / "state")) == ["9a8b7c6d"]

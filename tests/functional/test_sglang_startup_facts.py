# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""llmserve.sglang.sglang_startup_facts through ansible-runner on localhost: a log file, a string, a unit's journal
(through stand-ins for systemctl and journalctl), a missing file, unrelated text, check mode."""
from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
SAFE_PATH = os.pathsep.join([os.path.dirname(sys.executable), "/usr/local/bin", "/usr/bin", "/bin"])

# Stand-ins for systemctl and journalctl: they log their arguments and answer like the real commands for the
# two calls the module makes. INVOCATION is the unit's invocation ID ("" = none), JOURNAL_* the files served.
FAKE_SYSTEMCTL = r"""#!/usr/bin/env bash
echo "systemctl $*" >> "$(dirname "$0")/calls.log"
if [ "$1 $2 $3 $4" = "show -p InvocationID --value" ]; then echo "${INVOCATION:-}"; exit 0; fi
exit 1
"""
FAKE_JOURNALCTL = r"""#!/usr/bin/env bash
echo "journalctl $*" >> "$(dirname "$0")/calls.log"
case "$1" in
  _SYSTEMD_INVOCATION_ID=*) cat "$JOURNAL_INVOCATION" ;;
  -b) cat "$JOURNAL_BOOT" ;;
  *) echo "unexpected" >&2; exit 1 ;;
esac
"""


def _install(directory: Path, name: str, body: str) -> None:
    path = directory / name
    path.write_text(body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


@pytest.fixture
def fake_systemd(tmp_path: Path) -> Path:
    directory = tmp_path / "bin"
    directory.mkdir()
    _install(directory, "systemctl", FAKE_SYSTEMCTL)
    _install(directory, "journalctl", FAKE_JOURNALCTL)
    return directory


def _check_grok2(result: dict) -> None:
    assert not result.get("failed"), result.get("msg")
    assert result["changed"] is False
    assert result["format"] == "classic" and result["boots"] == 1 and result["ready"] is True
    assert result["failure"] is None
    assert result["pre_load_free_gib"] == 77.43 and result["post_load_free_gib"] == 40.69
    assert result["weights_gib"] == 36.73 and result["kv_tokens"] == 903439
    assert result["max_total_num_tokens"] == 903439 and result["available_gpu_mem_gib"] == 10.26
    assert result["tp_size"] == 8 and len(result["ranks"]) == 8
    assert result["server_args"]["mem_fraction_static"] == 0.831
    assert "ansible_facts" not in result


def test_path(ansible):
    path = LOGS / "classic_tp8_grok2_fp8_h100_ready.log"
    result = ansible.module("sglang_startup_facts", {"path": str(path)})
    _check_grok2(result)
    assert result["source"] == "path:%s" % path


def test_path_in_check_mode(ansible):
    result = ansible.module("sglang_startup_facts", {"path": str(LOGS / "classic_tp8_grok2_fp8_h100_ready.log")},
                            check=True)
    _check_grok2(result)


def test_text_with_a_failure_is_not_a_module_failure(ansible):
    log = (LOGS / "current_init_oom_glm47_flash_rtx5090_excerpt.log").read_text()
    result = ansible.module("sglang_startup_facts", {"text": log})
    assert not result.get("failed"), result.get("msg")
    assert result["source"] == "text"
    assert result["failure"]["kind"] == "init_oom"
    assert result["failure"]["line"].startswith("ValueError: Loaded weights leave no GPU memory for the KV cache")
    assert result["pre_load_free_gib"] == 30.06 and result["post_load_free_gib"] == 0.0
    assert result["kv_tokens"] is None


def test_missing_file_is_named(ansible, tmp_path):
    missing = tmp_path / "nowhere" / "server.log"
    result = ansible.module("sglang_startup_facts", {"path": str(missing)})
    assert result["failed"]
    assert result["msg"].startswith("cannot read the SGLang log file %s:" % missing)
    assert "No such file or directory" in result["msg"]


def test_unrelated_text_fails_clearly(ansible):
    result = ansible.module("sglang_startup_facts", {"text": "hello\nworld\n"})
    assert result["failed"]
    assert result["msg"].startswith("text: no SGLang startup record in the text (2 lines, first: 'hello')")


def test_empty_file_fails_clearly(ansible, tmp_path):
    empty = tmp_path / "empty.log"
    empty.write_text("")
    result = ansible.module("sglang_startup_facts", {"path": str(empty)})
    assert result["failed"]
    assert result["msg"] == "path:%s: the SGLang startup log is empty: there is no text to parse" % empty


def test_options_are_mutually_exclusive_and_one_is_required(ansible):
    both = ansible.module("sglang_startup_facts", {"text": "x", "path": "/tmp/x"})
    assert both["failed"] and "mutually exclusive" in both["msg"]
    none = ansible.module("sglang_startup_facts", {})
    assert none["failed"] and "one of the following is required" in none["msg"]


def test_unit_reads_the_last_invocation(ansible, fake_systemd):
    env = {"PATH": str(fake_systemd) + os.pathsep + SAFE_PATH, "INVOCATION": "9c2d1f0e8a6b4c3d",
           "JOURNAL_INVOCATION": str(LOGS / "classic_tp8_grok2_fp8_h100_ready.log"),
           "JOURNAL_BOOT": str(LOGS / "journal_two_boots_cat.log")}
    result = ansible.module("sglang_startup_facts", {"unit": "sglang.service"}, envvars=env)
    _check_grok2(result)
    assert result["source"] == "unit:sglang.service invocation=9c2d1f0e8a6b4c3d"
    calls = (fake_systemd / "calls.log").read_text().splitlines()
    assert calls == ["systemctl show -p InvocationID --value sglang.service",
                     "journalctl _SYSTEMD_INVOCATION_ID=9c2d1f0e8a6b4c3d -o cat --no-pager"]


def test_unit_without_invocation_falls_back_to_the_boot_journal(ansible, fake_systemd):
    env = {"PATH": str(fake_systemd) + os.pathsep + SAFE_PATH, "INVOCATION": "",
           "JOURNAL_INVOCATION": "/nonexistent", "JOURNAL_BOOT": str(LOGS / "journal_two_boots_cat.log")}
    result = ansible.module("sglang_startup_facts", {"unit": "sglang.service"}, check=True, envvars=env)
    assert not result.get("failed"), result.get("msg")
    assert result["source"] == "unit:sglang.service"
    assert result["boots"] == 2 and result["ready"] is True
    assert result["server_args"]["model_path"] == "Qwen/Qwen2.5-7B-Instruct"
    calls = (fake_systemd / "calls.log").read_text().splitlines()
    assert calls[-1] == "journalctl -b -u sglang.service -o cat --no-pager"

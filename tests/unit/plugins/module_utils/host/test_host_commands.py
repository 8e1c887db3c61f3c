# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""host_commands: systemctl show through an AnsibleModule-like runner, in the C locale."""
from __future__ import annotations

import re

import pytest

from ansible_collections.llmserve.sglang.plugins.module_utils.host import host_commands


class FakeModule:
    def __init__(self, rc=0, out="", err="", systemctl="/usr/bin/systemctl"):
        self.result, self.systemctl, self.calls = (rc, out, err), systemctl, []

    def get_bin_path(self, name):
        return self.systemctl if name == "systemctl" else None

    def run_command(self, argv, environ_update=None):
        self.calls.append((argv, environ_update))
        return self.result


def test_unit_properties_asks_for_the_names_and_parses_the_lines():
    module = FakeModule(out="MainPID=4242\nActiveState=active\nInvocationID=0b5c=d\n")
    props = host_commands.unit_properties(module, "sglang.service", ["MainPID", "ActiveState", "InvocationID"])
    assert props == {"MainPID": "4242", "ActiveState": "active", "InvocationID": "0b5c=d"}
    assert module.calls == [(["/usr/bin/systemctl", "show", "sglang.service", "--property=MainPID,ActiveState,InvocationID"],
                             host_commands.C_LOCALE)]


@pytest.mark.parametrize("module, message", [
    (FakeModule(rc=1, err="Failed to connect to bus\n"), "systemctl show sglang.service failed (rc 1): Failed to connect"),
    (FakeModule(systemctl=None), "systemctl is not installed"),
])
def test_failures_raise_with_the_reason(module, message):
    with pytest.raises(host_commands.SystemctlError, match=re.escape(message)):
        host_commands.unit_properties(module, "sglang.service", ["MainPID"])


def test_a_property_printed_once_per_entry_keeps_every_entry():
    props = host_commands.parse_show("EnvironmentFiles=/etc/sglang/a.env (ignore_errors=no)\n"
                                     "EnvironmentFiles=/etc/sglang/extra.env (ignore_errors=yes)\nUser=sglang\n")
    assert host_commands.environment_files(props["EnvironmentFiles"]) == ["/etc/sglang/a.env", "/etc/sglang/extra.env"]
    assert host_commands.environment_files("") == [] and props["User"] == "sglang"


@pytest.mark.parametrize("text, expected", [
    ("CUDA_VISIBLE_DEVICES=0,1\n", "0,1"),
    ("# CUDA_VISIBLE_DEVICES=7\n; CUDA_VISIBLE_DEVICES=6\nHF_TOKEN=x\n", None),
    ("CUDA_VISIBLE_DEVICES='4,5'\nCUDA_VISIBLE_DEVICES = \"6,7\"\n", "6,7"),     # the last one wins, quotes go
    ("CUDA_VISIBLE_DEVICES_X=1\n", None),
])
def test_one_variable_of_an_environment_file_as_systemd_reads_it(text, expected):
    assert host_commands.environment_variable(text, "CUDA_VISIBLE_DEVICES") == expected

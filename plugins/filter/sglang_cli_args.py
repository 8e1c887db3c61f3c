# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Render SGLang server arguments: sglang_cli_args (a dict -> argv list) and sglang_exec_start (argv -> one
systemd ExecStart= value). The logic lives in module_utils/command_line.py, which the sglang_service role's units
share. Documentation: sglang_cli_args.yml and sglang_exec_start.yml beside this file."""
from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.llmserve.sglang.plugins.module_utils import command_line
from ansible_collections.llmserve.sglang.plugins.module_utils.command_line import CommandLineError


def sglang_cli_args(server_args):
    """{'tp_size': 8, 'enable_dp_attention': True, 'cuda_graph_bs': [1, 2, 4]} ->
    ['--tp-size', '8', '--enable-dp-attention', '--cuda-graph-bs', '1', '2', '4']."""
    try:
        return command_line.cli_args(server_args)
    except CommandLineError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def sglang_exec_start(value, command=None):
    """A dict of server arguments (rendered with sglang_cli_args) or an argv list, after `command` (the executable
    and its first arguments), as one string for ExecStart=."""
    try:
        return command_line.exec_start(value, command=command)
    except CommandLineError as exc:
        raise AnsibleFilterError(str(exc)) from exc


class FilterModule(object):
    def filters(self):
        return {
            "sglang_cli_args": sglang_cli_args,
            "sglang_exec_start": sglang_exec_start,
        }

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filter sglang_cli_args: Turn a dictionary of SGLang server arguments into an argv list."""
from __future__ import annotations

DOCUMENTATION = r"""
name: sglang_cli_args
short_description: Turn a dictionary of SGLang server arguments into an argv list
version_added: 1.0.0
author:
  - llmserve.sglang contributors (@llmserve)
description:
  - Each key becomes a flag, C(--) followed by the key with C(_) turned into C(-) (V(tp_size) -> C(--tp-size)).
  - V(true) gives the bare flag; V(false) and V(null) leave the flag out.
  - A list gives the flag followed by each item, as SGLang's C(nargs="+") options expect
    (C(--cuda-graph-bs 1 2 4)); an empty list leaves the flag out.
  - A dictionary gives the flag followed by its compact JSON (for C(--json-model-override-args)).
  - Numbers are given as their text; strings are passed as they are, one argv element each.
  - Keys must be flag names (lowercase letters and digits, with single C(_) or C(-) between them, without the
    leading C(--)); anything else fails.
  - The order of the dictionary is kept.
options:
  _input:
    description: The server arguments.
    type: dict
    required: true
seealso:
  - plugin: llmserve.sglang.sglang_exec_start
    plugin_type: filter
"""

EXAMPLES = r"""
- name: Build the command line
  ansible.builtin.set_fact:
    sglang_argv: "{{ ['python3', '-m', 'sglang.launch_server'] + (server_args | llmserve.sglang.sglang_cli_args) }}"
  vars:
    server_args:
      model_path: /models/Kimi-K2.5
      tp_size: 8
      mem_fraction_static: 0.88
      enable_dp_attention: false
      trust_remote_code: true
      cuda_graph_bs: [1, 2, 4, 8]
      json_model_override_args: {rope_scaling: {type: yarn, factor: 2}}
  # ['python3', '-m', 'sglang.launch_server', '--model-path', '/models/Kimi-K2.5', '--tp-size', '8',
  #  '--mem-fraction-static', '0.88', '--trust-remote-code', '--cuda-graph-bs', '1', '2', '4', '8',
  #  '--json-model-override-args', '{"rope_scaling":{"type":"yarn","factor":2}}']
"""

RETURN = r"""
_value:
  description: The argv elements, all strings.
  type: list
  elements: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.llmserve.sglang.plugins.plugin_utils.unit_files import command_line
from ansible_collections.llmserve.sglang.plugins.plugin_utils.unit_files.command_line import CommandLineError


def sglang_cli_args(server_args):
    """{'tp_size': 8, 'enable_dp_attention': True, 'cuda_graph_bs': [1, 2, 4]} ->
    ['--tp-size', '8', '--enable-dp-attention', '--cuda-graph-bs', '1', '2', '4']."""
    try:
        return command_line.cli_args(server_args)
    except CommandLineError as exc:
        raise AnsibleFilterError(str(exc)) from exc


class FilterModule:
    def filters(self):
        return {"sglang_cli_args": sglang_cli_args}

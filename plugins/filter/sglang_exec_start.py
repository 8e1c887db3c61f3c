# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filter sglang_exec_start: Render SGLang server arguments as one systemd ExecStart= value."""
from __future__ import annotations

DOCUMENTATION = r"""
name: sglang_exec_start
short_description: Render SGLang server arguments as one systemd ExecStart= value
version_added: 1.0.0
author:
  - llmserve.sglang contributors (@llmserve)
description:
  - Takes server arguments (a dictionary, rendered as P(llmserve.sglang.sglang_cli_args#filter) does) or an argv
    list, puts O(command) in front, and quotes every element for a systemd unit's C(ExecStart=).
  - "Quoting follows systemd.service(5), \"Command lines\", and systemd.syntax(7), \"Quoting\": every C(%) becomes
    C(%%) (specifiers are expanded before unquoting, inside quotes too), every C($) becomes C($$) (environment
    variable substitution), and an element holding whitespace, quotes, backslashes, C(;) or control characters,
    or an empty one, is put in double quotes with C-style escapes (C(\\\\), C(\\\"), C(\\n), C(\\t), C(\\xNN))."
  - The executable must not start with one of C(@-:+!|), which systemd reads as C(ExecStart=) prefixes.
options:
  _input:
    description: Server arguments (a dictionary) or an argv list.
    type: raw
    required: true
  command:
    description: The executable and its first arguments, put before the server arguments.
    type: list
    elements: str
seealso:
  - plugin: llmserve.sglang.sglang_cli_args
    plugin_type: filter
  - name: systemd.service(5), Command lines
    description: How systemd splits and unquotes C(ExecStart=).
    link: https://www.freedesktop.org/software/systemd/man/latest/systemd.service.html#Command%20lines
  - name: systemd.syntax(7), Quoting
    description: The quotes and C escapes systemd accepts.
    link: https://www.freedesktop.org/software/systemd/man/latest/systemd.syntax.html#Quoting
"""

EXAMPLES = r"""
- name: Write the unit's ExecStart line
  ansible.builtin.copy:
    dest: /etc/systemd/system/sglang.service.d/exec.conf
    content: |
      [Service]
      ExecStart=
      ExecStart={{ server_args | llmserve.sglang.sglang_exec_start(command=['/opt/sglang/venv/bin/python', '-m', 'sglang.launch_server']) }}
    mode: "0644"
  vars:
    server_args:
      model_path: /models/My Model
      tp_size: 8
      served_model_name: 100% "mine" $HOME
"""

RETURN = r"""
_value:
  description: The C(ExecStart=) value, one line.
  type: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.llmserve.sglang.plugins.plugin_utils.unit_files import command_line
from ansible_collections.llmserve.sglang.plugins.plugin_utils.unit_files.command_line import CommandLineError


def sglang_exec_start(value, command=None):
    """A dict of server arguments (rendered with sglang_cli_args) or an argv list, after `command` (the executable
    and its first arguments), as one string for ExecStart=."""
    try:
        return command_line.exec_start(value, command=command)
    except CommandLineError as exc:
        raise AnsibleFilterError(str(exc)) from exc


class FilterModule:
    def filters(self):
        return {"sglang_exec_start": sglang_exec_start}

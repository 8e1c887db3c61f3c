# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filter launch_abspath: A path a user passed, relative to where ansible-playbook was started."""
from __future__ import annotations

DOCUMENTATION = r"""
name: launch_abspath
short_description: A path a user passed, relative to where ansible-playbook was started
version_added: 1.0.0
author:
  - llmserve.sglang contributors (@llmserve)
description:
  - An absolute path (after C(~) is expanded) is returned unchanged, an empty one as it is.
  - A relative path is joined to the working directory of ansible-playbook on the controller (under
    ansible-runner, its project directory). A module on a local connection runs in the playbook's directory, so a
    relative path given to it as it is would name a file beside the playbook, not where the user typed the command.
  - The result names the file the module will read; a module that cannot read it says so with that path.
options:
  _input:
    description: The path.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Read a recorded startup log named relative to where ansible-playbook runs
  llmserve.sglang.sglang_startup_facts:
    path: "{{ 'logs/sglang.log' | llmserve.sglang.launch_abspath }}"
"""

RETURN = r"""
_value:
  description: The absolute path, or the empty input.
  type: str
"""

import os

from ansible.errors import AnsibleFilterError


def launch_abspath(path):
    """``path`` unchanged when it is absolute or empty; a relative one joined to the directory ansible-playbook was
    started in (its working directory, which Ansible keeps; a module on a local connection runs in the playbook's
    directory instead, so a relative path handed to it as it is would name a file there)."""
    if path is None or path == "":
        return path
    if not isinstance(path, str):
        raise AnsibleFilterError("launch_abspath expects a path string, got %s" % type(path).__name__)
    path = os.path.expanduser(path)
    return path if os.path.isabs(path) else os.path.normpath(os.path.join(os.getcwd(), path))


class FilterModule:
    def filters(self):
        return {"launch_abspath": launch_abspath}

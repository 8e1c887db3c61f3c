# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filter file_name: A host's or unit's name as one file name, or an error."""
from __future__ import annotations

DOCUMENTATION = r"""
name: file_name
short_description: A host's or unit's name as one file name, or an error
version_added: 1.0.0
author:
  - llmserve.sglang contributors (@llmserve)
description:
  - Reports and host_vars files are named after inventory hosts. A name with a C(/) or a NUL, or C(.) or C(..),
    would put the file outside its directory (or on another host's); such a name fails the task, naming it.
  - Gives the name unchanged otherwise.
options:
  _input:
    description: The name (an inventory host name, a unit).
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Write a report named after the host
  ansible.builtin.copy:
    dest: "reports/{{ inventory_hostname | llmserve.sglang.file_name }}.md"
    content: "..."
    mode: "0644"
"""

RETURN = r"""
_value:
  description: The name, unchanged.
  type: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.llmserve.sglang.plugins.plugin_utils.plain import plain
from ansible_collections.llmserve.sglang.plugins.module_utils import checks


def file_name(name):
    """``name`` when it is one file name inside a directory; AnsibleFilterError otherwise."""
    try:
        return checks.file_name("The name", plain(name))
    except checks.InvalidInput as exc:
        raise AnsibleFilterError(str(exc)) from None


class FilterModule:
    def filters(self):
        return {"file_name": file_name}

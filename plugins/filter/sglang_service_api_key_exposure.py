# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filter sglang_service_api_key_exposure: Whether local users can read the server's API key from its command line."""
from __future__ import annotations

DOCUMENTATION = r"""
name: sglang_service_api_key_exposure
short_description: Whether local users can read the server's API key from its command line
version_added: 1.0.0
author:
  - llmserve.sglang contributors (@llmserve)
description:
  - SGLang reads its API key from no environment variable, only C(--api-key), so the key is on the server's
    command line. Unless C(/proc) is mounted with C(hidepid) (1, 2, 4, noaccess, invisible, ptraceable), every
    local user reads it from C(/proc/<pid>/cmdline).
  - Gives the warning for the operator (what is exposed and the mitigation), or an empty string when no key is set
    or C(/proc) hides other users' processes (a C(gid=) exception is named).
options:
  _input:
    description: The text of C(/proc/self/mounts) on the host.
    type: str
    required: true
  api_key_set:
    description: Whether the servers have an API key.
    type: bool
    required: true
"""

EXAMPLES = r"""
- name: Warn when local users can read the API key
  ansible.builtin.debug:
    msg: "{{ mounts_text | llmserve.sglang.sglang_service_api_key_exposure(true) }}"
"""

RETURN = r"""
_value:
  description: The warning, or an empty string.
  type: str
"""

from ansible_collections.llmserve.sglang.plugins.plugin_utils.plain import plain
from ansible_collections.llmserve.sglang.plugins.plugin_utils.unit_files.service_units import api_key_exposure


def sglang_service_api_key_exposure(mounts, api_key_set):
    """The warning when local users can read the API key from the server's command line, else ""."""
    return api_key_exposure(plain(mounts), bool(api_key_set))


class FilterModule:
    def filters(self):
        return {"sglang_service_api_key_exposure": sglang_service_api_key_exposure}

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filter kv_watch_unit: the headroom watch's unit of a server unit."""
from __future__ import annotations

DOCUMENTATION = r"""
name: kv_watch_unit
short_description: The headroom watch's unit of a server unit
version_added: 1.0.0
author:
  - llmserve.sglang contributors (@llmserve)
description:
  - C(llmserve-kv-watch-<name>.service) for C(<name>.service), and C(llmserve-kv-watch-<name>-<instance>.service) for
    C(<name>@<instance>.service), the unit the role llmserve.sglang.sglang_service installs with
    C(sglang_service_kv_watch).
  - Its state file is C(/var/lib/<the watch's unit without .service>/windows.jsonl), the unit's C(StateDirectory=).
options:
  _input:
    description: The server's unit, such as C(sglang.service) or C(sglang@a.service).
    type: str
    required: true
"""

EXAMPLES = r"""
- name: The watch of sglang@a.service
  ansible.builtin.debug:
    msg: "{{ 'sglang@a.service' | llmserve.sglang.kv_watch_unit }}"   # llmserve-kv-watch-sglang-a.service
"""

RETURN = r"""
_value:
  description: The watch's unit name.
  type: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.llmserve.sglang.plugins.plugin_utils.plain import plain
from ansible_collections.llmserve.sglang.plugins.module_utils.watch.settings import WatchError, watch_unit


def kv_watch_unit(unit):
    try:
        return watch_unit(plain(unit))
    except WatchError as exc:
        raise AnsibleFilterError("kv_watch_unit: %s" % exc) from exc


class FilterModule:
    def filters(self):
        return {"kv_watch_unit": kv_watch_unit}

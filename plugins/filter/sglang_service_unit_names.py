# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filter sglang_service_unit_names: The systemd units of the sglang_service role's servers."""
from __future__ import annotations

DOCUMENTATION = r"""
name: sglang_service_unit_names
short_description: The systemd units of the sglang_service role's servers
version_added: 1.0.0
author:
  - llmserve.sglang contributors (@llmserve)
description:
  - C(<name>@<instance>.service) per entry of C(sglang_service_instances), else C(<name>.service); the same names
    P(llmserve.sglang.sglang_service_units#filter) gives, without composing the units.
options:
  _input:
    description: C(sglang_service_instances) (entries with a C(name)).
    type: list
    elements: dict
    required: true
  name:
    description: C(sglang_service_name), the units' base name.
    type: str
    default: sglang
"""

EXAMPLES = r"""
- name: The units to tune
  ansible.builtin.set_fact:
    units: "{{ sglang_service_instances | llmserve.sglang.sglang_service_unit_names('sglang') }}"
"""

RETURN = r"""
_value:
  description: The unit names, in the order of the instances.
  type: list
  elements: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.llmserve.sglang.plugins.plugin_utils.plain import plain
from ansible_collections.llmserve.sglang.plugins.plugin_utils.unit_files.service_units import ServiceUnitsError, unit_names


def sglang_service_unit_names(instances, name="sglang"):
    """The unit names of the role's servers (``sglang@a.service``, ..., or ``sglang.service``)."""
    try:
        return unit_names(plain(instances), name=plain(name))
    except ServiceUnitsError as exc:
        raise AnsibleFilterError("sglang_service_unit_names: %s" % exc) from exc


class FilterModule:
    def filters(self):
        return {"sglang_service_unit_names": sglang_service_unit_names}

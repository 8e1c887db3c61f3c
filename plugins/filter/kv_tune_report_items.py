# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filter kv_tune_report_items: The reports of a KV tuning result, one per unit that was searched."""
from __future__ import annotations

DOCUMENTATION = r"""
name: kv_tune_report_items
short_description: The reports of a KV tuning result, one per unit that was searched
version_added: 1.0.0
author:
  - llmserve.sglang contributors (@llmserve)
description:
  - Takes what M(llmserve.sglang.kv_tune) returned for a host and lists the units it searched (tuned, or ended
    without a stable value), each with the name of its report files.
  - The name is the host, or C(<host>_sglang@a) for one of several units of a host.
options:
  _input:
    description: The registered result of M(llmserve.sglang.kv_tune).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Write the Markdown reports
  ansible.builtin.copy:
    dest: "reports/{{ item.name }}.md"
    content: "{{ item.report }}"
    mode: "0644"
  loop: "{{ tune | llmserve.sglang.kv_tune_report_items }}"
  delegate_to: localhost
"""

RETURN = r"""
_value:
  description: One entry per unit searched, C(name), C(unit), C(status), C(line), C(result) (the JSON report) and
    C(report) (Markdown); empty when nothing was searched.
  type: list
  elements: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.llmserve.sglang.plugins.module_utils.service.host_units import report_items
from ansible_collections.llmserve.sglang.plugins.plugin_utils.plain import plain


def kv_tune_report_items(outcome):
    """[{name, unit, status, line, result, report}] of the units that kv_tune searched."""
    if outcome is not None and not hasattr(outcome, "get"):
        raise AnsibleFilterError("kv_tune_report_items expects what kv_tune returned, got %s" % type(outcome).__name__)
    return report_items(plain(dict(outcome)) if outcome is not None else None)


class FilterModule:
    def filters(self):
        return {"kv_tune_report_items": kv_tune_report_items}

#!/usr/bin/python
# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

DOCUMENTATION = r"""
module: kv_tune_report
short_description: One host's KV tuning reports, written on the controller
version_added: 1.0.0
author:
  - llmserve.sglang contributors (@llmserve)
description:
  - An action plugin that runs on the controller. It takes what M(llmserve.sglang.kv_tune) returned for a host and
    writes, for each unit it searched (tuned, or ended without a stable value), C(<name>.json) (the result) and
    C(<name>.md) (the report) in O(report_dir). The name is the host, or C(<host>_sglang@a) for one of several units
    of a host (P(llmserve.sglang.kv_tune_report_items#filter)).
  - With O(host_vars_dir), the pins of the units tuned to a new value also go to
    C(<host_vars_dir>/<inventory_hostname>/kv_tune.yml), as C(kv_tune_pinned), for an inventory kept in source
    control. The host's drop-ins and fact file stay authoritative.
  - Each file is written atomically, and only when its content changes.
options:
  outcome:
    description: The registered result of M(llmserve.sglang.kv_tune) for this host.
    type: dict
    required: true
  report_dir:
    description: The directory of the reports on the controller; made when missing.
    type: path
    required: true
  host_vars_dir:
    description: The controller's host_vars directory the pins also go to; empty for none.
    type: path
    default: ""
attributes:
  check_mode:
    support: full
    details: In check mode it says which files would change, without writing them.
extends_documentation_fragment:
  - llmserve.sglang.attributes
  - llmserve.sglang.attributes.action_plugin
seealso:
  - module: llmserve.sglang.kv_tune
  - module: llmserve.sglang.kv_tune_summary
"""

EXAMPLES = r"""
- name: Tune the unit
  llmserve.sglang.kv_tune:
    units: [sglang.service]
  register: tune

- name: Its reports, and its pin in the inventory's host_vars
  llmserve.sglang.kv_tune_report:
    outcome: "{{ tune }}"
    report_dir: "{{ playbook_dir }}/kv_tune_reports"
    host_vars_dir: "{{ inventory_dir }}/host_vars"
"""

RETURN = r"""
files:
  description: Every file of the host's reports, written now or already holding the same content.
  returned: always
  type: list
  elements: str
  sample: ["/home/ops/kv_tune_reports/gpu1.json", "/home/ops/kv_tune_reports/gpu1.md"]
written:
  description: The files written (in check mode, that would be written).
  returned: always
  type: list
  elements: str
reports:
  description: One entry per unit searched, with C(name) (of its report files), C(unit) and C(line).
  returned: always
  type: list
  elements: dict
"""

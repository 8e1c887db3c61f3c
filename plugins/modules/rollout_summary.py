#!/usr/bin/python
# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

DOCUMENTATION = r"""
module: rollout_summary
short_description: The fleet summary of a rollout, one row per server, written to rollout_summary.json on the controller
version_added: 1.0.0
author:
  - llmserve.sglang contributors (@llmserve)
description:
  - An action plugin that runs on the controller. It reads the outcome each host of O(hosts) recorded in the rollout
    role (as O(result_var)) and prints one line per server (a host's, or each of its servers where it has several).
  - It writes the rows to C(rollout_summary.json) in O(report_dir), and changes nothing when the file already holds
    them.
  - A host without an outcome is named as not started when it has not had its turn (it is in O(pending), or in a
    later serial batch of this play), else (unreachable, or failed before the rollout began on it) as without
    outcome.
options:
  hosts:
    description: The hosts of the rollout play; V(localhost) is skipped.
    type: list
    elements: str
    required: true
  report_dir:
    description: The directory of the summary on the controller.
    type: path
    required: true
  result_var:
    description: The variable each host recorded its outcome in.
    type: str
    default: rollout_outcome
  pending:
    description:
      - Hosts that a later play of the playbook takes; without an outcome they are named as not started. Hosts of a
        later serial batch of this play are named so without it.
    type: list
    elements: str
    default: []
  stats_name:
    description:
      - The name the summary's C(stats) are handed on as, as M(ansible.builtin.set_stats) would, not per host and
        replaced by each batch, so that the last one holds every host. ansible-runner returns them as
        C(artifact_data), and an AWX workflow passes them to its next job. An empty name hands nothing on.
    type: str
    default: llmserve_rollout
attributes:
  check_mode:
    support: full
    details: In check mode it prints the rows and says whether rollout_summary.json would change, without writing it.
extends_documentation_fragment:
  - llmserve.sglang.attributes
  - llmserve.sglang.attributes.action_plugin
seealso:
  - module: llmserve.sglang.kv_tune_summary
"""

EXAMPLES = r"""
- name: At the end of each serial batch, once, on the controller
  llmserve.sglang.rollout_summary:
    hosts: "{{ ansible_play_hosts_all }}"
    report_dir: "{{ playbook_dir }}/rollout_reports"
  run_once: true
  delegate_to: localhost
"""

RETURN = r"""
rows:
  description: One row per server, in host order, with C(host), C(server) (the host, or V(host/sglang@a) where it has
    several), C(status) (V(upgraded), V(retuned), V(unchanged), V(rolled_back), V(rollback_failed), V(not_upgraded),
    V(undrain_failed), V(not_serving), V(not_started), V(unknown)) and C(line), and where known C(unit), C(phase),
    C(before), C(after) (SGLang and driver versions, model path), C(pin_before), C(pin_after) (value and verified
    pool tokens), C(retune), C(cause) (why a failure was or was not a lack of memory) and C(error).
  returned: always
  type: list
  elements: dict
stats:
  description:
    - What the rollout hands on to the next job (as O(stats_name)), with C(hosts) (the rows), C(counts) (rows per
      status), C(failed) (the hosts with a server not left upgraded, re-tuned or unchanged) and C(report_dir).
  returned: always
  type: dict
  sample: {"hosts": [], "counts": {"upgraded": 4}, "failed": [], "report_dir": "/runner/artifacts/1/rollout_reports"}
path:
  description: The summary file.
  returned: always
  type: str
  sample: /home/ops/rollout_reports/rollout_summary.json
"""

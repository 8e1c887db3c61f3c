#!/usr/bin/python
# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

DOCUMENTATION = r"""
module: kv_tune_summary
short_description: The fleet summary of a KV tuning run, one row per host, written to summary.json on the controller
version_added: 1.0.0
author:
  - llmserve.sglang contributors (@llmserve)
description:
  - An action plugin that runs on the controller. It reads the result each host of O(hosts) registered from
    M(llmserve.sglang.kv_tune) (as O(result_var)) and prints one line per host.
  - It writes the rows to C(summary.json) in O(report_dir), and changes nothing when the file already holds them.
  - A host whose pin held keeps what its last tune found (value, tokens, when). A host without a result is named as
    not started when it has not had its turn (it is in O(pending), or in a later serial batch of this play), else as
    not tuned (it could not be reached, or failed before the tune), left on its last-known-good value.
  - Run it once at the end of every serial batch (C(run_once), in an C(always) section), because Ansible ends the
    whole playbook at a batch that exceeds C(max_fail_percentage) and a summary play after the tuning play would
    not run.
options:
  hosts:
    description: The hosts of the run (of every tuning play of the playbook); V(localhost) is skipped.
    type: list
    elements: str
    required: true
  report_dir:
    description: The directory of the reports on the controller.
    type: path
    required: true
  result_var:
    description: The variable each host registered the M(llmserve.sglang.kv_tune) result in.
    type: str
    default: kv_tune_outcome
  pending:
    description:
      - Hosts that a later play of the playbook tunes; without a result they are named as not started. Hosts of a
        later serial batch of this play are named so without it.
    type: list
    elements: str
    default: []
  host_vars_dir:
    description:
      - The directory the pins are also written to (the role's C(kv_tune_host_vars_dir)); empty for none.
      - Under ansible-runner (AWX, Automation Platform) the summary warns, once no batch is left, when files written
        there cannot persist (inside the job's private data directory, or in an execution environment's container).
    type: path
    default: ""
  stats_name:
    description:
      - The name the summary's C(stats) are handed on as, as M(ansible.builtin.set_stats) would, not per host and
        replaced by each batch, so that the last one holds every host. ansible-runner returns them as
        C(artifact_data), and an AWX workflow passes them to its next job. An empty name hands nothing on.
    type: str
    default: llmserve_kv_tune
attributes:
  check_mode:
    support: full
    details: In check mode it prints the rows and says whether summary.json would change, without writing it.
extends_documentation_fragment:
  - llmserve.sglang.attributes
  - llmserve.sglang.attributes.action_plugin
seealso:
  - module: llmserve.sglang.kv_tune
"""

EXAMPLES = r"""
- name: Summarise the fleet
  llmserve.sglang.kv_tune_summary:
    hosts: "{{ ansible_play_hosts_all }}"
    report_dir: "{{ playbook_dir }}/kv_tune_reports"

- name: At the end of each serial batch, once, on the controller
  llmserve.sglang.kv_tune_summary:
    hosts: "{{ ansible_play_hosts_all }}"
    report_dir: "{{ playbook_dir }}/kv_tune_reports"
  run_once: true
  delegate_to: localhost
"""

RETURN = r"""
rows:
  description: One row per host, in host order, with C(host), C(status) (V(unchanged), V(tuned), V(no_stable_value),
    V(failed), or not tuned) and C(line), and where known C(before), C(after), C(tokens_before), C(tokens_after),
    C(restarts), C(tuned_at) and C(error).
  returned: always
  type: list
  elements: dict
stats:
  description:
    - What the run hands on to the next (as O(stats_name)), with C(hosts) (the rows), C(counts) (rows per status),
      C(failed) (the hosts that failed, found no stable value, or could not be reached; each stays on its
      last-known-good value), C(restarts) (the restarts the run cost) and C(report_dir).
  returned: always
  type: dict
  sample: {"hosts": [], "counts": {"tuned": 3}, "failed": [], "restarts": 5, "report_dir": "/runner/artifacts/1/kv_tune_reports"}
path:
  description: The summary file written; V(null) when there was no host.
  returned: always
  type: str
  sample: /home/ops/kv_tune_reports/summary.json
"""

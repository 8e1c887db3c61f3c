# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

DOCUMENTATION = r"""
name: report_dir
short_description: Where a run's reports go on the controller when the user names no directory
version_added: 1.0.0
author:
  - llmserve.sglang contributors (@llmserve)
description:
  - Returns C(<base>/<name>) for each name given, where C(<base>) is, in this order, the first that applies.
  - Under ansible-runner (and so under AWX and Automation Platform, which run their jobs with it), the job's
    artifacts directory (C(AWX_ISOLATED_DATA_DIR)), kept with the job's other artifacts.
  - The directory ansible-playbook runs in, unless it is C(/) (cron, a systemd unit) or inside an installed
    collection.
  - The playbook's directory, unless it is inside an installed collection.
  - The home directory of the controller user.
  - The roles of this collection use it for the defaults of C(kv_tune_report_dir) and C(rollout_report_dir).
options:
  _terms:
    description: Names of the report directories.
    type: list
    elements: str
    required: true
"""

EXAMPLES = r"""
- name: Where the tuner's reports go by default
  ansible.builtin.debug:
    msg: "{{ lookup('llmserve.sglang.report_dir', 'kv_tune_reports') }}"
"""

RETURN = r"""
_raw:
  description: One absolute directory per name.
  type: list
  elements: path
"""

import os

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase

from ansible_collections.llmserve.sglang.plugins.plugin_utils.report_files import default_report_dir


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        for term in terms:
            if not isinstance(term, str) or not term or os.sep in term:
                raise AnsibleLookupError("report_dir takes plain directory names, got %r" % (term,))
        playbook_dir = (variables or {}).get("playbook_dir") or ""
        return [default_report_dir(term, os.environ, os.getcwd(), str(playbook_dir), os.path.expanduser("~"))
                for term in terms]

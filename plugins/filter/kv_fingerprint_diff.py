# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filter kv_fingerprint_diff: What changed between two KV tuning fingerprints."""
from __future__ import annotations

DOCUMENTATION = r"""
name: kv_fingerprint_diff
short_description: What changed between two KV tuning fingerprints
version_added: 1.0.0
author:
  - llmserve.sglang contributors (@llmserve)
description:
  - Compares two fingerprints of M(llmserve.sglang.kv_fingerprint) section by section and returns the dotted
    keys whose values differ, such as V(versions.driver) or V(server_args.kv_cache_dtype).
options:
  _input:
    description: The pinned fingerprint.
    type: dict
    required: true
  new:
    description: The current fingerprint.
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Why re-tune
  ansible.builtin.debug:
    msg: "{{ ansible_local.sglang_kv['sglang.service'].fingerprint | llmserve.sglang.kv_fingerprint_diff(fp.fingerprint) }}"
"""

RETURN = r"""
_value:
  description: The keys that differ, sorted; empty when the fingerprints are equal.
  type: list
  elements: str
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.llmserve.sglang.plugins.module_utils.service.fingerprint import fingerprint_diff


def kv_fingerprint_diff(old, new):
    """Dotted keys that differ between two fingerprints (versions.driver, server_args.tp_size, ...)."""
    if not isinstance(old, dict) or not isinstance(new, dict):
        raise AnsibleFilterError("kv_fingerprint_diff expects two fingerprints (dicts), got %s and %s"
                                 % (type(old).__name__, type(new).__name__))
    return fingerprint_diff(old, new)


class FilterModule:
    def filters(self):
        return {"kv_fingerprint_diff": kv_fingerprint_diff}

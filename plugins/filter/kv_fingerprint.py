# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""kv_fingerprint_diff: why a host is re-tuned. Documentation: kv_fingerprint_diff.yml beside this file."""
from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.llmserve.sglang.plugins.module_utils.fingerprint import fingerprint_diff


def kv_fingerprint_diff(old, new):
    """Dotted keys that differ between two fingerprints (versions.driver, server_args.tp_size, ...)."""
    if not isinstance(old, dict) or not isinstance(new, dict):
        raise AnsibleFilterError("kv_fingerprint_diff expects two fingerprints (dicts), got %s and %s"
                                 % (type(old).__name__, type(new).__name__))
    return fingerprint_diff(old, new)


class FilterModule:
    def filters(self):
        return {"kv_fingerprint_diff": kv_fingerprint_diff}

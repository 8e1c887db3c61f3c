# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""kv_tune_report_items: the reports a kv_tune result gives, one per unit searched. Documentation:
kv_tune_report_items.yml."""
from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.llmserve.sglang.plugins.module_utils.kv_tune_units import report_items
from ansible_collections.llmserve.sglang.plugins.plugin_utils.plain import plain


def kv_tune_report_items(outcome):
    """[{name, unit, status, line, result, report}] of the units that kv_tune searched."""
    if outcome is not None and not hasattr(outcome, "get"):
        raise AnsibleFilterError("kv_tune_report_items expects what kv_tune returned, got %s" % type(outcome).__name__)
    return report_items(plain(dict(outcome)) if outcome is not None else None)


class FilterModule:
    def filters(self):
        return {"kv_tune_report_items": kv_tune_report_items}

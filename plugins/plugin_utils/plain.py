# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Controller-side helper for the filters."""
from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleFilterError
from ansible.module_utils.parsing.convert_bool import boolean


def plain(value: Any) -> Any:
    """A deep copy in plain Python types. Jinja hands filters its own int/float/str subclasses (AnsibleUnsafe text,
    tagged values); the pure library wants plain ones, and a copy keeps it from changing a fact in place."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, dict):
        return {str(key): plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    return value


def flag(name: str, value: Any) -> bool:
    """A filter's boolean argument as Ansible reads one: `-e kv_tune_force=false` and an AWX survey's answer give the
    string "false", which bool() would read as true."""
    try:
        return boolean(value, strict=True)
    except TypeError:
        raise AnsibleFilterError("%s must be a boolean, got %r" % (name, plain(value))) from None

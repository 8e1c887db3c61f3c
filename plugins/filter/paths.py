# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Paths that users pass, as they meant them: launch_abspath.

Documentation: launch_abspath.yml beside this file.
"""
from __future__ import annotations

import os

from ansible.errors import AnsibleFilterError


def launch_abspath(path):
    """``path`` unchanged when it is absolute or empty; a relative one joined to the directory ansible-playbook was
    started in (its working directory, which Ansible keeps; a module on a local connection runs in the playbook's
    directory instead, so a relative path handed to it as it is would name a file there)."""
    if path is None or path == "":
        return path
    if not isinstance(path, str):
        raise AnsibleFilterError("launch_abspath expects a path string, got %s" % type(path).__name__)
    path = os.path.expanduser(path)
    return path if os.path.isabs(path) else os.path.normpath(os.path.join(os.getcwd(), path))


class FilterModule(object):
    def filters(self):
        return {"launch_abspath": launch_abspath}

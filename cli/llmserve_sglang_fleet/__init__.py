# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""llmserve-fleet: the code is the collection's (plugins/plugin_utils/fleet_view.py), found where Ansible finds
collections (ANSIBLE_COLLECTIONS_PATH, ansible.cfg's collections_path, the default paths), so that the command
and the playbooks it runs are always the same installed collection."""
from __future__ import annotations

import sys


def main(argv=None):
    from ansible import constants
    from ansible.plugins.loader import init_plugin_loader

    init_plugin_loader(constants.COLLECTIONS_PATHS)
    try:
        from ansible_collections.llmserve.sglang.plugins.plugin_utils import fleet_view
    except ImportError as exc:
        sys.stderr.write("llmserve-fleet: the collection llmserve.sglang is not installed where Ansible looks for "
                         "collections (%s): %s\n" % (", ".join(constants.COLLECTIONS_PATHS), exc))
        return 2
    return fleet_view.main(argv)


if __name__ == "__main__":
    sys.exit(main())

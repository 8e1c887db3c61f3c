# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""An intersphinx inventory (Sphinx's objects.inv, version 2) of the labels listed in a text file, so that the docs
site builds offline and its links into Ansible's docs still go to the right pages:

    python3 docs/site/inventory.py docs/site/ansible-devel-refs.txt .tmp/docs/rst/ansible_devel.inv
"""
from __future__ import annotations

import sys
import zlib


def main(argv: list[str]) -> int:
    entries = []
    with open(argv[1], encoding="utf-8") as listing:
        for line in listing:
            if line.strip() and not line.startswith("#"):
                label, uri, title = line.rstrip("\n").split("\t")
                entries.append("%s std:label -1 %s %s\n" % (label, uri, title))
    header = ("# Sphinx inventory version 2\n# Project: Ansible\n# Version: devel\n"
              "# The remainder of this file is compressed using zlib.\n")
    with open(argv[2], "wb") as out:
        out.write(header.encode("utf-8") + zlib.compress("".join(entries).encode("utf-8")))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations


class ModuleDocFragment:
    # The attributes every module of the collection documents: check mode (its support and details are each
    # module's own, or llmserve.sglang.attributes.read_only's) and diff mode (none of them shows a diff).
    DOCUMENTATION = r"""
options: {}
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in diff mode).
    support: none
"""

    # A module that only reads: check mode changes nothing it does.
    READ_ONLY = r"""
options: {}
attributes:
  check_mode:
    support: full
    details: This module only reads; it behaves the same in check mode.
"""

    # A module whose work is done by its action plugin on the controller (its check mode is the module's own).
    ACTION_PLUGIN = r"""
options: {}
attributes:
  action:
    description: Indicates this has a corresponding action plugin so some parts of the options can be executed on the controller.
    support: full
  platform:
    description: Target OS/families that can be operated against.
    support: full
    platforms: posix
"""

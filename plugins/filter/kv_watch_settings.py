# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filter kv_watch_settings: The headroom watch's settings checked against their ranges, or an error."""
from __future__ import annotations

DOCUMENTATION = r"""
name: kv_watch_settings
short_description: The headroom watch's settings checked against their ranges, or an error
version_added: 1.0.0
author:
  - llmserve.sglang contributors (@llmserve)
description:
  - Checks the settings of the headroom watch that the role llmserve.sglang.sglang_service installs with
    C(sglang_service_kv_watch) (C(interval), C(window), C(keep)) and of its readers (C(recent), C(headroom_hours),
    C(headroom_steps), C(storm_retractions), C(pool_tolerance), C(full_usage), C(action)), each against the range the
    watch holds it to; a value out of its range fails the task, naming the variable (O(prefix) and the setting), its
    range and why.
  - "The ranges: C(interval) 1 to 300 seconds, C(window) 1 to 86400 seconds and not shorter than C(interval),
    C(keep) 1 to 20160 windows, C(recent) 0 to 20160 windows, C(headroom_hours) 0.0005 to 8760, C(headroom_steps) 0
    to 100, C(storm_retractions) 1 to 1000000, C(pool_tolerance) 0 to 0.5; C(full_usage) one of the watch's bands
    (0.5, 0.6, 0.7, 0.8, 0.9, 0.95), C(action) V(propose) or V(act)."
  - Gives the settings typed otherwise.
options:
  _input:
    description: The settings, by their names without a prefix.
    type: dict
    required: true
  prefix:
    description: What the variables' names begin with, for the message (C(sglang_service_kv_watch_)).
    type: str
    default: ""
"""

EXAMPLES = r"""
- name: Check the watch's settings before anything on the host changes
  ansible.builtin.debug:
    msg: >-
      {{ {'interval': sglang_service_kv_watch_interval, 'window': sglang_service_kv_watch_window,
          'keep': sglang_service_kv_watch_keep} | llmserve.sglang.kv_watch_settings('sglang_service_kv_watch_') }}
"""

RETURN = r"""
_value:
  description: The settings, numbers as int or float.
  type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.llmserve.sglang.plugins.plugin_utils.plain import plain
from ansible_collections.llmserve.sglang.plugins.module_utils.watch.settings import WatchError, check_settings


def kv_watch_settings(settings, prefix=""):
    """``settings`` checked and typed (watch.settings.check_settings); AnsibleFilterError with the variable's name."""
    try:
        return check_settings(plain(settings), prefix=plain(prefix))
    except WatchError as exc:
        raise AnsibleFilterError("kv_watch_settings: %s" % exc) from None


class FilterModule:
    def filters(self):
        return {"kv_watch_settings": kv_watch_settings}

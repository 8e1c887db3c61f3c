# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Controller-side: what the fleet summaries (kv_tune_summary, rollout_summary) share - the hosts' registered
results, which hosts have not had their turn yet, and the summary file."""
from __future__ import annotations

import json
import os
import tempfile

from ansible.errors import AnsibleActionFail

from ansible_collections.llmserve.sglang.plugins.plugin_utils.plain import plain


def registered_outcomes(hostvars, hosts, result_var):
    """host -> the result each host of ``hosts`` registered as ``result_var`` (plain types), None where it has none;
    localhost is skipped."""
    outcomes = {}
    for host in hosts:
        if host == "localhost":
            continue
        outcome = hostvars[host].get(result_var) if host in hostvars else None
        outcomes[host] = plain(dict(outcome)) if outcome is not None else None
    return outcomes


def pending_hosts(task_vars, hosts, later=()):
    """Hosts that have not had their turn yet: ``later`` (a later play of the playbook takes them) or a later serial
    batch of this play, unless this play already dropped them (failed, unreachable)."""
    play_all = task_vars.get("ansible_play_hosts_all") or []
    active = task_vars.get("ansible_play_hosts") or []
    batch = task_vars.get("ansible_play_batch") or []
    dropped = set(play_all) - set(active)
    return {host for host in hosts if host not in dropped
            and (host in later or (host in active and host not in batch))}


def write_summary(path, rows, check_mode=False):
    """The rows as JSON in ``path``, unless it holds them already; whether it wrote (would write)."""
    try:
        return write_if_changed(path, json.dumps(rows, indent=4, sort_keys=True) + "\n", check_mode)
    except OSError as exc:
        raise AnsibleActionFail("cannot write %s: %s" % (path, exc))


def write_if_changed(path, text, check_mode=False):
    """Write ``text`` to ``path`` atomically unless it holds it already (in check mode: only say so); whether it
    wrote (would write)."""
    try:
        with open(path, encoding="utf-8") as handle:
            if handle.read() == text:
                return False
    except FileNotFoundError:
        pass
    if check_mode:
        return True
    directory = os.path.dirname(path)
    os.makedirs(directory, mode=0o755, exist_ok=True)
    handle, tmp = tempfile.mkstemp(dir=directory, prefix=".summary.")
    with os.fdopen(handle, "w", encoding="utf-8") as out:
        out.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
    return True

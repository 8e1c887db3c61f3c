# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The tuner's search (module_utils/kv_search.py) as Jinja filters: kv_search_start and kv_search_record.
The state is a plain dict that the kv_tune role keeps in a fact between trials.
Documentation: kv_search_start.yml and kv_search_record.yml beside this file.
"""
from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.llmserve.sglang.plugins.plugin_utils.plain import plain
from ansible_collections.llmserve.sglang.plugins.module_utils.kv_search import KvSearchError, lower_bound, new_state, record


def kv_search_start(pre_load_free_gib, f0, lo=None, cap=0.98, resolution=0.005, safety_gib=1.0, budget=6,
                    post_load_free_gib=None, target_tokens=None, cell_size_bytes=None):
    """A new search state; its ``next`` is the first value to try (f0). With post_load_free_gib (A) and no lo, the
    lower bound is kv_search.lower_bound() (and target_tokens, with the cell size), kept one step below the cap so
    that a formula minimum above the cap still leaves one value to try."""
    try:
        if lo is None and post_load_free_gib is not None:
            lo = min(lower_bound(plain(pre_load_free_gib), plain(post_load_free_gib), plain(target_tokens),
                                 plain(cell_size_bytes)), plain(cap) - plain(resolution))
        return new_state(plain(pre_load_free_gib), plain(f0), lo=plain(lo), cap=plain(cap),
                         resolution=plain(resolution), safety_gib=plain(safety_gib), budget=plain(budget))
    except KvSearchError as exc:
        raise AnsibleFilterError("kv_search_start: %s" % exc)


def kv_search_record(state, trial):
    """The state after one trial ({f, outcome, min_free_gib, tokens}); ``next`` is None when the search is done."""
    if not isinstance(state, dict) or "trials" not in state:
        raise AnsibleFilterError("kv_search_record expects the state from kv_search_start, got %r" % (state,))
    try:
        return record(plain(state), plain(trial))
    except KvSearchError as exc:
        raise AnsibleFilterError("kv_search_record: %s" % exc)


class FilterModule:
    def filters(self):
        return {"kv_search_start": kv_search_start, "kv_search_record": kv_search_record}

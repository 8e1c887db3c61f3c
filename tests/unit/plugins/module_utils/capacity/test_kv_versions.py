# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""kv_versions: SGLang version order and the eras of its memory code."""
from __future__ import annotations

import pytest

from ansible_collections.llmserve.sglang.plugins.module_utils.capacity.kv_base import KvModelError
from ansible_collections.llmserve.sglang.plugins.module_utils.capacity.kv_versions import compare_versions, is_classic, kv_era


@pytest.mark.parametrize("version,classic,era", [
    ("0.4.10", True, "classic"), ("0.5.5", True, "classic"), ("0.5.5.post3", True, "classic"),
    ("0.5.6rc1", True, "classic"), ("0.5.6.post2", True, "classic"),   # 0.5.6.x still adds the EAGLE headroom
    ("0.5.7", False, "mixin"), ("0.5.7rc1", False, "mixin"), ("v0.5.9", False, "mixin"),
    ("0.5.10.dev0+gabc123", False, "mixin"), ("0.5.14", False, "current"), ("0.5.23", False, "current"),
    ("0.6.0", False, "current"), (None, False, "current"),
])
def test_eras(version, classic, era):
    assert is_classic(version) is classic
    assert kv_era(version) == era


def test_version_order():
    ordered = ["0.4.10", "0.5.5", "0.5.5.post3", "0.5.6rc1", "0.5.6", "0.5.6.post1", "0.5.7.dev0", "0.5.7",
               "0.5.10", "0.5.23"]
    for lo, hi in zip(ordered, ordered[1:]):
        assert compare_versions(lo, hi) == -1, (lo, hi)
        assert compare_versions(hi, lo) == 1
    assert compare_versions("0.5.9", "v0.5.9") == 0


@pytest.mark.parametrize("bad", ["banana", "", "0.5.x", "latest"])
def test_bad_version(bad):
    with pytest.raises(KvModelError, match="sglang_version"):
        kv_era(bad)

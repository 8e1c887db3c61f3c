# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""file_name: files named after hosts stay inside their directory (issue 32, item 11)."""
from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.llmserve.sglang.plugins.filter.file_name import FilterModule

file_name = FilterModule().filters()["file_name"]


@pytest.mark.parametrize("name", ["gpu1", "gpu-r01.example.internal", "sglang@a.service", "..gpu", "a..b"])
def test_a_name_that_stays_inside_is_unchanged(name):
    assert file_name(name) == name


@pytest.mark.parametrize("name", ["../gpu1", "a/b", "/etc/gpu1", "..", ".", "", "a\0b", None, 3])
def test_a_name_that_would_leave_its_directory_is_refused(name):
    with pytest.raises(AnsibleFilterError, match="cannot name a file inside a directory"):
        file_name(name)

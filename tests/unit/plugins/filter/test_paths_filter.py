# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""launch_abspath: relative paths against ansible-playbook's working directory."""
from __future__ import annotations

import os

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.llmserve.sglang.plugins.filter.launch_abspath import FilterModule

launch_abspath = FilterModule().filters()["launch_abspath"]


def test_a_relative_path_is_joined_to_the_launch_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert launch_abspath("logs/../logs/sglang.log") == str(tmp_path / "logs" / "sglang.log")


@pytest.mark.parametrize("path", ["/var/log/sglang.log", "", None])
def test_absolute_and_empty_paths_are_unchanged(path):
    assert launch_abspath(path) == path


def test_the_home_directory_is_expanded():
    assert launch_abspath("~/x.log") == os.path.join(os.path.expanduser("~"), "x.log")


def test_a_path_that_is_not_a_string_is_refused():
    with pytest.raises(AnsibleFilterError, match="expects a path string, got int"):
        launch_abspath(3)

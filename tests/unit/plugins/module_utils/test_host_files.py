# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""host_files: root reads the SGLang version only where root alone could have written it, and a model's config only
when the service user could read it anyway (files made here, as root, under /run: /tmp is writable by anyone)."""
from __future__ import annotations

import os
import shutil
import time

import pytest

from ansible_collections.llmserve.sglang.plugins.module_utils import host_files

USER = 4242   # the service user: any uid but root's


def venv(base, version="0.5.9", owner=0, mode=0o755):
    site = os.path.join(base, "venv", "lib", "python3.11", "site-packages", "sglang-%s.dist-info" % version)
    os.makedirs(site, mode=0o755)
    with open(os.path.join(site, "METADATA"), "w", encoding="utf-8") as handle:
        handle.write("Metadata-Version: 2.1\nName: sglang\nVersion: %s\nSummary: x\n" % version)
    os.chown(os.path.join(site, "METADATA"), owner, 0)
    os.chmod(os.path.dirname(site), mode)
    return os.path.join(base, "venv")


def test_the_version_of_a_root_owned_venv(root_dir):
    found = host_files.installed_distribution(venv(root_dir), "sglang")
    assert found["version"] == "0.5.9" and found["metadata"].endswith("sglang-0.5.9.dist-info/METADATA")
    assert found["stat"].st_uid == 0
    assert host_files.installed_distribution(venv(os.path.join(root_dir, "b")), "vllm") is None


def test_a_site_packages_the_user_can_write_is_refused(root_dir):
    with pytest.raises(host_files.UntrustedPath, match="writable by group or others"):
        host_files.installed_distribution(venv(root_dir, mode=0o777), "sglang")


def test_metadata_owned_by_the_user_is_refused(root_dir):
    with pytest.raises(host_files.UntrustedPath, match="belongs to uid 4242"):
        host_files.installed_distribution(venv(root_dir, owner=USER), "sglang")


def test_a_venv_behind_a_symlink_the_user_controls_is_refused(root_dir):
    user_dir = os.path.join(root_dir, "user")
    os.makedirs(user_dir)
    os.chown(user_dir, USER, USER)
    real = venv(root_dir)
    os.symlink(real, os.path.join(user_dir, "venv"))
    with pytest.raises(host_files.UntrustedPath, match="belongs to uid 4242"):
        host_files.installed_distribution(os.path.join(user_dir, "venv"), "sglang")
    os.symlink(real, os.path.join(root_dir, "link"))     # a symlink root made is fine
    assert host_files.installed_distribution(os.path.join(root_dir, "link"), "sglang")["version"] == "0.5.9"


def test_two_versions_are_a_broken_upgrade(root_dir):
    path = venv(root_dir)
    venv(root_dir + "/x", "0.5.10")
    shutil.move(root_dir + "/x/venv/lib/python3.11/site-packages/sglang-0.5.10.dist-info",
                path + "/lib/python3.11/site-packages/")
    with pytest.raises(host_files.UntrustedPath, match="several sglang distributions"):
        host_files.installed_distribution(path, "sglang")


def test_a_config_the_user_can_read(root_dir):
    model = os.path.join(root_dir, "model")
    os.makedirs(model)
    os.chown(model, USER, USER)
    with open(os.path.join(model, "config.json"), "w", encoding="utf-8") as handle:
        handle.write('{"num_hidden_layers": 2}')
    os.chown(os.path.join(model, "config.json"), USER, USER)
    os.chmod(os.path.join(model, "config.json"), 0o600)
    data, _info = host_files.read_as_user(os.path.join(model, "config.json"), USER, {USER})
    assert data == b'{"num_hidden_layers": 2}'


def test_a_planted_symlink_to_a_root_only_file_is_refused(root_dir):
    secret = os.path.join(root_dir, "secret.json")
    with open(secret, "w", encoding="utf-8") as handle:
        handle.write('{"token": "hunter2"}')
    os.chmod(secret, 0o600)
    model = os.path.join(root_dir, "model")
    os.makedirs(model)
    os.chown(model, USER, USER)
    os.symlink(secret, os.path.join(model, "config.json"))
    with pytest.raises(host_files.UntrustedPath, match="uid 4242 cannot read it"):
        host_files.read_as_user(os.path.join(model, "config.json"), USER, {USER})


def test_process_start_time_is_now_for_this_process():
    assert abs(time.time() - host_files.process_start_time(os.getpid())) < 600

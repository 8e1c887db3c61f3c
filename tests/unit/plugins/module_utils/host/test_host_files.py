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

from ansible_collections.llmserve.sglang.plugins.module_utils.host import host_files

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


# --- the safe reader: symlinks, FIFOs, sizes (issue 18) ---------------------------------------------------------------

def _model(root_dir):
    model = os.path.join(root_dir, "model")
    os.makedirs(model)
    os.chown(model, USER, USER)
    return model


@pytest.mark.parametrize("reader", ["as_user", "walking", "trusted"])
def test_a_fifo_is_refused_without_blocking(root_dir, reader, in_child):
    path = os.path.join(root_dir if reader == "trusted" else _model(root_dir), "config.json")
    os.mkfifo(path, 0o644)
    read = {"as_user": lambda p: host_files.read_as_user(p, USER, {USER}),
            "walking": host_files.read_walking, "trusted": host_files.read_trusted}[reader]
    outcome, message = in_child(5, lambda p: read(p)[0], path)
    assert outcome == "error" and "is not a regular file" in message, (outcome, message)


def test_an_oversize_file_is_refused(root_dir):
    path = os.path.join(_model(root_dir), "config.json")
    with open(path, "wb") as handle:
        handle.truncate(host_files.MAX_BYTES + 1)
    os.chmod(path, 0o644)
    with pytest.raises(host_files.UntrustedPath, match="is larger than %d bytes" % host_files.MAX_BYTES):
        host_files.read_as_user(path, USER, {USER})
    with pytest.raises(host_files.UntrustedPath, match="is larger than 10 bytes"):
        host_files.read_walking(path, max_bytes=10)


@pytest.mark.parametrize("target", ["/dev/zero", "/dev/null", "/"])
def test_a_symlink_to_something_that_is_not_a_regular_file_is_refused(root_dir, target):
    path = os.path.join(_model(root_dir), "config.json")
    os.symlink(target, path)
    with pytest.raises(host_files.UntrustedPath, match="is not a regular file"):
        host_files.read_as_user(path, USER, {USER})


def test_a_symlinked_directory_into_a_root_only_directory_is_refused(root_dir):
    private = os.path.join(root_dir, "private")
    os.makedirs(private, mode=0o700)
    with open(os.path.join(private, "config.json"), "w", encoding="utf-8") as handle:
        handle.write('{"token": "hunter2"}')
    os.chmod(os.path.join(private, "config.json"), 0o644)   # readable, but only behind root's directory
    model = _model(root_dir)
    os.symlink(private, os.path.join(model, "snapshot"))
    with pytest.raises(host_files.UntrustedPath, match="private is not searchable for it"):
        host_files.read_as_user(os.path.join(model, "snapshot", "config.json"), USER, {USER})


def test_a_hub_cache_snapshot_symlink_the_user_can_read_is_followed(root_dir):
    """The Hugging Face cache links snapshots/<rev>/config.json to ../../blobs/<sha>: resolved here, hop by hop."""
    model = _model(root_dir)
    os.makedirs(os.path.join(model, "blobs"))
    os.makedirs(os.path.join(model, "snapshots", "abc"))
    with open(os.path.join(model, "blobs", "f00"), "w", encoding="utf-8") as handle:
        handle.write('{"num_hidden_layers": 4}')
    os.chmod(os.path.join(model, "blobs", "f00"), 0o644)
    os.symlink("../../blobs/f00", os.path.join(model, "snapshots", "abc", "config.json"))
    data, _info = host_files.read_as_user(os.path.join(model, "snapshots", "abc", "config.json"), USER, {USER})
    assert data == b'{"num_hidden_layers": 4}'


def test_a_symlink_loop_is_refused(root_dir):
    model = _model(root_dir)
    os.symlink("b", os.path.join(model, "a"))
    os.symlink("a", os.path.join(model, "b"))
    with pytest.raises(host_files.UntrustedPath, match="too many symlinks"):
        host_files.read_walking(os.path.join(model, "a"))


def test_a_process_is_gone_without_its_proc_entry_or_as_a_zombie(tmp_path):
    for pid, state in ((10, "S"), (11, "R"), (12, "Z"), (13, "X")):
        (tmp_path / str(pid)).mkdir()
        # The command may hold spaces and parentheses: the state is the first field after the last ")".
        (tmp_path / str(pid) / "stat").write_text("%d (python3 (x) y) %s 1 2 3\n" % (pid, state))
    assert [pid for pid in (10, 11, 12, 13, 14) if host_files.process_gone(pid, proc=str(tmp_path))] == [12, 13, 14]

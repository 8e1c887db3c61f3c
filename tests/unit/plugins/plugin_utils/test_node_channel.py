# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""node_channel: the files through which the nodes of one server follow node 0's search."""
from __future__ import annotations

import os
import stat
import threading

import pytest

from ansible_collections.llmserve.sglang.plugins.plugin_utils.node_channel import ChannelTimeout, NodeChannel, NodeLink


def test_a_message_is_read_once_it_is_complete(tmp_path):
    leader, follower = NodeChannel("task", "abc", tmp_path), NodeChannel("task", "abc", tmp_path)
    assert leader.path == follower.path and stat.S_IMODE(os.stat(leader.path).st_mode) == 0o700
    assert follower.read("step-0") is None
    leader.post("step-0", {"do": "observe", "watch": 8})
    assert follower.read("step-0") == {"do": "observe", "watch": 8}
    assert not [name for name in os.listdir(leader.path) if name.endswith(".tmp")]
    assert NodeChannel("task", "other", tmp_path).read("step-0") is None    # another server, another directory


def test_wait_returns_every_answer_posted_meanwhile(tmp_path):
    channel = NodeChannel("task", "abc", tmp_path)
    posters = [threading.Timer(0.1 * rank, channel.post, ("ack-0-%d" % rank, {"rank": rank})) for rank in (1, 2)]
    for poster in posters:
        poster.start()
    found = channel.wait(["ack-0-1", "ack-0-2"], 5, "the answers", interval=0.02)
    assert found == {"ack-0-1": {"rank": 1}, "ack-0-2": {"rank": 2}}


def test_wait_names_what_is_missing_after_its_timeout_and_lets_check_give_up(tmp_path):
    channel = NodeChannel("task", "abc", tmp_path)
    channel.post("hello-1", {"rank": 1})
    with pytest.raises(ChannelTimeout, match=r"the other nodes: no answer within 0 s \(hello-2 missing\)"):
        channel.wait(["hello-1", "hello-2"], 0.05, "the other nodes", interval=0.01)

    def gone():
        raise RuntimeError("controller gone")
    with pytest.raises(RuntimeError, match="controller gone"):
        channel.wait(["hello-2"], 5, "the other nodes", check=gone, interval=0.01)


def test_a_follower_asks_whether_node_0s_next_step_is_posted_without_waiting(tmp_path):
    channel = NodeChannel("task", "server", directory=str(tmp_path))
    leader, follower = NodeLink(channel, 0), NodeLink(channel, 1)
    assert follower.perform({"nodes": "posted", "n": 0}) is False
    assert leader.perform({"nodes": "tell", "message": {"do": "observe"}}) == 0
    assert follower.perform({"nodes": "posted", "n": 0}) is True and follower.perform({"nodes": "posted", "n": 1}) is False

    def gone():
        raise RuntimeError("ansible-playbook is gone")

    with pytest.raises(RuntimeError, match="gone"):
        NodeLink(channel, 1, check=gone).perform({"nodes": "posted", "n": 1})

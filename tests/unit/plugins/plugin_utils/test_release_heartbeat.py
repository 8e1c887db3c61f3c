# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The controller's heartbeat to a host's release guard: when it beats, when it stops, and what it says when
ansible-playbook is gone (plugin_utils/release_heartbeat.py), on a scripted host and clock."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from ansible_collections.llmserve.sglang.plugins.module_utils.service.release_guard import SCRIPT_PATH
from ansible_collections.llmserve.sglang.plugins.plugin_utils import release_heartbeat
from ansible_collections.llmserve.sglang.plugins.plugin_utils.release_heartbeat import Heartbeat

RUN = "1f2e3d4c"
BEAT = [SCRIPT_PATH, RUN, "beat", "90"]
GONE = [SCRIPT_PATH, RUN, "gone"]


class Scripted(object):
    """A clock that sleep moves, a controller that dies at ``dies_at``, and a host that answers each command with
    the next status of ``answers`` (0 once they run out); what it was asked, with the time."""

    def __init__(self, dies_at=None, answers=()):
        self.now, self.dies_at, self.answers, self.asked = 0.0, dies_at, list(answers), []

    def on_host(self, argv):
        self.asked.append((self.now, argv[2:]))
        return self.answers.pop(0) if self.answers else 0

    def heartbeat(self, lease=90):
        return Heartbeat(RUN, lease, self.on_host, lambda: self.dies_at is None or self.now < self.dies_at,
                         sleep=self.sleep, clock=lambda: self.now)

    def sleep(self, seconds):
        self.now += seconds
        if self.now > 10_000:
            raise AssertionError("the heartbeat never ended")


def test_it_beats_every_quarter_lease_while_the_controller_lives_and_tells_the_host_once_it_is_gone():
    host = Scripted(dies_at=70.5)
    assert host.heartbeat().run() == "told"
    assert host.asked == [(0, ["beat", "90"]), (22, ["beat", "90"]), (44, ["beat", "90"]), (66, ["beat", "90"]),
                          (71, ["gone"])]


def test_it_ends_without_a_word_once_the_host_has_nothing_left_to_keep_alive():
    host = Scripted(answers=[0, 3])
    assert host.heartbeat().run() == "retired"
    assert host.asked == [(0, ["beat", "90"]), (22, ["beat", "90"])]


def test_a_beat_that_does_not_reach_the_host_is_tried_again_at_the_next_beat():
    host = Scripted(dies_at=50, answers=[255, 255, 0])
    assert host.heartbeat().run() == "told"
    assert [when for when, _argv in host.asked] == [0, 22, 44, 50]


def test_gone_is_retried_until_the_locks_would_have_lapsed_by_themselves():
    host = Scripted(dies_at=0.5, answers=[0] + [255] * 100)
    assert host.heartbeat(lease=20).run() == "lapsed"
    gone = [when for when, argv in host.asked if argv == ["gone"]]
    assert gone[0] == 1 and gone[-1] < 1 + 20 and len(gone) == 4      # every 5 s within the lease


def test_a_host_that_hears_gone_late_still_hears_it():
    host = Scripted(dies_at=0.5, answers=[0, 255, 255, 0])
    assert host.heartbeat().run() == "told"
    assert [argv for _when, argv in host.asked] == [["beat", "90"], ["gone"], ["gone"], ["gone"]]


@pytest.mark.parametrize("lease, period", [(20, 5), (90, 22), (3600, 900)])
def test_the_period_leaves_three_beats_lost_in_a_row_before_the_locks_lapse(lease, period):
    assert release_heartbeat.beat_period(lease) == period
    assert 3 * period < lease


def test_a_live_process_is_alive_and_a_dead_or_reused_pid_is_not():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        identity = release_heartbeat.process_identity(child.pid)
        assert identity is not None
        assert release_heartbeat.process_alive(child.pid, identity)
        assert not release_heartbeat.process_alive(child.pid, "1")      # the pid, another process
        child.kill()
        child.wait()
        assert not release_heartbeat.process_alive(child.pid, identity)
    finally:
        child.kill()


def test_a_zombie_is_dead_though_its_pid_still_answers():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        while open("/proc/%d/stat" % child.pid, encoding="ascii").read().rsplit(")", 1)[1].split()[0] != "Z":
            time.sleep(0.01)     # exited, not yet reaped: a zombie
        os.kill(child.pid, 0)
        assert release_heartbeat.process_identity(child.pid) is None
        assert not release_heartbeat.process_alive(child.pid, "12345")
    finally:
        child.wait()


def test_a_call_that_hangs_is_given_up_after_its_bound_and_counts_as_not_reached():
    started = time.monotonic()
    assert release_heartbeat.bounded(lambda: time.sleep(30) or 0, 1) == 255
    assert time.monotonic() - started < 5


def test_a_call_that_answers_in_time_gives_its_status_and_one_that_raises_counts_as_not_reached():
    assert release_heartbeat.bounded(lambda: 3, 5) == 3

    def unreachable():
        raise OSError("ssh: connect to host h1 port 22: No route to host")

    assert release_heartbeat.bounded(unreachable, 5) == 255

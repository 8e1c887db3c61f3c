# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""How the nodes of one multi-node server take part in one search, on the controller.

Each node is a host of the same kv_tune task, run by its own worker of the same ansible-playbook. Node 0's worker
leads the search; the other workers follow it. They talk through JSON files in a directory of that ansible-playbook's
own private temporary directory (removed when it exits), named after the task and the server: no network, no other
user, and a message is either absent or complete (written aside, then renamed).

Messages: ``hello-<rank>`` (a follower joined, with what its host says about its pin), ``step-<n>`` (the leader's
next step for every follower), ``ack-<n>-<rank>`` (a follower's answer to it).
"""
from __future__ import annotations

import json
import os
import time
from typing import Any, Callable, Sequence

from ansible import constants as C


class ChannelTimeout(Exception):
    """A node did not answer in time; the message names what was awaited."""


class NodeChannel:
    """The message directory of one server's search in one task."""

    def __init__(self, task_id: str, server_key: str, directory: str | None = None) -> None:
        base = directory or C.DEFAULT_LOCAL_TMP
        self.path = os.path.join(base, "kv-tune-%s-%s" % (task_id, server_key))
        os.makedirs(self.path, mode=0o700, exist_ok=True)

    def post(self, name: str, data: Any) -> None:
        """Write message ``name`` (complete or not at all)."""
        final = os.path.join(self.path, name + ".json")
        temporary = "%s.%d.tmp" % (final, os.getpid())
        with open(temporary, "w", encoding="utf-8") as handle:
            json.dump(data, handle)
        os.replace(temporary, final)

    def read(self, name: str) -> Any:
        """Message ``name``, or None while it is not there."""
        try:
            with open(os.path.join(self.path, name + ".json"), encoding="utf-8") as handle:
                return json.load(handle)
        except FileNotFoundError:
            return None

    def wait(self, names: Sequence[str], timeout: float, what: str, check: Callable[[], None] | None = None,
             interval: float = 0.2) -> dict[str, Any]:
        """{name: message} once every message of ``names`` is there; ``check()`` runs between looks (it raises to
        give up, e.g. when ansible-playbook is gone). Raises :class:`ChannelTimeout` naming ``what`` and the missing
        messages after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        found: dict[str, Any] = {}
        while True:
            for name in names:
                if name not in found:
                    message = self.read(name)
                    if message is not None:
                        found[name] = message
            if len(found) == len(names):
                return found
            if time.monotonic() >= deadline:
                raise ChannelTimeout("%s: no answer within %d s (%s missing)"
                                     % (what, timeout, ", ".join(name for name in names if name not in found)))
            if check is not None:
                check()
            time.sleep(interval)


class NodeLink:
    """One node's side of a server's search: performs the ``{"nodes": kind}`` steps of plugin_utils/run/unit_run.py.

    Node 0: ``join`` (wait for the others' hellos; answers them as a list), ``tell`` (post the next step, numbered
    here; answers its number), ``answers`` (wait for every other node's answer to a step; a list). The others:
    ``hello`` (post what this node's pin says), ``next`` (wait for step ``n``; answers it), ``posted`` (whether
    step ``n`` is there yet; no wait), ``answer`` (post this node's answer to step ``n``). ``check()`` runs between
    looks (it raises when ansible-playbook is gone)."""

    def __init__(self, channel: NodeChannel, rank: int, check: Callable[[], None] | None = None) -> None:
        self.channel, self.rank, self.check = channel, rank, check
        self.steps = 0          # node 0: the number of the next step
        self.released = False

    def perform(self, step: dict[str, Any]) -> Any:
        kind = step["nodes"]
        if kind == "tell":
            number, self.steps = self.steps, self.steps + 1
            self.channel.post("step-%d" % number, dict(step["message"], n=number))
            return number
        if kind == "hello":
            return self.channel.post("hello-%d" % self.rank, step["message"])
        if kind == "answer":
            return self.channel.post("ack-%d-%d" % (step["n"], self.rank), step["message"])
        if kind == "posted":
            if self.check is not None:
                self.check()
            return self.channel.read("step-%s" % step["n"]) is not None
        names = {"join": ["hello-%d" % rank for rank in step.get("ranks", ())],
                 "answers": ["ack-%s-%d" % (step.get("n"), rank) for rank in step.get("ranks", ())],
                 "next": ["step-%s" % step.get("n")]}[kind]
        found = self.channel.wait(names, step["timeout"], step["what"], check=self.check)
        return found[names[0]] if kind == "next" else [found[name] for name in names]

    def release(self, message: dict[str, Any]) -> None:
        """Node 0, once, whatever happened: the last step, which tells the others to stop following."""
        if not self.released:
            self.released = True
            self.channel.post("step-%d" % self.steps, dict(message, n=self.steps))

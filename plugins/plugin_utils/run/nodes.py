# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The steps of a server that spans hosts, for unit_run.UnitRun: node 0 waits for the others to join, has each of
them make its own kv_trial calls first and watch its GPUs while its server starts and during the load; the others say whether their pins hold and
then do what node 0 says until it is done (docs/DESIGN.md, "Servers that span hosts"). Messages go through the
action (plugin_utils/node_channel.py's NodeLink); what the nodes' observations say together is kv_multinode's.
Also the step makers every run uses (:func:`call`, :func:`say`) and :class:`RunFailed`."""
from __future__ import annotations

from ansible_collections.llmserve.sglang.plugins.plugin_utils.fleet import multinode
from ansible_collections.llmserve.sglang.plugins.module_utils.startup.boot_trust import start_findings
from ansible_collections.llmserve.sglang.plugins.module_utils.service.host_units import outside_bytes, unlisted_at
from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner.start_value import plan_start, watch_lower_to


# Seconds of one look at a starting node's GPUs (gpu_info watch): the longest a follower then takes to see node 0's
# next step, or a controller that is gone.
START_WATCH_SPAN_S = 2


def pin_value(info):
    """The value a kv_fingerprint result says the unit is pinned on (None: no pin)."""
    return (info.get("pin") or {}).get("mem_fraction_static")


class RunFailed(Exception):
    """The run of a unit cannot go on; the message says why and what was left on the host."""


def call(module, args, may_fail=False, say=None):
    step = {"call": module, "args": args, "may_fail": may_fail}
    if say is not None:
        step["say"] = say
    return step


def say(line):
    return {"say": line}


class NodeSteps(object):
    """What a UnitRun does as a node of a server that spans hosts. Uses the run's ``node``, ``ranks`` (node 0, once
    the others joined), ``boots``, ``args``, ``s``, ``label``, ``host``, ``info``, ``invocation_id``, ``gpus`` and its
    ``_trial``, ``_lock``, ``_fingerprint`` and ``_boot`` steps."""

    # -- node 0 ----------------------------------------------------------------------------------------------------

    def _lead(self, info):
        """Wait until every other node has joined; why the server needs tuning according to them (None: their
        pins hold, and are node 0's)."""
        ranks = list(range(1, self.node["nnodes"]))
        # Every node of the server runs this task at once: a node whose worker never starts (fewer forks than
        # nodes) would otherwise be waited for until a trial's timeout.
        hellos = yield {"nodes": "join", "ranks": ranks, "timeout": min(600, self.args["ready_timeout"]),
                        "what": "%s: the other nodes of the server at %s (every node must be in the play, and forks at "
                                "least the number of nodes)" % (self.label, self.node["dist_init_addr"])}
        self.ranks = ranks
        self.boots = {hello["host"]: hello.get("boot") for hello in hellos}
        # A near miss any node's watch saw counts for the server: the lowest value a node asks to verify.
        asked = [hello["lower_to"] for hello in hellos if hello.get("lower_to") is not None]
        self.nodes_lower_to = min(asked) if asked else None
        leader = {"rank": 0, "host": self.host, "pin": pin_value(info), "running": info.get("mem_fraction_static")}
        return multinode.followers_reason(hellos, leader)

    def _tell(self, message, wait=True):
        """The next step for every other node; with ``wait``, their answers (else the step's number)."""
        number = yield {"nodes": "tell", "message": dict(message, leader=self.host)}
        if not wait:
            return number
        return (yield from self._answers(number))

    def _answers(self, number):
        """The other nodes' answers to step ``number``: a node that failed it fails the search, which then reverts
        every node."""
        acks = yield {"nodes": "answers", "n": number, "ranks": self.ranks,
                      "timeout": self.args["ready_timeout"] + 2 * self.args["stress_duration"] + 120,
                      "what": "%s: the other nodes' answer to step %d" % (self.label, number)}
        failed = ["node %d (%s): %s" % (ack["rank"], ack["host"], ack["msg"]) for ack in acks if not ack["ok"]]
        if failed:
            raise RunFailed("; ".join(failed))
        return acks

    # -- the other nodes -------------------------------------------------------------------------------------------

    def _follow(self, info):
        """Node 1 and up: say whether this node's pin holds, then do what node 0 says, step by step, until done."""
        rank = self.node["node_rank"]
        settle = plan_start(info, self.label, self.s["unit"], self.s["force"], False, self.run_id)
        if settle["do"] == "disarm":
            # Its own stray timers, whatever node 0 has: they would restart this node later, and the server with it.
            yield from self._lock()
            yield say("%s: %s" % (self.label, settle["why"]))
            yield from self._trial("disarmed")
            info = yield self._fingerprint()
        plan = plan_start(info, self.label, self.s["unit"], self.s["force"], True, self.run_id)
        status = {"refuse": "refuse", "report": plan.get("status")}.get(plan["do"], "tune")
        boot = yield from self._boot()
        yield {"nodes": "hello", "message": {
            "rank": rank, "host": self.host, "status": status, "why": plan.get("why") or plan.get("msg"), "boot": boot,
            "pin": pin_value(info), "running": info.get("mem_fraction_static"),
            # this node's watch saw a near miss: the value it asks the server to verify
            "lower_to": watch_lower_to(plan.get("why"), info.get("watch"))}}
        if status == "refuse":
            raise RunFailed(plan["msg"])
        self.info, self.invocation_id = info, info["invocation_id"]
        self.start_moved = []
        number = 0
        while True:
            # The first step follows node 0's readiness check; a later one may follow a whole trial.
            timeout = (self.args["ready_timeout"] + 120) if number == 0 else (self.s["confirm_timeout"] + 600)
            step = yield {"nodes": "next", "n": number, "timeout": timeout, "what": "%s: node 0's next step" % self.label}
            if step["do"] == "done":
                break
            if step["do"] == "kv_trial":
                yield from self._lock()
            if step["do"] == "watch_start":
                answer = yield from self._watch_start(number + 1, timeout)
            else:
                answer = yield from self._follow_step(step)
            yield {"nodes": "answer", "n": number, "message": dict(answer, rank=rank, host=self.host)}
            number += 1
        line = "%s: node %d of the server led by %s: %s" % (self.label, rank, step["leader"], step.get("line"))
        yield say(line)
        out = {"changed": self.changed, "status": step["status"], "follower_of": step["leader"], "line": line,
               "value": step.get("value"), "pin": info["pin"]}
        if step["status"] in ("failed", "no_stable_value"):
            out["msg"] = line
        return out

    def _watch_start(self, following, timeout):
        """While this node's server starts on node 0's trial: what other processes take or give back on its GPUs, in
        spans of START_WATCH_SPAN_S (between two, the action sees a controller that is gone and reverts), until node
        0's next step (number ``following``) is there: node 0 is ready or gave up. Kept for the load's answer."""
        first, unlisted = outside_bytes(self.info.get("gpu_memory")), unlisted_at(self.info.get("gpu_memory"))
        self.start_moved = []
        for _span in range(int(timeout // START_WATCH_SPAN_S) + 1):
            if (yield {"nodes": "posted", "n": following}):
                break
            found = yield call("gpu_info", {"watch": START_WATCH_SPAN_S, "gpus": self.gpus,
                                            "watch_units": [self.args["unit"]] if self.gpus else []}, may_fail=True)
            seen = (found.get("watched") or {}).get("other_memory_seen")
            self.start_moved = self.start_moved or start_findings(seen, first, "while the server started", unlisted)
        return {"ok": True}

    def _follow_step(self, step):
        """One of node 0's steps on this node: a kv_trial state (the same value and record), or watching the GPUs
        during node 0's load; the answer node 0 waits for."""
        if step["do"] == "kv_trial":
            fact = step.get("fact")
            if fact is not None:   # this node's own fingerprint in its pin: what its next run compares with
                fact = dict(fact, fingerprint=self.info["fingerprint"], fingerprint_hash=self.info["fingerprint_hash"])
            result = yield from self._trial(step["state"], step.get("text"), fact, may_fail=True)
            if result.get("failed"):
                return {"ok": False, "msg": result.get("msg") or "kv_trial failed: %s" % result}
            if result.get("invocation_id"):
                self.invocation_id = result["invocation_id"]
            return {"ok": True}
        watched = {}
        if step.get("watch"):
            # Memory another process takes or gives back here during the load moves this node's headroom: it is
            # judged against this node's first look, as node 0 judges its own.
            found = yield call("gpu_info", {"watch": step["watch"], "gpus": self.gpus,
                                            "watch_units": [self.args["unit"]] if self.gpus else []}, may_fail=True)
            watched = found.get("watched") or {}
        running = yield self._fingerprint()
        boot = yield from self._boot()
        moved, self.start_moved = self.start_moved + start_findings(
            watched.get("other_memory_seen"), outside_bytes(self.info.get("gpu_memory")), "during the load",
            unlisted_at(self.info.get("gpu_memory"))), []
        if moved:   # the server's boot, as node 0 merges every node's (multinode.server_boot)
            boot = dict(boot, untrusted=list(boot.get("untrusted") or []) + moved)
        return {"ok": True, "min_free_gib_per_gpu": watched.get("min_free_gib_per_gpu") or {},
                "running": bool(running["running"]), "same_start": running.get("invocation_id") == self.invocation_id,
                "boot": boot}

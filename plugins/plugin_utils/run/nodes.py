# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A unit's run as a node of a server that spans hosts (docs/DESIGN.md, "Servers that span hosts"): node 0
(:class:`Leader`) waits for the others to join and has each of them make its own kv_trial calls first and watch its
GPUs while its server starts and during the load; the others (:class:`Follower`) say whether their pins hold and then
do what node 0 says until it is done. Messages go through the action (plugin_utils/node_channel.py's NodeLink); what
the nodes' observations say together is fleet/multinode.py's."""
from __future__ import annotations

from typing import Any, Optional

from ansible_collections.llmserve.sglang.plugins.module_utils.service.host_units import outside_bytes, unlisted_at
from ansible_collections.llmserve.sglang.plugins.module_utils.startup.boot_trust import start_findings
from ansible_collections.llmserve.sglang.plugins.plugin_utils.fleet import multinode
from ansible_collections.llmserve.sglang.plugins.plugin_utils.run import steps
from ansible_collections.llmserve.sglang.plugins.plugin_utils.run.context import Info, Part, UnitContext, UnitState
from ansible_collections.llmserve.sglang.plugins.plugin_utils.run.steps import RunFailed, Steps, call, say
from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner.start_value import (
    pin_failed_last, plan_start, watch_lower_to)

# Seconds of one look at a starting node's GPUs (gpu_info watch): the longest a follower then takes to see node 0's
# next step, or a controller that is gone.
START_WATCH_SPAN_S = 2


def pin_value(info: Info) -> Optional[float]:
    """The value a kv_fingerprint result says the unit is pinned on (None: no pin)."""
    return (info.get("pin") or {}).get("mem_fraction_static")


class Leader(object):
    """Node 0: the others join, then do each of its steps and answer."""

    def __init__(self, ctx: UnitContext, state: UnitState) -> None:
        self.ctx, self.state = ctx, state

    def lead(self, info: Info) -> Steps[Optional[str]]:
        """Wait until every other node has joined; why the server needs tuning according to them (None: their
        pins hold, and are node 0's)."""
        node, state = self.state.node or {}, self.state
        ranks = list(range(1, node["nnodes"]))
        # Every node of the server runs this task at once: a node whose worker never starts (fewer forks than
        # nodes) would otherwise be waited for until a trial's timeout.
        hellos = yield steps.join(ranks, min(600, self.ctx.args["ready_timeout"]),
                                  "%s: the other nodes of the server at %s (every node must be in the play, and forks "
                                  "at least the number of nodes)" % (self.ctx.label, node["dist_init_addr"]))
        state.ranks = ranks
        state.boots = {found["host"]: found.get("boot") for found in hellos}
        state.others_failed_last = all(found.get("pin_failed_last") for found in hellos)
        # A near miss any node's watch saw counts for the server: the lowest value a node asks to verify.
        asked = [found["lower_to"] for found in hellos if found.get("lower_to") is not None]
        state.nodes_lower_to = min(asked) if asked else None
        leader = {"rank": 0, "host": self.ctx.host, "pin": pin_value(info), "running": info.get("mem_fraction_static")}
        return multinode.followers_reason(hellos, leader)

    def tell(self, message: dict[str, Any], wait: bool = True) -> Steps[Any]:
        """The next step for every other node; with ``wait``, their answers (else the step's number)."""
        number = yield steps.tell(dict(message, leader=self.ctx.host))
        if not wait:
            return number
        return (yield from self.answers(number))

    def answers(self, number: int) -> Steps[list[dict[str, Any]]]:
        """The other nodes' answers to step ``number``: a node that failed it fails the search, which then reverts
        every node."""
        args = self.ctx.args
        acks = yield steps.answers(number, self.state.ranks or [],
                                   args["ready_timeout"] + 2 * args["stress_duration"] + 120,
                                   "%s: the other nodes' answer to step %d" % (self.ctx.label, number))
        failed = ["node %d (%s): %s" % (ack["rank"], ack["host"], ack["msg"]) for ack in acks if not ack["ok"]]
        if failed:
            raise RunFailed("; ".join(failed))
        return acks


class Follower(Part):
    """Node 1 and up: say whether this node's pin holds, then do what node 0 says, step by step, until done."""

    def follow(self, info: Info) -> Steps[dict[str, Any]]:
        ctx, state, calls = self.ctx, self.state, self.calls
        node, settings = state.node or {}, state.settings
        rank = node["node_rank"]
        settle = plan_start(info, ctx.label, settings["unit"], settings["force"], False, ctx.run_id)
        if settle["do"] == "disarm":
            # Its own stray timers, whatever node 0 has: they would restart this node later, and the server with it.
            yield from calls.lock()
            yield say("%s: %s" % (ctx.label, settle["why"]))
            yield from calls.trial("disarmed")
            info = yield calls.fingerprint()
        plan = plan_start(info, ctx.label, settings["unit"], settings["force"], True, ctx.run_id)
        status = {"refuse": "refuse", "report": plan.get("status")}.get(plan["do"], "tune")
        boot = yield from calls.boot()
        yield steps.hello({
            "rank": rank, "host": ctx.host, "status": status, "why": plan.get("why") or plan.get("msg"), "boot": boot,
            "pin": pin_value(info), "running": info.get("mem_fraction_static"),
            # its unit stopped after its pin's start on what is on disk now: node 0 may tune from that start
            "pin_failed_last": pin_failed_last(info, boot),
            # this node's watch saw a near miss: the value it asks the server to verify
            "lower_to": watch_lower_to(plan.get("why"), info.get("watch"))})
        if status == "refuse":
            raise RunFailed(plan["msg"])
        state.info, state.invocation_id = info, info["invocation_id"]
        state.start_moved = []
        number = 0
        while True:
            # The first step follows node 0's readiness check; a later one may follow a whole trial.
            timeout = (ctx.args["ready_timeout"] + 120) if number == 0 else (settings["confirm_timeout"] + 600)
            step = yield steps.next_step(number, timeout, "%s: node 0's next step" % ctx.label)
            if step["do"] == "done":
                break
            if step["do"] == "kv_trial":
                yield from calls.lock()
            if step["do"] == "watch_start":
                answer = yield from self._watch_start(number + 1, timeout)
            else:
                answer = yield from self._follow_step(step)
            yield steps.answer(number, dict(answer, rank=rank, host=ctx.host))
            number += 1
        line = "%s: node %d of the server led by %s: %s" % (ctx.label, rank, step["leader"], step.get("line"))
        yield say(line)
        out = {"changed": state.changed, "status": step["status"], "follower_of": step["leader"], "line": line,
               "value": step.get("value"), "pin": info["pin"]}
        if step["status"] in ("failed", "no_stable_value"):
            out["msg"] = line
        return out

    def _gpu_watch(self, seconds: float) -> Steps[dict[str, Any]]:
        """gpu_info's watch of this node's GPUs for ``seconds``: what other processes take or give back there."""
        found = yield call("gpu_info", {"watch": seconds, "gpus": self.state.gpus,
                                        "watch_units": [self.ctx.unit] if self.state.gpus else []}, may_fail=True)
        return found.get("watched") or {}

    def _watch_start(self, following: int, timeout: float) -> Steps[dict[str, Any]]:
        """While this node's server starts on node 0's trial: what other processes take or give back on its GPUs, in
        spans of START_WATCH_SPAN_S (between two, the action sees a controller that is gone and reverts), until node
        0's next step (number ``following``) is there: node 0 is ready or gave up. Kept for the load's answer."""
        gpu_memory = (self.state.info or {}).get("gpu_memory")
        first, unlisted = outside_bytes(gpu_memory), unlisted_at(gpu_memory)
        self.state.start_moved = []
        for _span in range(int(timeout // START_WATCH_SPAN_S) + 1):
            if (yield steps.posted(following)):
                break
            seen = (yield from self._gpu_watch(START_WATCH_SPAN_S)).get("other_memory_seen")
            self.state.start_moved = self.state.start_moved or start_findings(seen, first, "while the server started",
                                                                              unlisted)
        return {"ok": True}

    def _follow_step(self, step: dict[str, Any]) -> Steps[dict[str, Any]]:
        """One of node 0's steps on this node: a kv_trial state (the same value and record), or watching the GPUs
        during node 0's load; the answer node 0 waits for."""
        state, calls = self.state, self.calls
        info = state.info or {}
        if step["do"] == "kv_trial":
            fact = step.get("fact")
            if fact is not None:   # this node's own fingerprint in its pin: what its next run compares with
                fact = dict(fact, fingerprint=info["fingerprint"], fingerprint_hash=info["fingerprint_hash"])
            result = yield from calls.trial(step["state"], step.get("text"), fact, may_fail=True)
            if result.get("failed"):
                return {"ok": False, "msg": result.get("msg") or "kv_trial failed: %s" % result}
            if result.get("invocation_id"):
                state.invocation_id = result["invocation_id"]
            return {"ok": True}
        # Memory another process takes or gives back here during the load moves this node's headroom: it is judged
        # against this node's first look, as node 0 judges its own.
        watched = (yield from self._gpu_watch(step["watch"])) if step.get("watch") else {}
        running = yield calls.fingerprint()
        boot = yield from calls.boot()
        moved, state.start_moved = state.start_moved + start_findings(
            watched.get("other_memory_seen"), outside_bytes(info.get("gpu_memory")), "during the load",
            unlisted_at(info.get("gpu_memory"))), []
        if moved:   # the server's boot, as node 0 merges every node's (multinode.server_boot)
            boot = dict(boot, untrusted=list(boot.get("untrusted") or []) + moved)
        return {"ok": True, "min_free_gib_per_gpu": watched.get("min_free_gib_per_gpu") or {},
                "running": bool(running["running"]), "same_start": running.get("invocation_id") == state.invocation_id,
                "boot": boot}

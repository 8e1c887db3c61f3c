# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The module calls a unit's run makes on its host (:class:`UnitCalls`), each one step or a few: the probe, the
readiness wait, the load, the startup log, and kv_trial as this run (on every node of a server that spans hosts)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from ansible_collections.llmserve.sglang.plugins.plugin_utils.run.context import Info, UnitContext, UnitState
from ansible_collections.llmserve.sglang.plugins.plugin_utils.run.steps import RunFailed, Step, Steps, call

if TYPE_CHECKING:
    from ansible_collections.llmserve.sglang.plugins.plugin_utils.run.nodes import Leader

# kv_trial states that change no value on the other nodes of a server (the lock is each node's own).
_OWN_STATES = ("locked", "unlocked", "disarmed")


def fingerprint_args(args: dict[str, Any], unit: Optional[str] = None, also_units: Any = ()) -> dict[str, Any]:
    """kv_fingerprint's arguments for ``unit``; the processes of ``also_units`` (its neighbours) are not counted as
    other processes' memory."""
    found = {"unit": unit or args["unit"], "model_revision": args["model_revision"], "require_running": False}
    if args.get("watch"):
        found["watch"] = args["watch"]
    if also_units:
        found["also_units"] = list(also_units)
    return found


def ready_call(args: dict[str, Any], unit: str, url: str, invocation_id: Optional[str] = None,
               may_fail: bool = False, gpus: Optional[list[int]] = None, also_units: Any = ()) -> Step:
    """sglang_ready on ``unit`` (answering at ``url``) with the run's timeout and interval; with ``gpus``, watching
    what processes other than those of the unit and ``also_units`` hold on them while it starts."""
    ready_args = {"url": url, "unit": unit, "api_key": args["api_key"], "timeout": args["ready_timeout"],
                  "interval": args["ready_interval"], "invocation_id": invocation_id}
    if gpus:
        ready_args["gpus"] = gpus
        if also_units:
            ready_args["also_units"] = list(also_units)
    return call("sglang_ready", ready_args, may_fail=may_fail)


class UnitCalls(object):
    """The unit's module calls. ``leader`` (set once the run knows it is node 0 of a server that spans hosts) makes
    every other node do each kv_trial first."""

    def __init__(self, ctx: UnitContext, state: UnitState) -> None:
        self.ctx, self.state = ctx, state
        self.leader: Optional[Leader] = None

    def fingerprint(self, unit: Optional[str] = None, also_units: Any = ()) -> Step:
        return call("kv_fingerprint", fingerprint_args(self.ctx.args, unit, also_units))

    def ready(self, invocation_id: Optional[str] = None, unit: Optional[str] = None, url: Optional[str] = None,
              may_fail: bool = False, gpus: Optional[list[int]] = None) -> Step:
        # The neighbours' processes are theirs, not another process's: the joint load judges what they hold.
        return ready_call(self.ctx.args, unit or self.ctx.unit, url or self.state.url, invocation_id, may_fail, gpus,
                          sorted(self.state.neighbours) if gpus else ())

    def load(self) -> Steps[dict[str, Any]]:
        """kv_stress with every neighbour loaded at the same time; a module failure is a load that did not hold."""
        args, state = self.ctx.args, self.state
        stress = yield call("kv_stress", {
            "url": state.url, "api_key": args["api_key"], "fill_ratio": args["stress_fill_ratio"],
            "duration": args["stress_duration"], "gpus": state.gpus,
            "also_urls": [found["url"] for found in state.neighbours.values() if found.get("url")],
            # what another process takes or gives back on the GPUs during the load moves the headroom measured
            "watch_units": [args["unit"]] + sorted(state.neighbours) if state.gpus else []}, may_fail=True)
        return {"held": False, "failure_reason": stress.get("msg")} if stress.get("failed") else stress

    def boot(self, invocation_id: Optional[str] = None) -> Steps[dict[str, Any]]:
        """The startup facts of the unit's last start, or of the start ``invocation_id`` (a trial's: read even when
        systemd started the unit again after it died); {} when its log says nothing (rotated out of the journal)."""
        args: dict[str, Any] = {"unit": self.ctx.unit}
        if invocation_id:
            args["invocation_id"] = invocation_id
        if self.state.checkpoint:   # the weights the log reports are checked against the checkpoint's share
            args["checkpoint_bytes"] = self.state.checkpoint
        boot = yield call("sglang_startup_facts", args, may_fail=True)
        return {} if boot.get("failed") else boot

    def trial(self, state: str, text: Optional[str] = None, fact: Optional[dict[str, Any]] = None,
              may_fail: bool = False) -> Steps[dict[str, Any]]:
        """kv_trial on the unit, as this run (it renews, takes or releases the run's lock). On node 0 of a
        multi-node server every other node does the same first: one value on every node, restarted together."""
        leader = self.leader if self.state.ranks is not None and state not in _OWN_STATES else None
        message = {"do": "kv_trial", "state": state, "text": text, "fact": fact}
        if leader is not None and state == "committed":
            # All nodes or none: every node stages the new pin first (a full disk or a read-only directory fails
            # here, while each node is still on its trial, which the failure reverts); then each one commits.
            yield from leader.tell(dict(message, state="prepared"))
            yield from self.own_trial("prepared", text, fact)
        if leader is not None and state != "reverted":
            yield from leader.tell(message)
        result = yield from self.own_trial(state, text, fact, may_fail)
        if leader is not None and state == "reverted":
            # This node is back on its last-known-good value before any word to the others, which may not come
            # (the controller killed, the link down): each of them reverts by itself then.
            yield from leader.tell(message)
        return result

    def own_trial(self, state: str, text: Optional[str] = None, fact: Optional[dict[str, Any]] = None,
                  may_fail: bool = False) -> Steps[dict[str, Any]]:
        """kv_trial on this node's unit only."""
        settings = self.state.settings
        args: dict[str, Any] = {"unit": self.ctx.unit, "state": state, "run_id": self.ctx.run_id,
                                "controller": self.ctx.controller, "lease": int(settings["confirm_timeout"]) + 600}
        if text is not None:
            args["value"] = text
        if state == "started":
            args["confirm_timeout"] = int(settings["confirm_timeout"])
        if fact is not None:
            args["fact"] = fact
        result = yield call("kv_trial", args, may_fail=may_fail)
        if not result.get("failed"):
            self.state.changed = self.state.changed or bool(result.get("changed"))
            self.state.locked = {"locked": True, "unlocked": False}.get(state, self.state.locked)
        return result

    def lock(self) -> Steps[None]:
        """Take the unit's lock (once), then make sure no other run holds a neighbour."""
        if not self.state.locked:
            yield from self.trial("locked")
            yield from self._neighbours_free()

    def _neighbours_free(self) -> Steps[None]:
        """Once this run holds its unit: a neighbour that another run holds (a second controller on the host's other
        units, a rollout) would be restarted or loaded by that run while this one measures the shared GPUs. Each run
        takes its own lock first and then looks, so of two that start together at least one stops."""
        unit = self.ctx.unit
        for other in sorted(self.state.neighbours):
            found: Info = yield self.fingerprint(other)
            lock = found.get("lock") or {}
            if lock.get("live") and lock.get("run_id") != self.ctx.run_id:
                raise RunFailed("%s shares its GPUs with %s, which run %s from %s holds (a tune or rollout.yml of "
                                "it): two runs would restart and load the same GPUs; %s was not tuned, nothing was "
                                "restarted" % (unit, other, lock.get("run_id"), lock.get("controller"), unit))
            self.state.neighbours[other] = found

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Before the search: the unit settled (a stale server restarted, a pending trial reverted, stray timers disarmed)
and what it asks for then (tuner/start_value.plan_start: tune, report, re-pin, refuse); a last-known-good value that
no longer starts is read from its own start's log."""
from __future__ import annotations

from typing import Any, Optional

from ansible_collections.llmserve.sglang.plugins.plugin_utils.fleet import multinode
from ansible_collections.llmserve.sglang.plugins.plugin_utils.run.context import Info, Part
from ansible_collections.llmserve.sglang.plugins.plugin_utils.run.steps import RunFailed, Steps, say
from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner.pool_model import model_inputs
from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner.start_value import (
    failed_start, failed_start_to_read, plan_start, stopped_after_failing)

# Before the search each settling step changes one thing (restart a stale server, revert a pending trial, disarm
# timers) and asks again; more than these in a row is a unit that does not settle.
SETTLE_STEPS = 4

Plan = dict[str, Any]
Safe = Optional[dict[str, Any]]   # a start that failed, to tune from a safe start: its boot and why


class Settle(Part):
    """The unit settled before its search."""

    def settle(self, info: Info, others: Optional[str]) -> Steps[tuple[Info, Plan, Safe]]:
        """(what the unit looks like now, plan_start's plan, a failed start's boot to tune from or None); ``others``
        is why the other nodes of a server that spans hosts ask for a tune (None: nothing)."""
        ctx, calls, settings = self.ctx, self.calls, self.state.settings
        plan: Plan = {}
        for _attempt in range(SETTLE_STEPS):
            plan = plan_start(info, ctx.label, settings["unit"], settings["force"], ctx.check_mode, ctx.run_id,
                              others, settings["pin_tokens"])
            if plan["do"] not in ("restart", "revert", "disarm"):
                break
            if plan["do"] != "disarm" and info.get("fingerprint"):
                # A model the formula cannot read would fail the tune after this restart: fail before it.
                model_inputs(info["config"], info["fingerprint"]["server_args"], info["sglang_version"],
                             info.get("sizing_environment"))
            yield from calls.lock()
            if plan["do"] == "revert" and not info["running"]:
                safe = yield from self.stopped_after_failing(info)
                if safe is not None:
                    return info, plan, safe
            yield say("%s: %s" % (ctx.label, plan["why"]))
            if plan["do"] == "disarm":
                yield from calls.trial("disarmed")
            else:
                reverted = yield from calls.trial("reverted")
                ready = yield calls.ready(reverted.get("invocation_id"))
                if not ready["ready"]:
                    # By the start the revert made: systemd may have begun another since, with nothing in its log.
                    safe = yield from self.after_a_failed_start(info, ready, reverted.get("invocation_id"))
                    return info, plan, safe
            info = yield calls.fingerprint()
        return info, plan, None

    def stopped_after_failing(self, info: Info) -> Steps[Safe]:
        """A stopped unit whose last start was its last-known-good value failing for a lack of memory on what is on
        disk now (start_value.stopped_after_failing): that start's own log is the failed start to tune from, with no
        restart onto the value that fails; None: revert as usual. On node 0 of a server that spans hosts, only where
        every other node's unit is stopped after that start of its pin too, judged by every node's log (a node's
        lack of memory ends the others' start with a lost connection)."""
        invocation_id = failed_start_to_read(info)
        if invocation_id is None or (self.state.node is not None and not self.state.others_failed_last):
            return None
        boot = yield from self.calls.boot(invocation_id)
        if self.state.ranks is not None:
            boot = multinode.server_start_failure(boot, self.state.boots)
        why = stopped_after_failing(info, boot)
        if why is None:
            return None
        yield say("%s: %s" % (self.ctx.label, why))
        return {"boot": boot, "why": why}

    def after_a_failed_start(self, info: Info, ready: dict[str, Any],
                             invocation_id: Optional[str] = None) -> Steps[dict[str, Any]]:
        """The last-known-good value did not come back (its last start, or the start ``invocation_id``): tune from a
        safe start when it ran out of memory, else stop loudly with the unit left as it is."""
        unit = self.state.settings["unit"]
        boot = yield from self.calls.boot(invocation_id)
        leader = self.calls.leader
        if self.state.ranks is not None and leader is not None:
            # Node 0's log may only show another node's failure (a lost connection): every node's says why.
            seen = yield from leader.tell({"do": "observe", "watch": 0})
            boot = multinode.server_start_failure(boot, {ack["host"]: ack.get("boot") for ack in seen})
        lkg = (boot.get("server_args") or {}).get("mem_fraction_static", info.get("mem_fraction_static"))
        lkg_text = "?" if lkg is None else str(lkg)
        message = failed_start(boot, unit, lkg_text)
        if message is not None:
            raise RunFailed("%s (%s: %s)" % (message, ready["reason"], ready["detail"]))
        if info.get("fingerprint") is None:
            raise RunFailed("%s does not start on its last-known-good value %s, and its unit file cannot be read "
                            "well enough to fingerprint it" % (unit, lkg_text))
        failure = boot.get("failure") or {}
        why = ("the last-known-good value %s no longer starts (%s: %s): tuning from a safe start"
               % (lkg_text, failure.get("kind"), failure.get("line")))
        yield say("%s: %s" % (self.ctx.label, why))
        return {"boot": boot, "why": why}

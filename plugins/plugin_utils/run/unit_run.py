# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""One unit's run (docs/DESIGN.md, "The tuner"), as steps (steps.py): every decision before, during and after its
search, and no I/O. :class:`UnitRun` puts the phases in order: settle (settle.py), the start (start.py), the search
(search.py), the aftercare (aftercare.py), the runs without a search (special.py), and a server that spans hosts
(nodes.py). They share the run's context and state (context.py) and the unit's module calls (calls.py)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional

from ansible_collections.llmserve.sglang.plugins.module_utils.service.host_units import outside_bytes, unlisted_at
from ansible_collections.llmserve.sglang.plugins.plugin_utils.fleet import multinode
from ansible_collections.llmserve.sglang.plugins.plugin_utils.run.aftercare import Aftercare
from ansible_collections.llmserve.sglang.plugins.plugin_utils.run.calls import UnitCalls
from ansible_collections.llmserve.sglang.plugins.plugin_utils.run.context import Info, UnitContext, UnitState
from ansible_collections.llmserve.sglang.plugins.plugin_utils.run.host import held_gpus
from ansible_collections.llmserve.sglang.plugins.plugin_utils.run.nodes import Follower, Leader
from ansible_collections.llmserve.sglang.plugins.plugin_utils.run.search import Search
from ansible_collections.llmserve.sglang.plugins.plugin_utils.run.settle import Settle
from ansible_collections.llmserve.sglang.plugins.plugin_utils.run.special import Special
from ansible_collections.llmserve.sglang.plugins.plugin_utils.run.start import SearchStart
from ansible_collections.llmserve.sglang.plugins.plugin_utils.run.steps import RunFailed, Steps, say
from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner.run_settings import check_settings

Result = dict[str, Any]


class UnitRun(object):
    """One unit's run: :meth:`steps` from the first look to the result, :meth:`finish` after it (the neighbours),
    :meth:`revert` and :meth:`unlock` for the action's cleanup, :meth:`failed` for the result of a run that raised.

    ``info`` is the unit's kv_fingerprint result when the caller has it; ``neighbours`` unit -> kv_fingerprint of the
    host's other units that share its GPUs; the rest is :class:`context.UnitContext`'s."""

    def __init__(self, host: str, label: str, args: dict[str, Any], check_mode: bool, run_id: str, controller: str,
                 clock: Callable[[], str], info: Optional[Info] = None, neighbours: Optional[dict[str, Info]] = None,
                 tuned: Optional[dict[str, Any]] = None,
                 outcome_of: Optional[Callable[[str], Optional[dict[str, Any]]]] = None,
                 lock_held: bool = False) -> None:
        self.ctx = UnitContext(host, label, args, check_mode, run_id, controller, clock, tuned or {},
                               outcome_of or (lambda _host: None), lock_held)
        self.state = UnitState(url=args["url"], info=info, neighbours=dict(neighbours or {}))
        self.calls = UnitCalls(self.ctx, self.state)
        parts = (self.ctx, self.state, self.calls)
        self.settle = Settle(*parts)
        self.start = SearchStart(*parts, settle=self.settle)
        self.search = Search(*parts)
        self.special = Special(*parts)
        self.aftercare = Aftercare(*parts)

    # -- what the action reads -------------------------------------------------------------------------------------

    @property
    def label(self) -> str:
        return self.ctx.label

    @property
    def args(self) -> dict[str, Any]:
        return self.ctx.args

    @property
    def locked(self) -> bool:
        return self.state.locked

    @property
    def node(self) -> Optional[dict[str, Any]]:
        return self.state.node

    def leads(self) -> bool:
        """Whether the other nodes of a server wait for this run's word when it ends (node 0, not in check mode)."""
        node = self.state.node
        return node is not None and node["node_rank"] == 0 and not self.ctx.check_mode

    def release_message(self, result: Result) -> dict[str, Any]:
        """What node 0 tells the other nodes when its run ends, whatever happened."""
        return {"do": "done", "leader": self.ctx.host,
                "status": "failed" if result.get("failed") else result.get("status"),
                "value": ((result.get("result") or {}).get("after") or {}).get("mem_fraction_static"),
                "line": result.get("line") or result.get("msg")}

    def failed(self, msg: str, reverted: bool) -> Result:
        return {"failed": True, "changed": self.state.changed or reverted,
                "msg": msg + (" (the trial in progress was reverted)" if reverted else "")}

    # -- for the action's cleanup ----------------------------------------------------------------------------------

    def revert(self) -> Steps[Result]:
        """Back to the last-known-good value now (the trial in progress, on every node)."""
        return (yield from self.calls.trial("reverted"))

    def unlock(self, controller_gone: bool = False) -> Steps[Optional[Result]]:
        """Release the run's lock. A caller's lock (rollout.yml's) is left to it, which is still upgrading the host,
        unless the controller is gone: then nobody will finish that upgrade, and the lock let go now is what puts the
        host back on its release of before (its release guard) at once, not at the end of the lock's lease."""
        if self.ctx.lock_held and not controller_gone:
            return None
        return (yield from self.calls.trial("unlocked"))

    # -- the run ---------------------------------------------------------------------------------------------------

    def steps(self) -> Steps[Result]:
        ctx, state, calls = self.ctx, self.state, self.calls
        state.settings = check_settings(ctx.args)
        info = state.info or (yield calls.fingerprint())
        self._where(info)
        others = None
        if state.node is not None and not ctx.check_mode:
            if state.node["node_rank"] > 0:
                return (yield from Follower(ctx, state, calls).follow(info))
            calls.leader = Leader(ctx, state)
            others = yield from calls.leader.lead(info)
        if ctx.args["reset"]:
            return (yield from self.special.reset(info))
        info, plan, safe = yield from self.settle.settle(info, others)
        if safe is None:
            if plan["do"] == "refuse":
                raise RunFailed(plan["msg"])
            if plan["do"] == "report":
                yield say(plan["line"])
                return self.special.report(plan["status"], plan["why"], plan["line"], info)
            if plan["do"] == "repin":
                return (yield from self.special.repin(info, plan))
            if plan["do"] != "tune":
                raise RunFailed("%s did not settle before the search (%s)" % (state.settings["unit"], plan.get("why")))
        yield from self.start.limits(info, plan, safe, others)
        state.url = info["url"] or state.url
        model = yield from self.start.model(info)
        if safe is None and plan["dry_run"]:
            yield say(plan["line"])
            return dict(self.special.report("would_tune", plan["why"], plan["line"], info), changed=False)
        yield from calls.lock()
        state.first_other = outside_bytes(info.get("gpu_memory"), [found.get("gpu_memory")
                                                                   for found in state.neighbours.values()])
        state.first_unlisted = unlisted_at(info.get("gpu_memory"))
        tuner = yield from self.start.tuner(info, model, safe, plan)
        return (yield from self.search.search(tuner, info))

    def _where(self, info: Info) -> None:
        """Where the unit answers and what it holds: several servers on one host answer on their own ports, on their
        own GPUs; the neighbours' GPUs count too (their memory is what the pair has left)."""
        state = self.state
        state.checkpoint = info.get("checkpoint_bytes")
        state.url = info.get("url") or state.url
        state.gpus = held_gpus(info)
        if state.gpus is not None:
            for found in state.neighbours.values():
                state.gpus = sorted(set(state.gpus) | set(held_gpus(found) or []))
        state.node = multinode.node_of(info.get("server_args"))

    def finish(self, result: Result) -> Steps[Result]:
        """After the run: every neighbour serves again, and the result names the unit (aftercare.py)."""
        return (yield from self.aftercare.finish(result))

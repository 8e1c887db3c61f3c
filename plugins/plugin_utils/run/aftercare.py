# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""After a unit's run, whatever its outcome: every server that shares its GPUs serves again, on its own last-known-good
value, and holds the joint load once more; a neighbour lost fails the unit."""
from __future__ import annotations

from typing import Any

from ansible_collections.llmserve.sglang.plugins.plugin_utils.run.context import Part
from ansible_collections.llmserve.sglang.plugins.plugin_utils.run.steps import Steps, call, say


class Aftercare(Part):
    """The neighbours after the run, and the result named for the unit."""

    def finish(self, result: dict[str, Any]) -> Steps[dict[str, Any]]:
        """Every server that shares the unit's GPUs serves again (a neighbour lost fails the unit), and the result
        names the unit."""
        state = self.state
        lost: list[str] = []
        if state.neighbours and (state.changed or "result" in result):
            lost = yield from self._neighbours_serving()
        if lost:
            said = result.get("msg") or result.get("line")
            result = dict(result, failed=True, changed=True, msg="; ".join(([said] if said else []) + lost))
        result["unit"] = self.ctx.unit
        result["label"] = self.ctx.label
        if state.node is not None:
            result["node"] = state.node
        return result

    def _neighbours_serving(self) -> Steps[list[str]]:
        """A neighbour that a trial ran out of memory (systemd restarts it, perhaps while the trial still held its
        memory) is restarted on its own last-known-good value and must answer; what still does not is named. The
        pair, restarted, must hold the joint load once more."""
        ctx, state, calls = self.ctx, self.state, self.calls
        args = ctx.args
        lost, restarts = [], []
        for unit, before in sorted(state.neighbours.items()):
            now = yield calls.fingerprint(unit)
            if now["running"] and now.get("invocation_id") == before.get("invocation_id"):
                continue
            yield say("%s: %s, which shares its GPUs, stopped or restarted during the search: restarting it on its "
                      "last-known-good value" % (ctx.label, unit))
            state.changed = True
            restarted = yield call("kv_trial", {"unit": unit, "state": "reverted"}, may_fail=True)
            ready = yield calls.ready(restarted.get("invocation_id"), unit, now.get("url") or before.get("url"),
                                      may_fail=True)
            if restarted.get("failed") or not ready.get("ready"):
                lost.append("%s, which shares the GPUs of %s, DOES NOT SERVE: %s" % (
                    unit, args["unit"], restarted.get("msg") or "%s: %s" % (ready.get("reason"), ready.get("detail"))))
            else:
                restarts.append(unit)
        if restarts and not lost:
            stress = yield from calls.load()
            if not stress.get("held") or (stress.get("min_free_gib") or 0) < args["safety_gib"]:
                lost.append("%s and %s, restarted on their last-known-good values, do not hold the load together "
                            "with %s GiB to spare (%s): run tune_kv.yml again" % (
                                args["unit"], ", ".join(restarts), args["safety_gib"],
                                stress.get("failure_reason") or "%s GiB free" % stress.get("min_free_gib")))
        return lost

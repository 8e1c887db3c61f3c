# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The search: tuner/tuner.py's Tuner decides each step (a trial, a revert, a commit), this part turns it into module
calls and hands back what they saw, judged: memory that moved on the GPUs while a trial started or ran, and a pool off
SGLang's formula by more than the run's first trusted start, make a trial's log untrusted."""
from __future__ import annotations

from typing import Any, Optional

from ansible_collections.llmserve.sglang.plugins.module_utils.service import kv_pin
from ansible_collections.llmserve.sglang.plugins.module_utils.startup.boot_trust import (
    look_findings, pool_findings, start_findings)
from ansible_collections.llmserve.sglang.plugins.module_utils.watch import kv_watch
from ansible_collections.llmserve.sglang.plugins.plugin_utils.fleet import multinode
from ansible_collections.llmserve.sglang.plugins.plugin_utils.run.context import Info, Part, UnitState
from ansible_collections.llmserve.sglang.plugins.plugin_utils.run.steps import Steps, say
from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner.pool_model import pool_residual_gib, split_pool
from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner.report_lines import (
    report_markdown, result_line, watch_summary)
from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner.tuner import Tuner

Boot = dict[str, Any]


def judge_pool(state: UnitState, boot: Boot) -> Boot:
    """The boot, untrusted when its pool is off the formula at its own P, A and f by other than the run's first
    trusted start's (the running server's when its log has one: what the formula leaves out of this
    configuration)."""
    residual = pool_residual_gib(*state.pool_inputs, boot) if state.pool_inputs else None
    if residual is None:
        return boot
    if state.pool_reference is None:
        if not boot.get("untrusted"):
            state.pool_reference = residual
        return boot
    moved = pool_findings(residual, state.pool_reference)
    return dict(boot, untrusted=list(boot.get("untrusted") or []) + moved) if moved else boot


class Search(Part):
    """The Tuner's steps as module calls, from its first step to its result."""

    def search(self, tuner: Tuner, info: Info) -> Steps[dict[str, Any]]:
        ctx, state, calls = self.ctx, self.state, self.calls
        started = ctx.clock()
        yield say(tuner.start_line())
        step = tuner.first_step()
        while step["do"] != "done":
            if step["do"] == "trial":
                observation = yield from self._observe_trial(step)
            elif step["do"] == "revert":
                yield say("%s: %s: back to the last-known-good value %s"
                          % (ctx.label, step["why"], step["text"] or "(SGLang's default)"))
                reverted = yield from calls.trial("reverted")
                observation = {"ready": (yield calls.ready(reverted.get("invocation_id"))),
                               "running": (yield calls.fingerprint())}
            else:  # commit a new best, or pin: the fact records every trial
                entry = yield from self._pin_entry(tuner.fact_entry(ctx.clock()), info)
                observation = yield from calls.trial("committed", step["text"], entry)
            was_trial = step["do"] == "trial"
            step = tuner.advance(observation)
            if was_trial:
                yield say(tuner.progress_line())
        result = tuner.result(step["status"], started, ctx.clock(), (info["fingerprint"] or {}).get("versions"))
        result["kv_sizing"] = state.sizing
        if state.cap is not None and step["status"] == "tuned":
            result["after"]["max_total_tokens"] = state.cap
        line = result_line(result)
        yield say(line)
        out = {"changed": True, "status": step["status"], "why": tuner.reason, "line": line, "pin": info["pin"],
               "result": result, "report": report_markdown(result), "watch": watch_summary(info.get("watch"))}
        if step["msg"]:
            out["msg"] = step["msg"]
        return out

    def _observe_trial(self, step: dict[str, Any]) -> Steps[dict[str, Any]]:
        state, calls = self.state, self.calls
        started = (yield from calls.trial("started", step["text"])) if step["restart"] else None
        # A start is watched: memory another process takes or gives back on its GPUs while SGLang measures them
        # changes the pool, and the log need not show it.
        watched = (state.gpus or sorted(state.first_other)) if started else None
        leader = calls.leader if state.ranks is not None else None
        if started and leader is not None:
            # The other nodes watch their own GPUs the same way, until this node's next step.
            yield from leader.tell({"do": "watch_start"}, wait=False)
        trial_start = (started or {}).get("invocation_id") or state.invocation_id
        ready = yield calls.ready(trial_start, gpus=watched)
        observed: Optional[int] = None   # the number of node 0's step the other nodes watch the load under
        if leader is not None:
            # The other nodes watch their GPUs while this node drives the load (every rank holds its activations).
            observed = yield from leader.tell({"do": "observe", "watch": self.ctx.args["stress_duration"] + 5
                                               if ready["ready"] else 0}, wait=False)
        stress = (yield from calls.load()) if ready["ready"] else None
        # The last look at the GPUs before the trial is judged (and committed): the neighbours' memory is theirs.
        running = yield calls.fingerprint(also_units=sorted(state.neighbours))
        boot = yield from calls.boot(trial_start)
        moved = start_findings(ready.get("other_memory_seen"), state.first_other,
                               unlisted_before=state.first_unlisted) if started else []
        moved += start_findings((stress or {}).get("other_memory_seen"), state.first_other, "during the load",
                                state.first_unlisted)
        if running["running"] and stress is not None:
            moved += look_findings(running.get("gpu_memory"), state.gpus, state.first_other, state.first_unlisted)
        if moved:
            boot = dict(boot, untrusted=list(boot.get("untrusted") or []) + moved)
        if leader is not None and observed is not None:
            seen = {ack["host"]: ack for ack in (yield from leader.answers(observed))}
            stress = multinode.merge_samples(stress, seen) if stress is not None else None
            boot = multinode.server_boot(boot, {host: ack.get("boot") for host, ack in seen.items()})
        boot = judge_pool(state, boot)
        state.seen_boots.append(boot)
        return {"started": started, "ready": ready, "stress": stress, "boot": boot,
                "running": running if running["running"] else None}

    def _pin_entry(self, entry: dict[str, Any], info: Info) -> Steps[dict[str, Any]]:
        """A commit's fact entry, with the value that missed under real traffic on this fingerprint (``missed``, for
        the searches after it); with kv_tune_pin_tokens, with the cap on the pool that the pin then writes
        (kv_pin.pool_cap: the verified pool, None for a hybrid model), said once when there is none."""
        state = self.state
        if state.missed is not None:
            entry = dict(entry, missed=state.missed)
        if kv_watch.same_pin(info.get("pin"), entry):
            # A re-pin that changes nothing keeps the pin's time: the headroom watch's evidence since it still counts.
            entry = dict(entry, time=info["pin"]["time"])
        if not state.settings["pin_tokens"]:
            return entry
        cap, why_not = kv_pin.pool_cap(entry.get("tokens"), split_pool(info.get("config"), state.seen_boots),
                                       state.class_tokens)
        if why_not is not None and not state.no_cap_said:
            state.no_cap_said = True
            yield say("%s: kv_tune_pin_tokens: the pin caps no pool: %s" % (self.ctx.label, why_not))
        state.cap = cap
        return dict(entry, max_total_tokens=cap)

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Where a unit's search starts: its limits (a near miss under real traffic verified lower, a value that missed never
tried again), the model the formula must know, and the starting point (the running server's boot or a failed
start's, a class's value to verify, tuner/start_value.first_value) from which tuner/tuner.py's Tuner searches."""
from __future__ import annotations

from typing import Any, Optional

from ansible_collections.llmserve.sglang.plugins.module_utils.capacity import kv_search
from ansible_collections.llmserve.sglang.plugins.module_utils.capacity.kv_search import value_text
from ansible_collections.llmserve.sglang.plugins.module_utils.service.host_units import unit_outcome
from ansible_collections.llmserve.sglang.plugins.module_utils.watch import kv_watch
from ansible_collections.llmserve.sglang.plugins.plugin_utils.fleet import multinode
from ansible_collections.llmserve.sglang.plugins.plugin_utils.run.calls import UnitCalls
from ansible_collections.llmserve.sglang.plugins.plugin_utils.run.context import Info, Part, UnitContext, UnitState
from ansible_collections.llmserve.sglang.plugins.plugin_utils.run.search import judge_pool
from ansible_collections.llmserve.sglang.plugins.plugin_utils.run.settle import Plan, Safe, Settle
from ansible_collections.llmserve.sglang.plugins.plugin_utils.run.steps import RunFailed, Steps, say
from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner.class_values import (
    class_tokens, class_value, verify_value)
from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner.pool_model import lower_bound, model_inputs
from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner.report_lines import fraction_text
from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner.start_value import (
    first_value, safe_start, watch_lower_to)
from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner.tuner import Tuner


class SearchStart(Part):
    """The search's limits, model and starting point."""

    def __init__(self, ctx: UnitContext, state: UnitState, calls: UnitCalls, settle: Settle) -> None:
        super(SearchStart, self).__init__(ctx, state, calls)
        self.settle = settle

    def limits(self, info: Info, plan: Plan, safe: Safe, others: Optional[str]) -> Steps[None]:
        """The settings narrowed by what real traffic showed: a near miss is verified lower only where it is why the
        server is tuned (its own watch's, or another node's: node 0 tunes for the other nodes' reasons when its own
        pin holds); a value that missed on this fingerprint is never searched again."""
        state = self.state
        settings = state.settings
        watch = info.get("watch") or {}
        own = watch_lower_to(plan["why"], watch)
        theirs = state.nodes_lower_to if plan["why"] and plan["why"] in (watch.get("retune"), others) else None
        asked = [value for value in (own, theirs) if value is not None]
        lower_to = min(asked) if asked else None
        state.missed = kv_watch.missed_value(info.get("pin"), info.get("fingerprint_hash"))
        if safe is None and lower_to is not None and info.get("pin"):
            # A near miss under real traffic: the pin less the memory it missed, verified under the load; the
            # synthetic load held the pin, so the search must not climb back to it.
            lower_to = kv_search.grid_down(lower_to + kv_search.TOLERANCE, settings["resolution"])
            state.settings = dict(settings, start=lower_to, cap=lower_to)
            state.missed = min(info["pin"]["mem_fraction_static"], state.missed or 1.0)
        elif state.missed is not None:
            # A value missed under real traffic on this fingerprint: no search (headroom's included) goes back to it.
            below = kv_search.grid_down(state.missed - settings["resolution"] + kv_search.TOLERANCE,
                                        settings["resolution"])
            if below < settings["cap"] - kv_search.TOLERANCE:
                yield say("%s: %s missed under real traffic on this fingerprint (the headroom watch): the search "
                          "stays at or below %s" % (self.ctx.label, fraction_text(state.missed), value_text(
                              below, settings["resolution"])))
                state.settings = dict(settings, cap=below, start=None if settings["start"] is None
                                      else min(settings["start"], below))

    def model(self, info: Info) -> Steps[Optional[dict[str, Any]]]:
        """The formula's inputs for the model (attention, dtype): an unknown one fails here, before anything
        restarts; whether SGLang sizes the pool by the formula (judged at every start) or after CUDA-graph capture."""
        state = self.state
        model = model_inputs(info["config"], info["fingerprint"]["server_args"], info["sglang_version"],
                             info.get("sizing_environment"))
        if model and not model["post_capture_sizing"]:
            state.pool_inputs = (info["config"], info["fingerprint"]["server_args"], info["sglang_version"],
                                 info.get("sizing_environment"))
        if model and model["post_capture_sizing"]:
            state.sizing = "after CUDA-graph capture"
            yield say("%s: SGLang %s sizes the KV pool of %s after CUDA-graph capture (SGLANG_ENABLE_POST_CAPTURE_KV_"
                      "SIZING), from what is free then: no formula predicts it, every value is measured"
                      % (self.ctx.label, info.get("sglang_version") or "(newest)", state.settings["unit"]))
        return model

    def tuner(self, info: Info, model: Optional[dict[str, Any]], safe: Safe, plan: Plan) -> Steps[Tuner]:
        """The search's starting point: the running server's boot (or the failed start's), the value it runs, and
        where to start (start_value.first_value)."""
        ctx, state, calls = self.ctx, self.state, self.calls
        settings = state.settings
        if safe is None:
            ready = yield calls.ready(info["invocation_id"])
            if not ready["ready"]:
                if ready["reason"] not in ("unit_failed", "unit_restarted") or state.ranks is not None:
                    raise RunFailed("%s must serve its last-known-good value before it is tuned (%s: %s); nothing "
                                    "was restarted" % (settings["unit"], ready["reason"], ready["detail"]))
                # The start the probe found running failed before it served (a value that cannot start, which
                # systemd restarts in a loop): that start's own log says why, as after a restart of its own.
                safe = yield from self.settle.after_a_failed_start(info, ready, info["invocation_id"])
        if safe is not None:
            boot, why, state.invocation_id = safe["boot"], safe["why"], None
        else:
            boot, why, state.invocation_id = (yield from calls.boot()), plan["why"], info["invocation_id"]
            if state.ranks is not None:   # the server's P and A: the least of any node's, as it joined
                boot = multinode.server_boot(boot, state.boots)
        judge_pool(state, boot)   # the running start, measured before any restart, is the pool's reference
        state.seen_boots.append(boot)
        running_value = info["mem_fraction_static"]
        if running_value is None:
            running_value = (boot.get("server_args") or {}).get("mem_fraction_static")
        # A class's value, verified on this very fingerprint, is a better first value than a safe start when the
        # last-known-good value no longer starts (a rollout's members whose old pin fails on the new release).
        verify = yield from self._class_value()
        safe_value = None if safe is None else safe_start(safe["boot"], info["fingerprint"], model, settings)
        lowest = lower_bound(boot, model, settings["min_tokens"])
        start, source = first_value(ctx.label, settings, running_value, verify, safe_value,
                                    default=lambda: safe_start(boot, info["fingerprint"], model, settings),
                                    lowest=lowest)
        if settings["start"] is not None and source not in ("kv_tune_start", "class"):
            yield say("%s: kv_tune_start %s lies below the lowest value that gives %s a pool here (%s, by SGLang's "
                      "formula from the running server's free memory): not tried; starting from %s"
                      % (ctx.label, value_text(settings["start"], settings["resolution"]), settings["unit"],
                         # the running value may lie off the grid (SGLang's own default): a measurement, not a trial
                         "?" if lowest is None else "%.3f" % lowest, fraction_text(start, settings["resolution"])))
        if source == "sglang_default":
            yield say("%s: %s runs SGLang's default --mem-fraction-static, which neither its command line nor its "
                      "startup log states: starting from %s, inferred for these GPUs and SGLang %s"
                      % (ctx.label, settings["unit"], value_text(start, settings["resolution"]),
                         info.get("sglang_version") or "(newest)"))
        return Tuner(ctx.label, settings, why, running_value, boot, info["fingerprint"], info["fingerprint_hash"],
                     start, lower_bound=lowest, invocation_id=state.invocation_id, verify=verify)

    def _class_value(self) -> Steps[Optional[float]]:
        """per_class: the value this member verifies (its class's less the margin), None for a search of its own."""
        ctx, state = self.ctx, self.state
        settings = state.settings
        entry = (ctx.args.get("class_plan") or {}).get(settings["unit"])
        if settings["strategy"] != "per_class" or not entry or state.node is not None:
            return None
        canary = entry.get("canary_host")
        outcome = None
        if canary == ctx.host:   # another unit of this host, tuned earlier in this task
            outcome = ctx.tuned.get(entry["canary_unit"])
        elif canary:
            found = ctx.outcome_of(canary)
            outcome = unit_outcome(found, entry["canary_unit"]) if found is not None else None
        value = class_value(entry, outcome)
        state.class_tokens = class_tokens(entry, outcome)
        if value is None:
            if entry.get("role") == "member":
                yield say("%s: the canary %s of its class found no value: a search of its own"
                          % (ctx.label, entry.get("canary")))
            return None
        return verify_value(value, settings)

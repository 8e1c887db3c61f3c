# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A unit's runs without a search: a report of what holds, kv_tune_reset (the pin forgotten), and a re-pin
(kv_tune_pin_tokens changed on a pin that holds: its cap on the pool written or removed, without a restart)."""
from __future__ import annotations

from typing import Any

from ansible_collections.llmserve.sglang.plugins.module_utils.capacity.kv_search import value_text
from ansible_collections.llmserve.sglang.plugins.module_utils.service import kv_pin
from ansible_collections.llmserve.sglang.plugins.module_utils.service.host_units import other_gib
from ansible_collections.llmserve.sglang.plugins.plugin_utils.run.context import Info, Part
from ansible_collections.llmserve.sglang.plugins.plugin_utils.run.settle import Plan
from ansible_collections.llmserve.sglang.plugins.plugin_utils.run.steps import RunFailed, Steps, say
from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner.pool_model import split_pool
from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner.report_lines import (
    fraction_text, token_count, watch_summary)


class Special(Part):
    """The runs that end without a search."""

    def report(self, status: str, why: str, line: str, info: Info) -> dict[str, Any]:
        """A result that changes nothing more: what the unit runs, and why."""
        return {"changed": self.state.changed, "status": status, "why": why, "line": line, "pin": info["pin"],
                "fingerprint_hash": info.get("fingerprint_hash"), "other_gib": other_gib(info.get("gpu_memory")),
                "watch": watch_summary(info.get("watch"))}

    def reset(self, info: Info) -> Steps[dict[str, Any]]:
        """kv_tune_reset: forget the pin; the unit runs the value of its base unit file again."""
        ctx, calls = self.ctx, self.calls
        unit = ctx.unit
        if ctx.check_mode:
            line = "%s: %s would lose its pin (%s); check mode restarts nothing." % (
                ctx.label, unit, "none" if info["pin"] is None else info["pin"].get("mem_fraction_static"))
            yield say(line)
            return dict(self.report("would_reset", "kv_tune_reset", line, info), changed=info["pin"] is not None)
        yield from calls.lock()
        ready = yield calls.ready((yield from calls.trial("reset")).get("invocation_id"))
        after = yield calls.fingerprint()
        line = "%s: %s lost its pin and runs %s (its base value)%s" % (
            ctx.label, unit, after.get("mem_fraction_static") or "SGLang's default",
            "" if ready["ready"] else "; IT DOES NOT SERVE: %s: %s" % (ready["reason"], ready["detail"]))
        yield say(line)
        if not ready["ready"]:
            raise RunFailed(line)
        return {"changed": True, "status": "reset", "why": "kv_tune_reset", "line": line, "pin": None}

    def repin(self, info: Info, plan: Plan) -> Steps[dict[str, Any]]:
        """kv_tune_pin_tokens changed on a unit whose pin holds: the pin's cap on the pool written or removed, without
        a restart (the server runs the value; the cap applies from its next start, and only ever shrinks a pool)."""
        ctx, calls = self.ctx, self.calls
        yield from calls.lock()
        entry = dict(info["pin"])
        why_not = None
        if plan["change"] == "cap":
            split = split_pool(info.get("config"), [(yield from calls.boot())])
            entry["max_total_tokens"], why_not = kv_pin.pool_cap(entry.get("tokens"), split)
        else:
            del entry["max_total_tokens"]
        yield from calls.trial("committed", entry.get("text") or value_text(entry["mem_fraction_static"]), entry)
        kept = "%s: %s keeps %s" % (ctx.label, ctx.unit, fraction_text(
            entry["mem_fraction_static"], (entry.get("settings") or {}).get("resolution"), entry.get("text")))
        if entry.get("max_total_tokens"):
            line = ("%s; its pin now caps the pool at %s tokens, the verified one, from the next start "
                    "(kv_tune_pin_tokens; no restart)." % (kept, token_count(entry["max_total_tokens"])))
        elif why_not:
            line = "%s; kv_tune_pin_tokens: its pin caps no pool: %s." % (kept, why_not)
        else:
            line = "%s; its pin no longer caps the pool, from the next start (kv_tune_pin_tokens is off; no restart)." \
                % kept
        yield say(line)
        return self.report("unchanged", plan["why"], line, dict(info, pin=entry))

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The records of one unit's search (tuner.py's Tuner keeps one): each trial's row, the progress lines, the result
(the controller's report) and the fact entry the pin writes."""
from __future__ import annotations

from typing import Any, Optional

from ansible_collections.llmserve.sglang.plugins.module_utils.capacity import kv_search
from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner.report_lines import fraction_text, token_count

# The trial records written into the host's fact (the report keeps every field).
FACT_TRIAL_KEYS = ("n", "f", "text", "outcome", "restart", "tokens", "min_free_gib")


class TrialLog(object):
    """What a search did, trial by trial, and what it reports."""

    def __init__(self, host: str, settings: dict[str, Any], reason: str, before: dict[str, Any],
                 fingerprint: Optional[dict[str, Any]], fingerprint_hash: Optional[str], start: float,
                 verify: Optional[float]) -> None:
        self.host, self.s, self.reason, self.before = host, settings, reason, before
        self.fingerprint, self.fingerprint_hash = fingerprint, fingerprint_hash
        self.start, self.verify = start, verify
        self.trials: list[dict[str, Any]] = []

    def text(self, value: float) -> str:
        return fraction_text(value, self.s["resolution"])

    def add(self, step: dict[str, Any], outcome: str, why: Optional[str], obs: dict[str, Any]) -> dict[str, Any]:
        """The record of the trial ``step`` ended by ``outcome`` (``why``), from its observation."""
        stress, boot, ready = obs.get("stress") or {}, obs.get("boot") or {}, obs.get("ready") or {}
        record = {
            "n": step["n"], "f": step["value"], "text": step["text"], "outcome": outcome, "restart": step["restart"],
            "tokens": boot.get("max_total_num_tokens"), "min_free_gib": stress.get("min_free_gib"),
            "min_free_gib_per_gpu": stress.get("min_free_gib_per_gpu") or {},
            "peak_tokens_held": stress.get("peak_tokens_held"), "fill_reached": stress.get("fill_reached"),
            "requests_completed": stress.get("requests_completed", 0),
            "throughput_tokens_per_s": stress.get("throughput_tokens_per_s"), "ready_s": ready.get("elapsed_s"),
            "invocation_id": ready.get("invocation_id"), "why": why, "next": None,
            # What the server said it runs, as written there (the command line's text, the log's value).
            "read_back": {"command_line": ((obs.get("running") or {}).get("server_args") or {}).get("mem_fraction_static"),
                          "startup_log": (boot.get("server_args") or {}).get("mem_fraction_static")},
        }
        self.trials.append(record)
        return record

    def progress_line(self, search: Optional[dict[str, Any]]) -> str:
        """One line for the trial just recorded; ``search`` is kv_search's state."""
        t = self.trials[-1]
        if t["outcome"] == "unverified":
            tail = "stopped"
        elif t["outcome"] == "untrusted":
            tail = "again " + self.text(t["next"])
        elif search is not None and search["done"]:
            tail = "done: " + search["reason"]
        else:
            tail = "next " + self.text(t["next"])
        return ("%s: trial %d/%d f=%s%s, %s KV tokens, min free under load %s: %s%s; %s"
                % (self.host, t["n"], self.s["budget"], t["text"],
                   " (restart)" if t["restart"] else " (running, no restart)", token_count(t["tokens"]),
                   "-" if t["min_free_gib"] is None else "%.2f GiB" % t["min_free_gib"], t["outcome"],
                   (" (%s)" % t["why"]) if t["outcome"] != "stable" and t["why"] else "", tail))

    def start_line(self) -> str:
        if self.verify is not None:
            margin = self.s["class_margin_steps"]
            return ("%s: verifying %s on %s (%s), its class's value%s, under the load; its own search if it does "
                    "not hold (at most %d trials)." % (
                        self.host, self.text(self.verify), self.s["unit"], self.reason,
                        " less %d grid step(s)" % margin if margin else "", self.s["budget"]))
        return ("%s: tuning %s (%s) from %s, cap %s, resolution %s, safety %s GiB, at most %d trials."
                % (self.host, self.s["unit"], self.reason, self.text(self.start), self.s["cap"], self.s["resolution"],
                   self.s["safety_gib"], self.s["budget"]))

    def after(self, best: Optional[float]) -> dict[str, Any]:
        """The value the host runs now and its KV tokens (the best trial's; the last-known-good's without one)."""
        if best is None:
            return dict(self.before)
        tokens = [t["tokens"] for t in self.trials if t["outcome"] == "stable" and kv_search.same_value(t["f"], best)]
        return {"mem_fraction_static": best, "tokens": tokens[0] if tokens else None, "text": self.text(best)}

    def result(self, status: str, started: str, finished: str, versions: Optional[dict[str, Any]],
               state: Optional[dict[str, Any]], best: Optional[float], error: Optional[str], restarts: int,
               verified: Optional[bool]) -> dict[str, Any]:
        """The report of this tune (the controller's <host>.json); ``state`` is kv_search's."""
        search = {} if state is None else {key: state[key] for key in (
            "reason", "best", "floor", "ceiling", "cap", "resolution", "safety_gib", "budget", "p_gib", "growth")}
        return {
            "host": self.host, "unit": self.s["unit"], "status": status, "why": self.reason, "error": error,
            "before": self.before, "after": self.after(best), "restarts": restarts, "search": search,
            "trials": self.trials, "settings": {key: self.s[key] for key in (
                "cap", "resolution", "safety_gib", "budget", "min_tokens", "stress_duration", "stress_fill_ratio")},
            "versions": versions, "fingerprint": self.fingerprint, "fingerprint_hash": self.fingerprint_hash,
            "started": started, "time": finished,
            "verify": None if self.verify is None else {"value": self.verify, "held": bool(verified)},
        }

    def fact_entry(self, finished: str, best: Optional[float], restarts: int) -> dict[str, Any]:
        """The unit's entry in /etc/ansible/facts.d/sglang_kv.fact: the pinned value and what proved it."""
        after = self.after(best)
        return {
            "mem_fraction_static": after["mem_fraction_static"], "text": after["text"],
            "tokens": after["tokens"], "before": self.before, "restarts": restarts,
            "trials": [{key: t[key] for key in FACT_TRIAL_KEYS} for t in self.trials],
            "fingerprint": self.fingerprint, "fingerprint_hash": self.fingerprint_hash,
            "versions": (self.fingerprint or {}).get("versions"),
            "settings": {key: self.s[key] for key in ("cap", "resolution", "safety_gib", "budget", "min_tokens")},
            "time": finished,
        }

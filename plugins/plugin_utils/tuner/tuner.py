# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The search of one SGLang unit, as a state machine that does no I/O (docs/DESIGN.md, "The tuner").

:class:`Tuner` answers each observation with the next step: trial (a restart on a value, or the running server
measured in place), commit (a new best becomes the host's last-known-good), revert (back to the last-known-good), pin
(the fact), done; and it keeps the records: each trial's row, the result and the fact entry. What a trial was is
trials.py's, where the search starts start_value.py's, its records trial_log.py's. plugin_utils/run/search.py drives
it.

Steps are dicts: ``{"do": "trial", "n": 2, "value": 0.91, "text": "0.910", "restart": True}``, ``{"do": "commit",
"value": .., "text": ..}``, ``{"do": "revert", "value": .., "text": .., "why": ..}``, ``{"do": "pin"}`` and ``{"do":
"done", "status": "tuned" | "no_stable_value" | "failed", "msg": ..}``. The commit-confirmed protocol around them
(a trial armed with a revert timer on the host, confirmed only by a commit) is the kv_trial module's.
"""
from __future__ import annotations

from typing import Any, Optional

from ansible_collections.llmserve.sglang.plugins.module_utils.capacity import kv_search
from ansible_collections.llmserve.sglang.plugins.module_utils.service.fingerprint import fingerprint_diff
from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner.report_lines import fraction_text
from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner.pool_model import effective_memory
from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner.run_settings import TuneError
from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner.trial_log import FACT_TRIAL_KEYS, TrialLog
from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner.trials import (
    above_the_class, classify_trial, growth, identity_error, not_memory_gib, oom_deficit_gib, readback_error)

__all__ = ["FACT_TRIAL_KEYS", "Tuner"]


class Tuner(object):
    """The search of one unit, from the decision to tune to the pin. Feed :meth:`advance` the observation of the
    step it returned last (see the module docstring for the steps and :meth:`advance` for the observations)."""

    def __init__(self, host: str, settings: dict[str, Any], reason: str, running_value: float | None,
                 boot: dict[str, Any] | None, fingerprint: dict[str, Any] | None, fingerprint_hash: str | None,
                 start: float, lower_bound: float | None = None, invocation_id: str | None = None,
                 verify: float | None = None) -> None:
        """``running_value``: the --mem-fraction-static the server runs now (its command line, else the startup
        log's), its last-known-good value; ``boot``: the startup facts of the running server (of the failed start,
        when the last-known-good value no longer starts); ``lower_bound``: the formula's lowest viable value (None:
        anything that starts), the caller's from the model and the boot; ``invocation_id``: the start of the running
        server (a measurement in place must be of that start); ``start``: the first value measured
        (start_value.first_value decides it); ``verify``: the value of the host's class (kv_tune_strategy
        per_class) less the margin, which ``start`` then is: when it holds the load with the margin it is pinned at
        once; when it does not, the search goes on from it as a search of its own."""
        self.host = host
        self.s = settings
        self.reason = reason
        self.fingerprint = fingerprint
        self.fingerprint_hash = fingerprint_hash
        self.boot = boot or {}
        self.lower_bound = lower_bound
        self.before: dict[str, Any] = {
            "mem_fraction_static": running_value, "tokens": self.boot.get("max_total_num_tokens"),
            "text": None if running_value is None else fraction_text(running_value, settings["resolution"])}
        self.log = TrialLog(host, settings, reason, self.before, fingerprint, fingerprint_hash, start, verify)
        self.lkg = running_value            # the value the host returns to: running at the start, then each commit
        self.invocation_id = invocation_id
        self.verify = verify
        self.start = start
        after_weights = self.boot.get("post_load_free_gib")
        if after_weights is not None and settings["safety_gib"] >= after_weights:
            raise TuneError("%s: kv_tune_safety_gib (%s GiB) is not below the memory left after the weights load (%.2f "
                            "GiB per GPU): no value of --mem-fraction-static can keep that much free. Nothing was "
                            "restarted." % (host, settings["safety_gib"], after_weights))
        self.verified: bool | None = None   # per_class: whether the class's value held (None: not tried)
        self.state: Any = None              # kv_search's, from the first boot that says P
        self.restarts = 0
        self.error: str | None = None
        self.step: Any = None

    # -- the written form ------------------------------------------------------------------------------------------

    def text(self, value: float | None) -> str:
        """The value as written everywhere: on the grid with its decimals, an operator's off-grid value as given."""
        return fraction_text(value, self.s["resolution"])

    # -- steps -----------------------------------------------------------------------------------------------------

    def first_step(self) -> dict[str, Any]:
        in_place = (kv_search.same_value(self.start, self.before["mem_fraction_static"] or 0)
                    and self.invocation_id is not None and all(effective_memory(self.boot)))
        return self._go({"do": "trial", "n": 1, "value": self.start, "text": self.text(self.start),
                         "restart": not in_place})

    def advance(self, observation: dict[str, Any]) -> dict[str, Any]:
        """The next step after the observation of the current one:

        - trial: ``{"started": kv_trial's result (None in place), "ready": sglang_ready's result, "stress":
          kv_stress's or None, "boot": sglang_startup_facts', "running": kv_fingerprint's or None}``;
        - commit and pin: ``{}``;
        - revert: ``{"ready": .., "running": ..}``."""
        done = self.step["do"]
        if done == "trial":
            return self._after_trial(observation)
        if done == "commit":
            return self._next_trial_or_end()
        if done == "revert":
            return self._after_revert(observation)
        if done == "pin":
            return self._done()
        raise TuneError("nothing to advance after %r" % (done,))

    def _go(self, step: dict[str, Any]) -> dict[str, Any]:
        self.step = step
        if step["do"] in ("trial", "revert") and step.get("restart", True):
            self.restarts += 1
        return step

    def _after_trial(self, obs: dict[str, Any]) -> dict[str, Any]:
        step, boot = self.step, obs.get("boot") or {}
        outcome, why = classify_trial(obs.get("ready") or {}, obs.get("stress"), boot, not_memory_gib(boot, self.boot, self.s["safety_gib"]))
        running = obs.get("running") or {}
        # Which start answered first (a revert by the host's timer explains a wrong value too), then the value.
        error = identity_error(step, obs, self.invocation_id) or readback_error(
            step["text"], running.get("mem_fraction_static"), (boot.get("server_args") or {}).get("mem_fraction_static"))
        if error is None and running and running.get("fingerprint_hash") not in (None, self.fingerprint_hash):
            error = ("the memory picture changed during the search (%s): start again once the host is settled"
                     % ", ".join(fingerprint_diff(self.fingerprint, running.get("fingerprint") or {})))
        if error is None and boot.get("untrusted"):
            # Another process allocated on the GPUs while this start loaded: its pool, its headroom and whatever
            # held or failed are not this value's. Start it again once; twice in a row, the GPUs are not ours.
            again = step.get("remeasure", 0) < 1
            record = self.log.add(step, "untrusted", "; ".join(boot["untrusted"]), obs)
            if again:
                record["next"] = step["value"]
                return self._go(dict(step, n=len(self.trials) + 1, restart=True, remeasure=step.get("remeasure", 0) + 1))
            record["outcome"] = "unverified"
            self.error = ("two starts at %s in a row gave startup logs whose memory numbers cannot be trusted (%s): "
                          "another process allocates GPU memory while SGLang loads; tune again when nothing else runs "
                          "on these GPUs" % (step["text"], boot["untrusted"][0]))
            return self._end()
        record = self.log.add(step, outcome, why, obs)
        if error is None and outcome == "stable" and record["min_free_gib"] is None:
            error = ("the load held but no GPU memory sample was taken (neither NVML nor nvidia-smi answered on the "
                     "host): without the free memory under load the search cannot judge a value")
        if error is not None:
            record["outcome"], record["why"] = "unverified", error
            self.error = error
            return self._end()
        if self.state is None:
            self._start_search(boot)
        p, a = effective_memory(boot)
        kv_search.record(self.state, {
            "f": step["value"], "outcome": outcome, "min_free_gib": record["min_free_gib"], "tokens": record["tokens"],
            "growth": growth(boot), "oom_deficit_gib": oom_deficit_gib(boot), "pre_load_free_gib": p,
            "post_load_free_gib": a})
        record["next"] = kv_search.next_trial(self.state)
        if self.verified is None and self.verify is not None:
            # The class's value held (or not) on this host: done, or a search of its own from here.
            self.verified = outcome == "stable" and kv_search.same_value(kv_search.best(self.state) or 0, step["value"])
            if self.verified and above_the_class(record["min_free_gib"], p, self.s):
                # More headroom than the class's margin explains (its canary's GPUs were not as free as these):
                # this member holds more than its class, so its own search goes on from here.
                record["why"] = "the class's value held with more to spare than its margin: searching on from it"
            elif self.verified:
                kv_search.stop(self.state, "the class's value held the load with the margin")
                record["next"] = None
        if outcome == "stable" and kv_search.same_value(kv_search.best(self.state) or 0, step["value"]):
            self.lkg = step["value"]
            return self._go({"do": "commit", "value": step["value"], "text": step["text"]})
        return self._next_trial_or_end()

    def _start_search(self, boot: dict[str, Any]) -> None:
        p = effective_memory(boot)[0] or effective_memory(self.boot)[0] or boot.get("pre_load_free_gib") \
            or self.boot.get("pre_load_free_gib")
        if not p:
            raise TuneError("%s: neither the trial's startup log nor the running server's gives the free GPU memory "
                            "before the weights load (P): the search cannot predict" % self.host)
        guess = self.before["mem_fraction_static"]
        self.state = kv_search.new_state(
            p, self.start, lo=self._lower_bound(), cap=self.s["cap"], resolution=self.s["resolution"],
            safety_gib=self.s["safety_gib"], budget=self.s["budget"],
            guess=guess if guess is not None and guess <= self.s["cap"] else None)

    def _lower_bound(self) -> float | None:
        # Kept a step below the cap: a formula minimum above the cap still leaves the cap to try.
        if self.lower_bound is None:
            return None
        return min(self.lower_bound, self.s["cap"] - self.s["resolution"])

    def _next_trial_or_end(self) -> dict[str, Any]:
        value = kv_search.next_trial(self.state)
        if value is None:
            return self._end()
        return self._go({"do": "trial", "n": len(self.trials) + 1, "value": value, "text": self.text(value),
                         "restart": True})

    def _end(self) -> dict[str, Any]:
        """After the last trial: back to the last-known-good value unless the server already runs it."""
        last = self.trials[-1]
        if self.error is None and last["outcome"] == "stable" and (
                kv_search.same_value(last["f"], self.lkg or 0) or not last["restart"]):
            # The server runs the last-known-good value already: the best, committed (with the fact) right after
            # its trial, or the running server measured in place.
            return self._done()
        why = (self.error and "the last trial was not verified") or (
            "the last trial was not the best" if self.best is not None else "no trial held the load with the margin")
        return self._go({"do": "revert", "value": self.lkg, "text": self.text(self.lkg) if self.lkg else None,
                         "why": why})

    def _after_revert(self, obs: dict[str, Any]) -> dict[str, Any]:
        ready, running = obs.get("ready") or {}, obs.get("running") or {}
        if not ready.get("ready"):
            self.error = ("%s did not come back on its last-known-good value %s (%s: %s): the unit is left as it is "
                          "for an operator to see" % (self.s["unit"], self.step["text"], ready.get("reason"),
                                                      ready.get("detail")))
            return self._done()
        if self.lkg is not None:
            mismatch = readback_error(self.step["text"], running.get("mem_fraction_static"), None)
            if mismatch:
                self.error = (self.error + "; " if self.error else "") + mismatch
                return self._done()
        if self.best is not None and self.error is None:
            # The fact records the trials after the last commit too.
            return self._go({"do": "pin", "value": self.best, "text": self.text(self.best)})
        return self._done()

    def _done(self) -> dict[str, Any]:
        fatal = [t for t in self.trials if t["outcome"] == "fatal"]
        if self.error is None and fatal:
            self.error = ("%s at %s is not about memory, so no value of --mem-fraction-static fixes it; %s serves %s"
                          % (fatal[-1]["why"], fatal[-1]["text"], self.s["unit"],
                             self.text(self.lkg) if self.lkg else "its base value"))
        if self.error is not None:
            status, msg = "failed", "%s: %s. Nothing was pinned by this trial." % (self.host, self.error)
        elif self.best is None:
            status = "no_stable_value"
            msg = ("%s: no value held the load with %s GiB to spare in %d trials; %s serves its last-known-good value "
                   "%s again. Trials: %s." % (self.host, self.s["safety_gib"], len(self.trials), self.s["unit"],
                                              self.text(self.lkg) if self.lkg else "(SGLang's default)",
                                              ", ".join("%s %s" % (t["text"], t["outcome"]) for t in self.trials)))
        else:
            status, msg = "tuned", None
        return self._go({"do": "done", "status": status, "msg": msg})

    # -- records (trial_log.TrialLog) --------------------------------------------------------------------------------

    @property
    def best(self) -> Optional[float]:
        return None if self.state is None else kv_search.best(self.state)

    @property
    def trials(self) -> list[dict[str, Any]]:
        return self.log.trials

    def progress_line(self) -> str:
        """One line for the trial just recorded."""
        return self.log.progress_line(self.state)

    def start_line(self) -> str:
        return self.log.start_line()

    def result(self, status: str, started: str, finished: str, versions: Optional[dict[str, Any]]) -> dict[str, Any]:
        """The report of this tune (the controller's <host>.json)."""
        return self.log.result(status, started, finished, versions, self.state, self.best, self.error, self.restarts,
                               self.verified)

    def fact_entry(self, finished: str) -> dict[str, Any]:
        """The unit's entry in /etc/ansible/facts.d/sglang_kv.fact: the pinned value and what proved it."""
        return self.log.fact_entry(finished, self.best, self.restarts)

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The search of one SGLang unit, as a state machine that does no I/O (docs/DESIGN.md, "The tuner").

:class:`Tuner` answers each observation with the next step: trial (a restart on a value, or the running server
measured in place), commit (a new best becomes the host's last-known-good), revert (back to the last-known-good), pin
(the fact), done; and it keeps the records: each trial's row, the result and the fact entry. What a trial was is
kv_tune_trial's, where the search starts kv_tune_start's, the lines kv_tune_lines'. kv_tune_run drives it.

Steps are dicts: ``{"do": "trial", "n": 2, "value": 0.91, "text": "0.910", "restart": True}``, ``{"do": "commit",
"value": .., "text": ..}``, ``{"do": "revert", "value": .., "text": .., "why": ..}``, ``{"do": "pin"}`` and ``{"do":
"done", "status": "tuned" | "no_stable_value" | "failed", "msg": ..}``. The commit-confirmed protocol around them
(a trial armed with a revert timer on the host, confirmed only by a commit) is the kv_trial module's.
"""
from __future__ import annotations

from ansible_collections.llmserve.sglang.plugins.module_utils.capacity import kv_search
from ansible_collections.llmserve.sglang.plugins.module_utils.service.fingerprint import fingerprint_diff
from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner.report_lines import token_count, fraction_text
from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner.pool_model import effective_memory
from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner.run_settings import TuneError
from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner.trials import (
    classify_trial, growth, oom_deficit_gib, readback_error, restarted_after_its_oom)

# The trial records written into the host's fact (the report keeps every field).
FACT_TRIAL_KEYS = ("n", "f", "text", "outcome", "restart", "tokens", "min_free_gib")


class Tuner(object):
    """The search of one unit, from the decision to tune to the pin. Feed :meth:`advance` the observation of the
    step it returned last (see the module docstring for the steps and :meth:`advance` for the observations)."""

    def __init__(self, host, settings, reason, running_value, boot, fingerprint, fingerprint_hash, start,
                 lower_bound=None, invocation_id=None, verify=None):
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
        self.before = {"mem_fraction_static": running_value, "tokens": self.boot.get("max_total_num_tokens"),
                       "text": None if running_value is None else fraction_text(running_value, settings["resolution"])}
        self.lkg = running_value            # the value the host returns to: running at the start, then each commit
        self.invocation_id = invocation_id
        self.verify = verify
        self.start = start
        after_weights = self.boot.get("post_load_free_gib")
        if after_weights is not None and settings["safety_gib"] >= after_weights:
            raise TuneError("%s: kv_tune_safety_gib (%s GiB) is not below the memory left after the weights load (%.2f "
                            "GiB per GPU): no value of --mem-fraction-static can keep that much free. Nothing was "
                            "restarted." % (host, settings["safety_gib"], after_weights))
        self.verified = None                # per_class: whether the class's value held (None: not tried)
        self.state = None                   # kv_search's, from the first boot that says P
        self.trials = []
        self.restarts = 0
        self.error = None
        self.step = None

    # -- the written form ------------------------------------------------------------------------------------------

    def text(self, value):
        """The value as written everywhere: on the grid with its decimals, an operator's off-grid value as given."""
        return fraction_text(value, self.s["resolution"])

    # -- steps -----------------------------------------------------------------------------------------------------

    def first_step(self):
        in_place = (kv_search.same_value(self.start, self.before["mem_fraction_static"] or 0)
                    and self.invocation_id is not None and all(effective_memory(self.boot)))
        return self._go({"do": "trial", "n": 1, "value": self.start, "text": self.text(self.start),
                         "restart": not in_place})

    def advance(self, observation):
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

    def _go(self, step):
        self.step = step
        if step["do"] in ("trial", "revert") and step.get("restart", True):
            self.restarts += 1
        return step

    def _not_memory_gib(self, boot):
        """Free GiB under load above which a crash is not a lack of memory: a tenth of the memory before the
        weights, at least four margins."""
        p = boot.get("pre_load_free_gib") or self.boot.get("pre_load_free_gib")
        return max(4 * self.s["safety_gib"], 0.1 * p) if p else None

    def _after_trial(self, obs):
        step, boot = self.step, obs.get("boot") or {}
        outcome, why = classify_trial(obs.get("ready") or {}, obs.get("stress"), boot, self._not_memory_gib(boot))
        running = obs.get("running") or {}
        # Which start answered first (a revert by the host's timer explains a wrong value too), then the value.
        error = self._identity_error(step, obs) or readback_error(
            step["text"], running.get("mem_fraction_static"), (boot.get("server_args") or {}).get("mem_fraction_static"))
        if error is None and running and running.get("fingerprint_hash") not in (None, self.fingerprint_hash):
            error = ("the memory picture changed during the search (%s): start again once the host is settled"
                     % ", ".join(fingerprint_diff(self.fingerprint, running.get("fingerprint") or {})))
        if error is None and boot.get("untrusted"):
            # Another process allocated on the GPUs while this start loaded: its pool, its headroom and whatever
            # held or failed are not this value's. Start it again once; twice in a row, the GPUs are not ours.
            again = step.get("remeasure", 0) < 1
            record = self._record(step, "untrusted", "; ".join(boot["untrusted"]), obs)
            if again:
                record["next"] = step["value"]
                return self._go(dict(step, n=len(self.trials) + 1, restart=True, remeasure=step.get("remeasure", 0) + 1))
            record["outcome"] = "unverified"
            self.error = ("two starts at %s in a row gave startup logs whose memory numbers cannot be trusted (%s): "
                          "another process allocates GPU memory while SGLang loads; tune again when nothing else runs "
                          "on these GPUs" % (step["text"], boot["untrusted"][0]))
            return self._end()
        record = self._record(step, outcome, why, obs)
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
            if self.verified and self._above_the_class(record["min_free_gib"], p):
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

    def _above_the_class(self, min_free_gib, p):
        """Whether the free memory under load at the verified value leaves room for a value above the class's own
        (the verified value plus the margin's steps): whole grid steps of P x resolution beyond the safety margin."""
        if min_free_gib is None or not p:
            return False
        spare_steps = int((min_free_gib - self.s["safety_gib"]) / (p * self.s["resolution"]) + kv_search.TOLERANCE)
        return spare_steps > self.s["class_margin_steps"]

    def _identity_error(self, step, obs):
        """Why the server that answered and held the load is not the start this trial made (a revert by the host's
        timer, a restart by anyone), or None."""
        wanted = ((obs.get("started") or {}).get("invocation_id") if step["restart"] else self.invocation_id)
        seen = [(where, (obs.get(key) or {}).get("invocation_id")) for where, key in (
            ("the server that answered is", "ready"), ("the unit now runs", "running"))]
        wrong = ["%s start %s" % (where, value) for where, value in seen if value is not None and value != wanted]
        if not wrong or wanted is None or restarted_after_its_oom(obs, wanted):
            return None
        return ("this trial started %s, but %s: the host reverted it, or something restarted it, so the measurements "
                "are not this value's" % (wanted, " and ".join(wrong)))

    def _start_search(self, boot):
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

    def _lower_bound(self):
        # Kept a step below the cap: a formula minimum above the cap still leaves the cap to try.
        if self.lower_bound is None:
            return None
        return min(self.lower_bound, self.s["cap"] - self.s["resolution"])

    def _next_trial_or_end(self):
        value = kv_search.next_trial(self.state)
        if value is None:
            return self._end()
        return self._go({"do": "trial", "n": len(self.trials) + 1, "value": value, "text": self.text(value),
                         "restart": True})

    def _end(self):
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

    def _after_revert(self, obs):
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

    def _done(self):
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

    # -- records ---------------------------------------------------------------------------------------------------

    @property
    def best(self):
        return None if self.state is None else kv_search.best(self.state)

    def _record(self, step, outcome, why, obs):
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

    def progress_line(self):
        """One line for the trial just recorded."""
        t = self.trials[-1]
        if t["outcome"] == "unverified":
            tail = "stopped"
        elif t["outcome"] == "untrusted":
            tail = "again " + self.text(t["next"])
        elif self.state["done"]:
            tail = "done: " + self.state["reason"]
        else:
            tail = "next " + self.text(t["next"])
        return ("%s: trial %d/%d f=%s%s, %s KV tokens, min free under load %s: %s%s; %s"
                % (self.host, t["n"], self.s["budget"], t["text"],
                   " (restart)" if t["restart"] else " (running, no restart)", token_count(t["tokens"]),
                   "-" if t["min_free_gib"] is None else "%.2f GiB" % t["min_free_gib"], t["outcome"],
                   (" (%s)" % t["why"]) if t["outcome"] != "stable" and t["why"] else "", tail))

    def start_line(self):
        if self.verify is not None:
            margin = self.s["class_margin_steps"]
            return ("%s: verifying %s on %s (%s), its class's value%s, under the load; its own search if it does "
                    "not hold (at most %d trials)." % (
                        self.host, self.text(self.verify), self.s["unit"], self.reason,
                        " less %d grid step(s)" % margin if margin else "", self.s["budget"]))
        return ("%s: tuning %s (%s) from %s, cap %s, resolution %s, safety %s GiB, at most %d trials."
                % (self.host, self.s["unit"], self.reason, self.text(self.start), self.s["cap"], self.s["resolution"],
                   self.s["safety_gib"], self.s["budget"]))

    def after(self):
        """The value the host runs now and its KV tokens (the best trial's; the last-known-good's without one)."""
        if self.best is None:
            return dict(self.before)
        tokens = [t["tokens"] for t in self.trials if t["outcome"] == "stable" and kv_search.same_value(t["f"], self.best)]
        return {"mem_fraction_static": self.best, "tokens": tokens[0] if tokens else None, "text": self.text(self.best)}

    def result(self, status, started, finished, versions):
        """The report of this tune (the controller's <host>.json)."""
        search = {} if self.state is None else {key: self.state[key] for key in (
            "reason", "best", "floor", "ceiling", "cap", "resolution", "safety_gib", "budget", "p_gib", "growth")}
        return {
            "host": self.host, "unit": self.s["unit"], "status": status, "why": self.reason, "error": self.error,
            "before": self.before, "after": self.after(), "restarts": self.restarts, "search": search,
            "trials": self.trials, "settings": {key: self.s[key] for key in (
                "cap", "resolution", "safety_gib", "budget", "min_tokens", "stress_duration", "stress_fill_ratio")},
            "versions": versions, "fingerprint": self.fingerprint, "fingerprint_hash": self.fingerprint_hash,
            "started": started, "time": finished,
            "verify": None if self.verify is None else {"value": self.verify, "held": bool(self.verified)},
        }

    def fact_entry(self, finished):
        """The unit's entry in /etc/ansible/facts.d/sglang_kv.fact: the pinned value and what proved it."""
        after = self.after()
        return {
            "mem_fraction_static": after["mem_fraction_static"], "text": after["text"],
            "tokens": after["tokens"], "before": self.before, "restarts": self.restarts,
            "trials": [{key: t[key] for key in FACT_TRIAL_KEYS} for t in self.trials],
            "fingerprint": self.fingerprint, "fingerprint_hash": self.fingerprint_hash,
            "versions": (self.fingerprint or {}).get("versions"),
            "settings": {key: self.s[key] for key in ("cap", "resolution", "safety_gib", "budget", "min_tokens")},
            "time": finished,
        }

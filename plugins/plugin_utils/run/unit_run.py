# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The tuner's run on one host, as steps (docs/DESIGN.md, "The tuner"): every decision before, during and after the
search of each unit, and no I/O. The kv_tune action plugin performs each step and sends back what it saw; the
generators here return the result. A step is a dict:

- ``{"call": module, "args": {..}, "may_fail": bool}``: one of the collection's modules on the host; the answer is
  its result. A failure that is not ``may_fail`` ends the run (the action raises :class:`RunFailed`'s kind).
- ``{"say": line}``: a progress line for the operator (a call may carry one too, said before it); no answer.
- ``{"nodes": "join" | "tell" | "answers" | "hello" | "next" | "answer", ..}``: the other nodes of a server that spans
  hosts, over the controller (plugin_utils/kv_nodes.py says what each kind does and answers).
- ``{"tune_unit": unit, "args", "label", "info", "neighbours", "tuned"}`` (:func:`host_steps` only): one unit's
  :class:`UnitRun`, which the action runs with the cleanup it owns (the lock, an armed trial); the answer is its
  result.

The search itself is :class:`tuner.Tuner`'s; a :class:`UnitRun` turns its steps into module calls.
"""
from __future__ import annotations

from ansible_collections.llmserve.sglang.plugins.module_utils import checks
from ansible_collections.llmserve.sglang.plugins.plugin_utils.fleet import multinode
from ansible_collections.llmserve.sglang.plugins.module_utils.service import kv_pin
from ansible_collections.llmserve.sglang.plugins.module_utils.capacity import kv_search
from ansible_collections.llmserve.sglang.plugins.module_utils.watch import kv_watch
from ansible_collections.llmserve.sglang.plugins.module_utils.startup.boot_trust import (
    look_findings, pool_findings, start_findings)
from ansible_collections.llmserve.sglang.plugins.module_utils.capacity.kv_search import value_text
from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner.tuner import Tuner
from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner.class_values import class_tokens, class_value, verify_value
from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner.report_lines import (
    fraction_text, report_markdown, result_line, token_count, watch_summary)
from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner.pool_model import (
    lower_bound, model_inputs, pool_residual_gib, split_pool)
from ansible_collections.llmserve.sglang.plugins.plugin_utils.run.node_steps import NodeSteps, RunFailed, call, say
from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner.run_settings import TuneError, check_settings, with_defaults
from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner.start_value import (
    failed_start, first_value, plan_start, safe_start, watch_lower_to)
from ansible_collections.llmserve.sglang.plugins.module_utils.service.host_units import (
    combine_units, neighbours, other_gib, outside_bytes, target_label, unit_gpus, unit_outcome, unlisted_at)

# Before the search each settling step changes one thing (restart a stale server, revert a pending trial, disarm
# timers) and asks again; more than these in a row is a unit that does not settle.
SETTLE_STEPS = 4
# kv_trial states that change no value on the other nodes of a server (the lock is each node's own).
_OWN_STATES = ("locked", "unlocked", "disarmed")
# kv_trial states that may still run once ansible-playbook is gone: they put the host back and let go.
CLEAN_UP_STATES = ("reverted", "unlocked")


def outlives_controller(name, args):
    """Whether module ``name`` with ``args`` may still be called once ansible-playbook is gone (killed; its worker
    lives on): only what puts the host back and lets go."""
    return name == "kv_trial" and (args or {}).get("state") in CLEAN_UP_STATES


def cut_short(name, args):
    """Whether a call of module ``name`` in progress is cut short (its processes stopped) when ansible-playbook is
    found gone meanwhile: a wait, a load or a watch lasts up to a trial's length (minutes), all of it on an
    unverified value that nobody will commit, so the worker reverts at once instead (issue 32). Never a kv_trial:
    a start, commit or revert cut in the middle on the controller goes on on the host, and could restart the
    server on the trial's value after the revert that follows; it is short, and the run ends after it."""
    return name != "kv_trial" and not outlives_controller(name, args)


def fingerprint_args(args, unit=None, also_units=()):
    """kv_fingerprint's arguments for ``unit``; the processes of ``also_units`` (its neighbours) are not counted as
    other processes' memory."""
    found = {"unit": unit or args["unit"], "model_revision": args["model_revision"], "require_running": False}
    if args.get("watch"):
        found["watch"] = args["watch"]
    if also_units:
        found["also_units"] = list(also_units)
    return found


def ready_call(args, unit, url, invocation_id=None, may_fail=False, gpus=None, also_units=()):
    """sglang_ready on ``unit`` (answering at ``url``) with the run's timeout and interval; with ``gpus``, watching
    what processes other than those of the unit and ``also_units`` hold on them while it starts."""
    ready_args = {"url": url, "unit": unit, "api_key": args["api_key"], "timeout": args["ready_timeout"],
                  "interval": args["ready_interval"], "invocation_id": invocation_id}
    if gpus:
        ready_args["gpus"] = gpus
        if also_units:
            ready_args["also_units"] = list(also_units)
    return call("sglang_ready", ready_args, may_fail=may_fail)


def host_steps(host, args, check_mode=False):
    """Every unit of the host in turn (kv_tune_units), each with its own lock, trials, pin and report; units that
    share GPUs (as each is configured, running or not) know each other, so that each is loaded with its neighbours
    and they serve together afterwards. A neighbour that is down is started on its last-known-good value before a
    unit's run, or that unit is not tuned: a search without it would take the memory it needs to start again."""
    args = with_defaults(args)
    # The host's reports and host_vars file are named after it (kv_tune role): refused before anything runs.
    checks.file_name("The inventory host name", host, TuneError)
    units = args["units"] or [args["unit"]]
    if len(units) == 1:
        return (yield {"tune_unit": units[0], "args": dict(args, unit=units[0]), "label": host, "info": None,
                       "neighbours": {}, "tuned": {}})
    for unit in units:
        check_settings(dict(args, unit=unit))
    infos = {}
    for unit in units:
        infos[unit] = yield call("kv_fingerprint", fingerprint_args(args, unit))
    sharing = neighbours({unit: held_gpus(info) for unit, info in infos.items()})
    tuned = {}
    for unit in units:
        label = target_label(host, unit)
        # A neighbour tuned or started before may have restarted this unit: ask it again.
        restarted = any(tuned.get(other, {}).get("changed") for other in sharing[unit])
        started, why_not = False, None
        for other in sharing[unit]:
            if not infos[other].get("running") and why_not is None:
                infos[other], why_not, tried = yield from _start_neighbour(args, label, unit, other, infos[other],
                                                                           check_mode)
                started = started or tried
        if why_not is not None:
            tuned[unit] = {"failed": True, "changed": started, "msg": why_not, "unit": unit, "label": label}
            continue
        restarted = restarted or started
        tuned[unit] = yield {"tune_unit": unit, "args": dict(args, unit=unit), "label": label,
                             "info": None if restarted else infos[unit],
                             "neighbours": {other: infos[other] for other in sharing[unit]}, "tuned": dict(tuned)}
        if sharing[unit] and tuned[unit].get("changed"):
            infos[unit] = yield call("kv_fingerprint", fingerprint_args(args, unit))  # what its neighbours must find
    return combine_units(host, tuned)


def _start_neighbour(args, label, unit, other, info, check_mode):
    """``other`` shares the GPUs of ``unit`` and does not run: it is started on its last-known-good value, so that
    every trial of ``unit`` meets its memory. (its kv_fingerprint now, None, whether it was restarted), or (info, why
    ``unit`` is not tuned, whether it was restarted)."""
    shared = "the same GPUs (%s)" % gpu_text(held_gpus(info)) if held_gpus(info) else "GPUs it cannot tell apart"
    lock = info.get("lock") or {}
    if lock.get("live") and lock.get("run_id") != args.get("run_id"):
        return info, ("%s, which is given %s, is not running and is held by run %s from %s (a tune or rollout.yml "
                      "of it): %s was not tuned, nothing was restarted" % (
                          other, shared, lock.get("run_id"), lock.get("controller"), unit)), False
    value = lkg_text(info)
    if check_mode:
        yield say("%s: %s, which is given %s, is not running: a run starts it on its last-known-good value %s "
                  "before the search; check mode restarts nothing" % (label, other, shared, value))
        return info, None, False
    yield say("%s: %s, which is given %s, is not running: starting it on its last-known-good value %s before the "
              "search" % (label, other, shared, value))
    restarted = yield call("kv_trial", {"unit": other, "state": "reverted"}, may_fail=True)
    ready = yield ready_call(args, other, info.get("url") or args["url"], restarted.get("invocation_id"),
                             may_fail=True)
    if restarted.get("failed") or not ready.get("ready"):
        why = restarted.get("msg") or "%s: %s" % (ready.get("reason"), ready.get("detail"))
        return info, ("%s, which is given %s, does not start on its last-known-good value %s (%s): %s was not tuned, "
                      "as a search without it would take the memory it needs" % (other, shared, value, why, unit)), True
    return (yield call("kv_fingerprint", fingerprint_args(args, other))), None, True


def held_gpus(info):
    """The GPUs a unit holds: those its configuration gives it, else those its processes use; None: unknown."""
    return info.get("configured_gpus") or unit_gpus(info.get("gpu_memory"))


def gpu_text(gpus):
    """``0-7``, ``0-3``, ``0, 2, 5``: a list of GPU indices for a line."""
    if gpus == list(range(gpus[0], gpus[-1] + 1)) and len(gpus) > 2:
        return "%d-%d" % (gpus[0], gpus[-1])
    return ", ".join(str(gpu) for gpu in gpus)


def lkg_text(info):
    """The last-known-good value of a unit that does not run: its pin, else what its unit file starts (unless a
    trial drop-in says otherwise), else its base unit file's."""
    value = (info.get("pin") or {}).get("mem_fraction_static")
    if value is None and not info.get("trial_pending"):
        value = info.get("mem_fraction_static")
    return "(its base unit file's)" if value is None else str(value)


class UnitRun(NodeSteps):
    """One unit's run: :meth:`steps` from the first look to the result, :meth:`finish` after it (the neighbours),
    :meth:`revert` and :meth:`unlock` for the action's cleanup, :meth:`failed` for the result of a run that raised.

    ``host`` is the inventory host, ``label`` names the unit in every line; ``args`` the action's arguments for this
    unit; ``info`` its kv_fingerprint result when the caller has it; ``neighbours`` unit -> kv_fingerprint of the
    host's other units that share its GPUs; ``tuned`` unit -> result of the host's units tuned before it;
    ``outcome_of(host)`` what another host's kv_tune registered (a class's canary), None when it has nothing;
    ``clock()`` the time as the reports write it; ``lock_held``: ``run_id`` is a caller's that holds the unit's lock
    already (rollout.yml), which this run renews but does not release."""

    def __init__(self, host, label, args, check_mode, run_id, controller, clock, info=None, neighbours=None,
                 tuned=None, outcome_of=None, lock_held=False):
        self.host, self.label, self.args = host, label, args
        self.check_mode, self.run_id, self.controller, self.clock = check_mode, run_id, controller, clock
        self.info = info
        self.neighbours = neighbours or {}
        self.tuned = tuned or {}
        self.outcome_of = outcome_of or (lambda _host: None)
        self.s = None           # check_settings' of args
        self.missed = None      # the value that missed under real traffic on this fingerprint (the headroom watch)
        self.nodes_lower_to = None  # node 0 of a server that spans hosts: the lowest value another node's watch asks
        self.url = args["url"]
        self.gpus = None        # the unit's (and its neighbours') GPUs; None: unknown, every GPU counts
        self.first_other = {}   # GPU -> bytes other processes held there at the search's first look
        self.first_unlisted = {}   # GPU -> bytes no process was listed for then (boot_trust.unlisted_bytes)
        self.checkpoint = None  # the model checkpoint's bytes (kv_fingerprint), None when unknown
        self.invocation_id = None   # the start of the server measured in place
        self.node = None        # this unit's part in a multi-node server (multinode.node_of)
        self.ranks = None       # node 0 once the others joined: their ranks
        self.boots = None       # node 0: the others' startup facts as they joined
        self.start_moved = []   # the other nodes: what moved on their GPUs while their server started
        self.pool_inputs = None     # what pool_model.pool_residual_gib needs of the unit (None: not judged)
        self.pool_reference = None  # that figure at the run's first trusted start
        self.locked = False     # this run holds the unit's lock (the action releases it whatever happens)
        self.lock_held = lock_held  # the caller (rollout.yml) holds the lock as run_id, and releases it itself
        self.changed = False
        self.sizing = "A - P x (1 - f)"   # how SGLang sizes the pool: its formula, or after CUDA-graph capture
        self.seen_boots = []    # the startup logs the run read: whether SGLang splits the pool (kv_tune_pin_tokens)
        self.class_tokens = None    # a member of a class: its canary's verified pool
        self.cap = None         # the pool cap the last commit pinned (kv_tune_pin_tokens)
        self.no_cap_said = False    # why a pin caps no pool, said once

    # -- module calls --------------------------------------------------------------------------------------------

    def _fingerprint(self, unit=None, also_units=()):
        return call("kv_fingerprint", fingerprint_args(self.args, unit, also_units))

    def _ready(self, invocation_id=None, unit=None, url=None, may_fail=False, gpus=None):
        # The neighbours' processes are theirs, not another process's: the joint load judges what they hold.
        return ready_call(self.args, unit or self.args["unit"], url or self.url, invocation_id, may_fail, gpus,
                          sorted(self.neighbours) if gpus else ())

    def _load(self):
        """kv_stress with every neighbour loaded at the same time; a module failure is a load that did not hold."""
        stress = yield call("kv_stress", {
            "url": self.url, "api_key": self.args["api_key"], "fill_ratio": self.args["stress_fill_ratio"],
            "duration": self.args["stress_duration"], "gpus": self.gpus,
            "also_urls": [found["url"] for found in self.neighbours.values() if found.get("url")],
            # what another process takes or gives back on the GPUs during the load moves the headroom measured
            "watch_units": [self.args["unit"]] + sorted(self.neighbours) if self.gpus else []}, may_fail=True)
        return {"held": False, "failure_reason": stress.get("msg")} if stress.get("failed") else stress

    def _boot(self, invocation_id=None):
        """The startup facts of the unit's last start, or of the start ``invocation_id`` (a trial's: read even when
        systemd started the unit again after it died); {} when its log says nothing (rotated out of the journal)."""
        args = {"unit": self.args["unit"]}
        if invocation_id:
            args["invocation_id"] = invocation_id
        if self.checkpoint:   # the weights the log reports are checked against the checkpoint's share
            args["checkpoint_bytes"] = self.checkpoint
        boot = yield call("sglang_startup_facts", args, may_fail=True)
        return {} if boot.get("failed") else boot

    def _trial(self, state, text=None, fact=None, may_fail=False):
        """kv_trial on the unit, as this run (it renews, takes or releases the run's lock). On node 0 of a
        multi-node server every other node does the same first: one value on every node, restarted together."""
        together = self.ranks is not None and state not in _OWN_STATES
        message = {"do": "kv_trial", "state": state, "text": text, "fact": fact}
        if together and state == "committed":
            # All nodes or none: every node stages the new pin first (a full disk or a read-only directory fails
            # here, while each node is still on its trial, which the failure reverts); then each one commits.
            yield from self._tell(dict(message, state="prepared"))
            yield from self._own_trial("prepared", text, fact)
        if together and state != "reverted":
            yield from self._tell(message)
        result = yield from self._own_trial(state, text, fact, may_fail)
        if together and state == "reverted":
            # This node is back on its last-known-good value before any word to the others, which may not come
            # (the controller killed, the link down): each of them reverts by itself then.
            yield from self._tell(message)
        return result

    def _own_trial(self, state, text=None, fact=None, may_fail=False):
        args = {"unit": self.args["unit"], "state": state, "run_id": self.run_id, "controller": self.controller,
                "lease": int(self.s["confirm_timeout"]) + 600}
        if text is not None:
            args["value"] = text
        if state == "started":
            args["confirm_timeout"] = int(self.s["confirm_timeout"])
        if fact is not None:
            args["fact"] = fact
        result = yield call("kv_trial", args, may_fail=may_fail)
        if not result.get("failed"):
            self.changed = self.changed or bool(result.get("changed"))
            self.locked = {"locked": True, "unlocked": False}.get(state, self.locked)
        return result

    def _lock(self):
        if not self.locked:
            yield from self._trial("locked")
            yield from self._neighbours_free()

    def _neighbours_free(self):
        """Once this run holds its unit: a neighbour that another run holds (a second controller on the host's other
        units, a rollout) would be restarted or loaded by that run while this one measures the shared GPUs. Each run
        takes its own lock first and then looks, so of two that start together at least one stops."""
        for unit in sorted(self.neighbours):
            found = yield self._fingerprint(unit)
            lock = found.get("lock") or {}
            if lock.get("live") and lock.get("run_id") != self.run_id:
                raise RunFailed("%s shares its GPUs with %s, which run %s from %s holds (a tune or rollout.yml of "
                                "it): two runs would restart and load the same GPUs; %s was not tuned, nothing was "
                                "restarted" % (self.args["unit"], unit, lock.get("run_id"), lock.get("controller"),
                                               self.args["unit"]))
            self.neighbours[unit] = found

    # -- for the action's cleanup --------------------------------------------------------------------------------

    def revert(self):
        """Back to the last-known-good value now (the trial in progress, on every node)."""
        return (yield from self._trial("reverted"))

    def unlock(self):
        if self.lock_held:
            return None     # the caller's: it is still upgrading the host, and lets go when it is done
        return (yield from self._trial("unlocked"))

    def leads(self):
        """Whether the other nodes of a server wait for this run's word when it ends (node 0, not in check mode)."""
        return self.node is not None and self.node["node_rank"] == 0 and not self.check_mode

    def release_message(self, result):
        """What node 0 tells the other nodes when its run ends, whatever happened."""
        return {"do": "done", "leader": self.host, "status": "failed" if result.get("failed") else result.get("status"),
                "value": ((result.get("result") or {}).get("after") or {}).get("mem_fraction_static"),
                "line": result.get("line") or result.get("msg")}

    def failed(self, msg, reverted):
        return {"failed": True, "changed": self.changed or reverted,
                "msg": msg + (" (the trial in progress was reverted)" if reverted else "")}

    # -- the run -------------------------------------------------------------------------------------------------

    def steps(self):
        self.s = settings = check_settings(self.args)
        info = self.info or (yield self._fingerprint())
        self.checkpoint = info.get("checkpoint_bytes")
        # Several servers on one host answer on their own ports, on their own GPUs; the neighbours' GPUs count too:
        # their memory is what the pair has left.
        self.url = info.get("url") or self.url
        self.gpus = held_gpus(info)
        if self.gpus is not None:
            for found in self.neighbours.values():
                self.gpus = sorted(set(self.gpus) | set(held_gpus(found) or []))
        self.node = multinode.node_of(info.get("server_args"))
        others = None
        if self.node is not None and not self.check_mode:
            if self.node["node_rank"] > 0:
                return (yield from self._follow(info))
            others = yield from self._lead(info)
        if self.args["reset"]:
            return (yield from self._reset(info))
        plan, safe = None, None
        for _attempt in range(SETTLE_STEPS):
            plan = plan_start(info, self.label, settings["unit"], settings["force"], self.check_mode, self.run_id,
                              others, settings["pin_tokens"])
            if plan["do"] not in ("restart", "revert", "disarm"):
                break
            if plan["do"] != "disarm" and info.get("fingerprint"):
                # A model the formula cannot read would fail the tune after this restart: fail before it.
                model_inputs(info["config"], info["fingerprint"]["server_args"], info["sglang_version"],
                             info.get("sizing_environment"))
            yield from self._lock()
            yield say("%s: %s" % (self.label, plan["why"]))
            if plan["do"] == "disarm":
                yield from self._trial("disarmed")
            else:
                reverted = yield from self._trial("reverted")
                ready = yield self._ready(reverted.get("invocation_id"))
                if not ready["ready"]:
                    # By the start the revert made: systemd may have begun another since, with nothing in its log.
                    safe = yield from self._after_a_failed_start(info, ready, reverted.get("invocation_id"))
                    break
            info = yield self._fingerprint()
        if safe is None:
            if plan["do"] == "refuse":
                raise RunFailed(plan["msg"])
            if plan["do"] == "report":
                yield say(plan["line"])
                return self._report(plan["status"], plan["why"], plan["line"], info)
            if plan["do"] == "repin":
                return (yield from self._repin(info, plan))
            if plan["do"] != "tune":
                raise RunFailed("%s did not settle before the search (%s)" % (settings["unit"], plan.get("why")))
        # A near miss is verified lower only where it is why the server is tuned (its own watch's, or another
        # node's: node 0 tunes for the other nodes' reasons when its own pin holds).
        watch = info.get("watch") or {}
        own = watch_lower_to(plan["why"], watch)
        theirs = self.nodes_lower_to if plan["why"] and plan["why"] in (watch.get("retune"), others) else None
        asked = [value for value in (own, theirs) if value is not None]
        lower_to = min(asked) if asked else None
        self.missed = kv_watch.missed_value(info.get("pin"), info.get("fingerprint_hash"))
        if safe is None and lower_to is not None and info.get("pin"):
            # A near miss under real traffic: the pin less the memory it missed, verified under the load; the
            # synthetic load held the pin, so the search must not climb back to it.
            lower_to = kv_search.grid_down(lower_to + kv_search.TOLERANCE, settings["resolution"])
            self.s = settings = dict(settings, start=lower_to, cap=lower_to)
            self.missed = min(info["pin"]["mem_fraction_static"], self.missed or 1.0)
        elif self.missed is not None:
            # A value missed under real traffic on this fingerprint: no search (headroom's included) goes back to it.
            below = kv_search.grid_down(self.missed - settings["resolution"] + kv_search.TOLERANCE,
                                        settings["resolution"])
            if below < settings["cap"] - kv_search.TOLERANCE:
                yield say("%s: %s missed under real traffic on this fingerprint (the headroom watch): the search "
                          "stays at or below %s" % (self.label, fraction_text(self.missed), value_text(
                              below, settings["resolution"])))
                self.s = settings = dict(settings, cap=below, start=None if settings["start"] is None
                                         else min(settings["start"], below))
        self.url = info["url"] or self.url
        # The formula must know the model (attention, dtype) before anything restarts: an unknown one fails here.
        model = model_inputs(info["config"], info["fingerprint"]["server_args"], info["sglang_version"],
                             info.get("sizing_environment"))
        if model and not model["post_capture_sizing"]:
            self.pool_inputs = (info["config"], info["fingerprint"]["server_args"], info["sglang_version"],
                                info.get("sizing_environment"))
        if model and model["post_capture_sizing"]:
            self.sizing = "after CUDA-graph capture"
            yield say("%s: SGLang %s sizes the KV pool of %s after CUDA-graph capture (SGLANG_ENABLE_POST_CAPTURE_KV_"
                      "SIZING), from what is free then: no formula predicts it, every value is measured"
                      % (self.label, info.get("sglang_version") or "(newest)", settings["unit"]))
        if safe is None and plan["dry_run"]:
            yield say(plan["line"])
            return dict(self._report("would_tune", plan["why"], plan["line"], info), changed=False)
        yield from self._lock()
        self.first_other = outside_bytes(info.get("gpu_memory"), [found.get("gpu_memory")
                                                                  for found in self.neighbours.values()])
        self.first_unlisted = unlisted_at(info.get("gpu_memory"))
        tuner = yield from self._tuner(info, model, safe, plan)
        return (yield from self._search(tuner, info))

    def _report(self, status, why, line, info):
        return {"changed": self.changed, "status": status, "why": why, "line": line, "pin": info["pin"],
                "fingerprint_hash": info.get("fingerprint_hash"), "other_gib": other_gib(info.get("gpu_memory")),
                "watch": watch_summary(info.get("watch"))}

    def _repin(self, info, plan):
        """kv_tune_pin_tokens changed on a unit whose pin holds: the pin's cap on the pool written or removed, without
        a restart (the server runs the value; the cap applies from its next start, and only ever shrinks a pool)."""
        yield from self._lock()
        entry = dict(info["pin"])
        why_not = None
        if plan["change"] == "cap":
            split = split_pool(info.get("config"), [(yield from self._boot())])
            entry["max_total_tokens"], why_not = kv_pin.pool_cap(entry.get("tokens"), split)
        else:
            del entry["max_total_tokens"]
        yield from self._trial("committed", entry.get("text") or value_text(entry["mem_fraction_static"]), entry)
        kept = "%s: %s keeps %s" % (self.label, self.args["unit"], fraction_text(
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
        return self._report("unchanged", plan["why"], line, dict(info, pin=entry))

    def _pin_entry(self, entry, info):
        """A commit's fact entry, with the value that missed under real traffic on this fingerprint (``missed``, for
        the searches after it); with kv_tune_pin_tokens, with the cap on the pool that the pin then writes
        (kv_pin.pool_cap: the verified pool, None for a hybrid model), said once when there is none."""
        if self.missed is not None:
            entry = dict(entry, missed=self.missed)
        if kv_watch.same_pin(info.get("pin"), entry):
            # A re-pin that changes nothing keeps the pin's time: the headroom watch's evidence since it still counts.
            entry = dict(entry, time=info["pin"]["time"])
        if not self.s["pin_tokens"]:
            return entry
        cap, why_not = kv_pin.pool_cap(entry.get("tokens"), split_pool(info.get("config"), self.seen_boots),
                                       self.class_tokens)
        if why_not is not None and not self.no_cap_said:
            self.no_cap_said = True
            yield say("%s: kv_tune_pin_tokens: the pin caps no pool: %s" % (self.label, why_not))
        self.cap = cap
        return dict(entry, max_total_tokens=cap)

    def _tuner(self, info, model, safe, plan):
        """The search's starting point: the running server's boot (or the failed start's), the value it runs, and
        where to start (start_value.first_value)."""
        settings = self.s
        if safe is None:
            ready = yield self._ready(info["invocation_id"])
            if not ready["ready"]:
                if ready["reason"] not in ("unit_failed", "unit_restarted") or self.ranks is not None:
                    raise RunFailed("%s must serve its last-known-good value before it is tuned (%s: %s); nothing "
                                    "was restarted" % (settings["unit"], ready["reason"], ready["detail"]))
                # The start the probe found running failed before it served (a value that cannot start, which
                # systemd restarts in a loop): that start's own log says why, as after a restart of its own.
                safe = yield from self._after_a_failed_start(info, ready, info["invocation_id"])
        if safe is not None:
            boot, why, self.invocation_id = safe["boot"], safe["why"], None
        else:
            boot, why, self.invocation_id = (yield from self._boot()), plan["why"], info["invocation_id"]
            if self.ranks is not None:   # the server's P and A: the least of any node's, as it joined
                boot = multinode.server_boot(boot, self.boots)
        self._judge_pool(boot)   # the running start, measured before any restart, is the pool's reference
        self.seen_boots.append(boot)
        running_value = info["mem_fraction_static"]
        if running_value is None:
            running_value = (boot.get("server_args") or {}).get("mem_fraction_static")
        verify = None if safe is not None else (yield from self._class_value())
        safe_value = None if safe is None else safe_start(safe["boot"], info["fingerprint"], model, settings)
        lowest = lower_bound(boot, model, settings["min_tokens"])
        start, source = first_value(self.label, settings, running_value, verify, safe_value,
                                    default=lambda: safe_start(boot, info["fingerprint"], model, settings),
                                    lowest=lowest)
        if settings["start"] is not None and source not in ("kv_tune_start", "class"):
            yield say("%s: kv_tune_start %s lies below the lowest value that gives %s a pool here (%s, by SGLang's "
                      "formula from the running server's free memory): not tried; starting from %s"
                      % (self.label, value_text(settings["start"], settings["resolution"]), settings["unit"],
                         # the running value may lie off the grid (SGLang's own default): a measurement, not a trial
                         "%.3f" % lowest, fraction_text(start, settings["resolution"])))
        if source == "sglang_default":
            yield say("%s: %s runs SGLang's default --mem-fraction-static, which neither its command line nor its "
                      "startup log states: starting from %s, inferred for these GPUs and SGLang %s"
                      % (self.label, settings["unit"], value_text(start, settings["resolution"]),
                         info.get("sglang_version") or "(newest)"))
        return Tuner(self.label, settings, why, running_value, boot, info["fingerprint"], info["fingerprint_hash"],
                     start, lower_bound=lowest,
                     invocation_id=self.invocation_id, verify=verify)

    def _class_value(self):
        """per_class: the value this member verifies (its class's less the margin), None for a search of its own."""
        entry = (self.args.get("class_plan") or {}).get(self.s["unit"])
        if self.s["strategy"] != "per_class" or not entry or self.node is not None:
            return None
        canary = entry.get("canary_host")
        outcome = None
        if canary == self.host:   # another unit of this host, tuned earlier in this task
            outcome = self.tuned.get(entry["canary_unit"])
        elif canary:
            found = self.outcome_of(canary)
            outcome = unit_outcome(found, entry["canary_unit"]) if found is not None else None
        value = class_value(entry, outcome)
        self.class_tokens = class_tokens(entry, outcome)
        if value is None:
            if entry.get("role") == "member":
                yield say("%s: the canary %s of its class found no value: a search of its own"
                          % (self.label, entry.get("canary")))
            return None
        return verify_value(value, self.s)

    def _after_a_failed_start(self, info, ready, invocation_id=None):
        """The last-known-good value did not come back (its last start, or the start ``invocation_id``): tune from a
        safe start when it ran out of memory, else stop loudly with the unit left as it is."""
        boot = yield from self._boot(invocation_id)
        lkg = (boot.get("server_args") or {}).get("mem_fraction_static", info.get("mem_fraction_static"))
        lkg_text = "?" if lkg is None else str(lkg)
        message = failed_start(boot, self.s["unit"], lkg_text)
        if message is not None:
            raise RunFailed("%s (%s: %s)" % (message, ready["reason"], ready["detail"]))
        if info.get("fingerprint") is None:
            raise RunFailed("%s does not start on its last-known-good value %s, and its unit file cannot be read "
                            "well enough to fingerprint it" % (self.s["unit"], lkg_text))
        failure = boot.get("failure") or {}
        why = ("the last-known-good value %s no longer starts (%s: %s): tuning from a safe start"
               % (lkg_text, failure.get("kind"), failure.get("line")))
        yield say("%s: %s" % (self.label, why))
        return {"boot": boot, "why": why}

    def _reset(self, info):
        """kv_tune_reset: forget the pin; the unit runs the value of its base unit file again."""
        unit = self.args["unit"]
        if self.check_mode:
            line = "%s: %s would lose its pin (%s); check mode restarts nothing." % (
                self.label, unit, "none" if info["pin"] is None else info["pin"].get("mem_fraction_static"))
            yield say(line)
            return dict(self._report("would_reset", "kv_tune_reset", line, info), changed=info["pin"] is not None)
        yield from self._lock()
        ready = yield self._ready((yield from self._trial("reset")).get("invocation_id"))
        after = yield self._fingerprint()
        line = "%s: %s lost its pin and runs %s (its base value)%s" % (
            self.label, unit, after.get("mem_fraction_static") or "SGLang's default",
            "" if ready["ready"] else "; IT DOES NOT SERVE: %s: %s" % (ready["reason"], ready["detail"]))
        yield say(line)
        if not ready["ready"]:
            raise RunFailed(line)
        return {"changed": True, "status": "reset", "why": "kv_tune_reset", "line": line, "pin": None}

    # -- the search ----------------------------------------------------------------------------------------------

    def _search(self, tuner, info):
        started = self.clock()
        yield say(tuner.start_line())
        step = tuner.first_step()
        while step["do"] != "done":
            if step["do"] == "trial":
                observation = yield from self._observe_trial(step)
            elif step["do"] == "revert":
                yield say("%s: %s: back to the last-known-good value %s"
                          % (self.label, step["why"], step["text"] or "(SGLang's default)"))
                reverted = yield from self._trial("reverted")
                observation = {"ready": (yield self._ready(reverted.get("invocation_id"))),
                               "running": (yield self._fingerprint())}
            else:  # commit a new best, or pin: the fact records every trial
                entry = yield from self._pin_entry(tuner.fact_entry(self.clock()), info)
                observation = yield from self._trial("committed", step["text"], entry)
            was_trial = step["do"] == "trial"
            step = tuner.advance(observation)
            if was_trial:
                yield say(tuner.progress_line())
        result = tuner.result(step["status"], started, self.clock(), (info["fingerprint"] or {}).get("versions"))
        result["kv_sizing"] = self.sizing
        if self.cap is not None and step["status"] == "tuned":
            result["after"]["max_total_tokens"] = self.cap
        line = result_line(result)
        yield say(line)
        out = {"changed": True, "status": step["status"], "why": tuner.reason, "line": line, "pin": info["pin"],
               "result": result, "report": report_markdown(result), "watch": watch_summary(info.get("watch"))}
        if step["msg"]:
            out["msg"] = step["msg"]
        return out

    def _observe_trial(self, step):
        started = (yield from self._trial("started", step["text"])) if step["restart"] else None
        # A start is watched: memory another process takes or gives back on its GPUs while SGLang measures them
        # changes the pool, and the log need not show it.
        watched = (self.gpus or sorted(self.first_other)) if started else None
        if started and self.ranks is not None:
            # The other nodes watch their own GPUs the same way, until this node's next step.
            yield from self._tell({"do": "watch_start"}, wait=False)
        trial_start = (started or {}).get("invocation_id") or self.invocation_id
        ready = yield self._ready(trial_start, gpus=watched)
        observed = None
        if self.ranks is not None:
            # The other nodes watch their GPUs while this node drives the load (every rank holds its activations).
            observed = yield from self._tell({"do": "observe", "watch": self.args["stress_duration"] + 5
                                              if ready["ready"] else 0}, wait=False)
        stress = (yield from self._load()) if ready["ready"] else None
        # The last look at the GPUs before the trial is judged (and committed): the neighbours' memory is theirs.
        running = yield self._fingerprint(also_units=sorted(self.neighbours))
        boot = yield from self._boot(trial_start)
        moved = start_findings(ready.get("other_memory_seen"), self.first_other,
                               unlisted_before=self.first_unlisted) if started else []
        moved += start_findings((stress or {}).get("other_memory_seen"), self.first_other, "during the load",
                                self.first_unlisted)
        if running["running"] and stress is not None:
            moved += look_findings(running.get("gpu_memory"), self.gpus, self.first_other, self.first_unlisted)
        if moved:
            boot = dict(boot, untrusted=list(boot.get("untrusted") or []) + moved)
        if self.ranks is not None:
            seen = {ack["host"]: ack for ack in (yield from self._answers(observed))}
            stress = multinode.merge_samples(stress, seen) if stress is not None else None
            boot = multinode.server_boot(boot, {host: ack.get("boot") for host, ack in seen.items()})
        boot = self._judge_pool(boot)
        self.seen_boots.append(boot)
        return {"started": started, "ready": ready, "stress": stress, "boot": boot,
                "running": running if running["running"] else None}

    def _judge_pool(self, boot):
        """The boot, untrusted when its pool is off the formula at its own P, A and f by other than the run's first
        trusted start's (the running server's when its log has one: what the formula leaves out of this
        configuration)."""
        residual = pool_residual_gib(*self.pool_inputs, boot) if self.pool_inputs else None
        if residual is None:
            return boot
        if self.pool_reference is None:
            if not boot.get("untrusted"):
                self.pool_reference = residual
            return boot
        moved = pool_findings(residual, self.pool_reference)
        return dict(boot, untrusted=list(boot.get("untrusted") or []) + moved) if moved else boot

    # -- after the search ----------------------------------------------------------------------------------------

    def finish(self, result):
        """Every server that shares the unit's GPUs serves again (a neighbour lost fails the unit), and the result
        names the unit."""
        lost = []
        if self.neighbours and (self.changed or "result" in result):
            lost = yield from self._neighbours_serving()
        if lost:
            said = result.get("msg") or result.get("line")
            result = dict(result, failed=True, changed=True, msg="; ".join(([said] if said else []) + lost))
        result["unit"] = self.args["unit"]
        result["label"] = self.label
        if self.node is not None:
            result["node"] = self.node
        return result

    def _neighbours_serving(self):
        """A neighbour that a trial ran out of memory (systemd restarts it, perhaps while the trial still held its
        memory) is restarted on its own last-known-good value and must answer; what still does not is named. The
        pair, restarted, must hold the joint load once more."""
        lost, restarts = [], []
        for unit, before in sorted(self.neighbours.items()):
            now = yield self._fingerprint(unit)
            if now["running"] and now.get("invocation_id") == before.get("invocation_id"):
                continue
            yield say("%s: %s, which shares its GPUs, stopped or restarted during the search: restarting it on its "
                      "last-known-good value" % (self.label, unit))
            self.changed = True
            restarted = yield call("kv_trial", {"unit": unit, "state": "reverted"}, may_fail=True)
            ready = yield self._ready(restarted.get("invocation_id"), unit, now.get("url") or before.get("url"),
                                      may_fail=True)
            if restarted.get("failed") or not ready.get("ready"):
                lost.append("%s, which shares the GPUs of %s, DOES NOT SERVE: %s" % (
                    unit, self.args["unit"], restarted.get("msg") or "%s: %s" % (ready.get("reason"), ready.get("detail"))))
            else:
                restarts.append(unit)
        if restarts and not lost:
            stress = yield from self._load()
            if not stress.get("held") or (stress.get("min_free_gib") or 0) < self.args["safety_gib"]:
                lost.append("%s and %s, restarted on their last-known-good values, do not hold the load together "
                            "with %s GiB to spare (%s): run tune_kv.yml again" % (
                                self.args["unit"], ", ".join(restarts), self.args["safety_gib"],
                                stress.get("failure_reason") or "%s GiB free" % stress.get("min_free_gib")))
        return lost

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The KV tuner's loop for one unit, on the controller (documentation: plugins/modules/kv_tune.py).

This file only performs: it runs the collection's modules on the host and prints progress. Every decision is
module_utils/kv_tune.py's (plan_start before the search, Tuner during it), which answers each observation with the
next step; the code below executes it.
"""
from __future__ import annotations

import datetime
import os
import socket
import uuid

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.llmserve.sglang.plugins.module_utils import kv_multinode, kv_search, kv_tune
from ansible_collections.llmserve.sglang.plugins.module_utils.checks import InvalidInput
from ansible_collections.llmserve.sglang.plugins.plugin_utils.node_channel import ChannelTimeout, NodeChannel
from ansible_collections.llmserve.sglang.plugins.plugin_utils.plain import plain

display = Display()

_COLLECTION = "llmserve.sglang."
ARGUMENT_SPEC = dict(
    unit=dict(type="str", default="sglang.service"),
    units=dict(type="list", elements="str"),
    start=dict(type="float"),
    cap=dict(type="float", default=0.98),
    resolution=dict(type="float", default=0.005),
    safety_gib=dict(type="float", default=1.0),
    budget=dict(type="int", default=6),
    min_tokens=dict(type="int"),
    force=dict(type="bool", default=False),
    reset=dict(type="bool", default=False),
    model_revision=dict(type="str"),
    url=dict(type="str", default="http://127.0.0.1:30000"),
    api_key=dict(type="str", no_log=True),
    ready_timeout=dict(type="float", default=1800),
    ready_interval=dict(type="float", default=5),
    stress_fill_ratio=dict(type="float", default=0.95),
    stress_duration=dict(type="float", default=120),
    confirm_timeout=dict(type="int"),
    strategy=dict(type="str", default="per_host", choices=list(kv_tune.STRATEGIES)),
    class_margin_steps=dict(type="int", default=1),
    class_plan=dict(type="dict"),
)
# States of kv_trial that may still run once ansible-playbook is gone: they put the host back and let go.
_CLEAN_UP = ("reverted", "unlocked")


class ModuleFailed(Exception):
    """A module failed on the host; the message is its own."""


class ControllerGone(Exception):
    """ansible-playbook died under this worker (killed): the search must not go on by itself."""


def _now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = True

    def run(self, tmp=None, task_vars=None):
        super(ActionModule, self).run(tmp, task_vars)
        self._vars = task_vars or {}
        _validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        if args["confirm_timeout"] is None:
            args["confirm_timeout"] = int(args["ready_timeout"] + 2 * args["stress_duration"] + 600)
        host = task_vars.get("inventory_hostname", "?")
        # Ansible's workers run in their own session: one whose ansible-playbook was killed lives on, and a search
        # that outlived its controller would go on restarting servers that nobody watches.
        self._controller = os.getppid()
        units = args["units"] or [args["unit"]]
        self.tuned = {}    # unit -> its result, for the units of this host tuned before (a class's canary)
        try:
            if len(units) == 1:
                return self._tune_unit(dict(args, unit=units[0]), host, host)
            # Several servers on one host: one after the other, each with its own lock, trials, pin and report.
            infos = {}
            for unit in units:
                kv_tune.check_settings(dict(args, unit=unit))
            for unit in units:
                self.args = dict(args, unit=unit)
                infos[unit] = self._fingerprint()
            sharing = kv_tune.neighbours({unit: kv_tune.unit_gpus(info.get("gpu_memory"))
                                          for unit, info in infos.items()})
            for unit in units:
                # A neighbour tuned before may have restarted this unit: ask it again.
                info = infos[unit] if not any(self.tuned.get(other, {}).get("changed") for other in sharing[unit]) \
                    else None
                self.tuned[unit] = self._tune_unit(dict(args, unit=unit), host, kv_tune.target_label(host, unit),
                                                   info, {other: infos[other] for other in sharing[unit]})
                if sharing[unit] and self.tuned[unit].get("changed"):
                    infos[unit] = self._fingerprint()    # what its neighbours' searches must find serving
            return kv_tune.combine_units(host, self.tuned)
        except (InvalidInput, ModuleFailed, ControllerGone) as exc:
            return {"failed": True, "changed": False, "msg": str(exc)}
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)

    def _tune_unit(self, args, host, label, info=None, neighbours=None):
        """One unit: its search (or nothing), with the unit's own state; ``label`` names it in every line.
        ``neighbours``: unit -> kv_fingerprint's result of the other units of the host that share its GPUs (their
        servers are loaded with it in every trial, and serve again afterwards)."""
        self.args = args
        self.neighbours = neighbours or {}
        self.inventory_host = host
        self.host = label
        self.url = args["url"]
        self.gpus = None       # the unit's GPUs, where its processes run (None: unknown, every GPU counts)
        self.checkpoint = None  # the model checkpoint's bytes (kv_fingerprint), None when unknown
        self.run_id = uuid.uuid4().hex[:8]
        self.locked = False    # this run holds the unit's lock on the host
        self.armed = False     # a trial started on the host and neither committed nor reverted
        self.changed = False
        self.invocation_id = None   # the start of the server measured in place
        self.node = None       # this unit's part in a multi-node server (kv_multinode.node_of)
        self.nodes = None      # node 0 of a multi-node server: its followers' {"channel", "n" (next step), "ranks", "boots"}
        try:
            result = self._run(info)
        except Exception as exc:
            reverted = self._revert_if_armed()
            if not isinstance(exc, (InvalidInput, ModuleFailed, ControllerGone, ChannelTimeout)):
                self._release_followers({"failed": True, "msg": str(exc)})
                raise
            result = {"failed": True, "changed": self.changed or reverted, "msg": str(exc) + (
                " (the trial in progress was reverted)" if reverted else "")}
        finally:
            self._unlock()
        self._release_followers(result)
        lost = self._neighbours_serving() if self.neighbours and (self.changed or "result" in result) else []
        if lost:
            said = result.get("msg") or result.get("line")
            result = dict(result, failed=True, changed=True, msg="; ".join(([said] if said else []) + lost))
        result["unit"] = args["unit"]
        result["label"] = label
        if self.node is not None:
            result["node"] = self.node
        return result

    # -- the host --------------------------------------------------------------------------------------------------

    def _module(self, name, module_args, may_fail=False):
        if os.getppid() != self._controller and not (name == "kv_trial" and module_args["state"] in _CLEAN_UP):
            raise ControllerGone("ansible-playbook is gone; the trial in progress is reverted and the search ends")
        result = self._execute_module(module_name=_COLLECTION + name, module_args=module_args, task_vars=self._vars)
        if result.get("failed") and not may_fail:
            raise ModuleFailed(result.get("msg") or "%s failed: %s" % (name, result))
        return result

    def _fingerprint(self, unit=None):
        """kv_fingerprint of the unit (or of ``unit``, a neighbour)."""
        return self._module("kv_fingerprint", {"unit": unit or self.args["unit"],
                                               "model_revision": self.args["model_revision"], "require_running": False})

    def _ready(self, invocation_id=None, unit=None, url=None, may_fail=False):
        """sglang_ready on the unit (or on ``unit`` at ``url``, a neighbour)."""
        return self._module("sglang_ready", {
            "url": url or self.url, "unit": unit or self.args["unit"], "api_key": self.args["api_key"],
            "timeout": self.args["ready_timeout"], "interval": self.args["ready_interval"],
            "invocation_id": invocation_id}, may_fail=may_fail)

    def _load(self):
        """kv_stress on the unit's server, with every neighbour's loaded at the same time; a module failure is a
        load that did not hold."""
        stress = self._module("kv_stress", {
            "url": self.url, "api_key": self.args["api_key"], "fill_ratio": self.args["stress_fill_ratio"],
            "duration": self.args["stress_duration"], "gpus": self.gpus,
            "also_urls": [found["url"] for found in self.neighbours.values() if found.get("url")]}, may_fail=True)
        return {"held": False, "failure_reason": stress.get("msg")} if stress.get("failed") else stress

    def _boot(self):
        """The startup facts of the unit's last start; {} when its log says nothing (rotated out of the journal)."""
        args = {"unit": self.args["unit"]}
        if self.checkpoint:   # the weights the log reports are checked against the checkpoint's share
            args["checkpoint_bytes"] = self.checkpoint
        boot = self._module("sglang_startup_facts", args, may_fail=True)
        return {} if boot.get("failed") else boot

    def _trial_module(self, state, text=None, fact=None):
        """kv_trial on the unit, as this run: it renews (or takes, or releases) the run's lock on the host. On node
        0 of a multi-node server every other node does the same first (one value on every node, restarted
        together)."""
        if self.nodes is not None and state not in ("locked", "unlocked"):
            self._step({"do": "kv_trial", "state": state, "text": text, "fact": fact})
        module_args = {"unit": self.args["unit"], "state": state, "run_id": self.run_id,
                       "controller": "%s pid %d" % (socket.gethostname(), self._controller),
                       "lease": self.args["confirm_timeout"] + 600}
        if text is not None:
            module_args["value"] = text
        if state == "started":
            module_args["confirm_timeout"] = self.args["confirm_timeout"]
            self.armed = True
        if fact is not None:
            module_args["fact"] = fact
        result = self._module("kv_trial", module_args)
        self.changed = self.changed or bool(result.get("changed"))
        if state == "locked":
            self.locked = True
        elif state == "unlocked":
            self.locked = False
        elif state != "started":
            self.armed = False
        return result

    def _lock(self):
        if not self.locked:
            self._trial_module("locked")

    def _unlock(self):
        if self.locked:
            try:
                self._trial_module("unlocked")
            except Exception as exc:  # pylint: disable=broad-except
                display.warning("%s: could not release the tuning lock of %s (%s); it lapses by itself"
                                % (self.host, self.args["unit"], exc))

    def _revert_if_armed(self):
        """Whatever went wrong after a trial started, the host does not wait for its timer: back to the
        last-known-good value now (best effort: an unreachable host still has its timer)."""
        if not self.armed:
            return False
        try:
            self._trial_module("reverted")
        except Exception as exc:  # pylint: disable=broad-except
            display.warning("%s: could not revert the trial in progress (%s); the host's revert timer will do it" %
                            (self.host, exc))
            return False
        return True

    def _observe_trial(self, step):
        started = self._trial_module("started", step["text"]) if step["restart"] else None
        ready = self._ready((started or {}).get("invocation_id") or self.invocation_id)
        if self.nodes is not None:
            # The other nodes watch their GPUs while this node drives the load (every rank holds its activations).
            self._step({"do": "observe", "watch": self.args["stress_duration"] + 5 if ready["ready"] else 0},
                       wait=False)
        stress = self._load() if ready["ready"] else None
        running, boot = self._fingerprint(), self._boot()
        if self.nodes is not None:
            seen = {ack["host"]: ack for ack in self._acks(self.nodes["n"] - 1)}
            stress = kv_multinode.merge_samples(stress, seen) if stress is not None else None
            boot = kv_multinode.server_boot(boot, {host: ack.get("boot") for host, ack in seen.items()})
        return {"started": started, "ready": ready, "stress": stress, "boot": boot,
                "running": running if running["running"] else None}

    def _neighbours_serving(self):
        """After this unit's search: every server that shares its GPUs serves again. One that a trial ran out of
        memory (systemd restarts it, perhaps while the trial still held its memory) is restarted on its own
        last-known-good value and must answer; what still does not is named."""
        lost, restarts = [], []
        for unit, before in sorted(self.neighbours.items()):
            now = self._fingerprint(unit)
            if now["running"] and now.get("invocation_id") == before.get("invocation_id"):
                continue
            display.display("%s: %s, which shares its GPUs, stopped or restarted during the search: restarting it on "
                            "its last-known-good value" % (self.host, unit))
            self.changed = True
            restarted = self._module("kv_trial", {"unit": unit, "state": "reverted"}, may_fail=True)
            ready = self._ready(restarted.get("invocation_id"), unit, now.get("url") or before.get("url"), may_fail=True)
            if restarted.get("failed") or not ready.get("ready"):
                lost.append("%s, which shares the GPUs of %s, DOES NOT SERVE: %s" % (
                    unit, self.args["unit"], restarted.get("msg") or "%s: %s" % (ready.get("reason"), ready.get("detail"))))
            else:
                restarts.append(unit)
        if restarts and not lost:
            # Restarted after the last trial: the pair as it runs now must hold the joint load once more.
            stress = self._load()
            if not stress.get("held") or (stress.get("min_free_gib") or 0) < self.args["safety_gib"]:
                lost.append("%s and %s, restarted on their last-known-good values, do not hold the load together "
                            "with %s GiB to spare (%s): run tune_kv.yml again" % (
                                self.args["unit"], ", ".join(restarts), self.args["safety_gib"],
                                stress.get("failure_reason") or "%s GiB free" % stress.get("min_free_gib")))
        return lost

    # -- a server on several hosts -----------------------------------------------------------------------------------

    def _check_controller(self):
        if os.getppid() != self._controller:
            raise ControllerGone("ansible-playbook is gone; the trial in progress is reverted and the search ends")

    def _channel(self):
        return NodeChannel(self._task._uuid, self.node["key"])

    def _lead(self):
        """Node 0: wait until every other node's worker has joined; why they need tuning (None: their pins hold)."""
        channel = self._channel()
        ranks = list(range(1, self.node["nnodes"]))
        # Every node of the server runs this task at once: a node whose worker never starts (fewer forks than
        # nodes) would otherwise be waited for until a trial's timeout.
        hellos = channel.wait(["hello-%d" % rank for rank in ranks], min(600, self.args["ready_timeout"]),
                              "%s: the other nodes of the server at %s (every node must be in the play, and forks at "
                              "least the number of nodes)" % (self.host, self.node["dist_init_addr"]),
                              check=self._check_controller)
        self.nodes = {"channel": channel, "n": 0, "ranks": ranks,
                      "boots": {hello["host"]: hello.get("boot") for hello in hellos.values()}}
        return kv_multinode.followers_reason(list(hellos.values()))

    def _step(self, message, wait=True):
        """Node 0: the next step for every other node; with ``wait``, their answers (a node that failed it fails
        the search, which then reverts every node)."""
        number = self.nodes["n"]
        self.nodes["n"] += 1
        self.nodes["channel"].post("step-%d" % number, dict(message, n=number, leader=self.inventory_host))
        return self._acks(number) if wait else None

    def _acks(self, number):
        timeout = self.args["ready_timeout"] + 2 * self.args["stress_duration"] + 120
        acks = list(self.nodes["channel"].wait(["ack-%d-%d" % (number, rank) for rank in self.nodes["ranks"]],
                                               timeout, "%s: the other nodes' answer to step %d" % (self.host, number),
                                               check=self._check_controller).values())
        failed = ["node %d (%s): %s" % (ack["rank"], ack["host"], ack["msg"]) for ack in acks if not ack["ok"]]
        if failed:
            raise ModuleFailed("; ".join(failed))
        return acks

    def _release_followers(self, result):
        """Node 0, whatever happened (also a failure before the others joined): the other nodes stop following, and
        say what the search ended with."""
        nodes, self.nodes = self.nodes, None
        if nodes is None:
            if self.node is None or self.node["node_rank"] != 0 or self._task.check_mode:
                return
            nodes = {"channel": self._channel(), "n": 0}
        value = ((result.get("result") or {}).get("after") or {}).get("mem_fraction_static")
        try:
            nodes["channel"].post("step-%d" % nodes["n"], {
                "do": "done", "n": nodes["n"], "leader": self.inventory_host, "value": value,
                "status": "failed" if result.get("failed") else result.get("status"),
                "line": result.get("line") or result.get("msg")})
        except OSError as exc:
            display.warning("%s: could not release the other nodes (%s); they stop at their timeout" % (self.host, exc))

    def _follow(self, info, settings):
        """Node 1 and up: say whether this node's pin holds, then do what node 0 says, step by step, until done."""
        rank = self.node["node_rank"]
        channel = self._channel()
        plan = kv_tune.plan_start(info, self.host, settings["unit"], settings["force"], True, self.run_id)
        status = {"refuse": "refuse", "report": plan.get("status")}.get(plan["do"], "tune")
        channel.post("hello-%d" % rank, {"rank": rank, "host": self.inventory_host, "status": status,
                                         "why": plan.get("why") or plan.get("msg"), "boot": self._boot()})
        if status == "refuse":
            raise ModuleFailed(plan["msg"])
        self.info, self.invocation_id = info, info["invocation_id"]
        self.checkpoint = info.get("checkpoint_bytes")
        number = 0
        while True:
            name = "step-%d" % number
            # The first step follows node 0's readiness check; a later one may follow a whole trial.
            timeout = (self.args["ready_timeout"] + 120) if number == 0 else (self.args["confirm_timeout"] + 600)
            step = channel.wait([name], timeout, "%s: node 0's next step" % self.host,
                                check=self._check_controller)[name]
            if step["do"] == "done":
                break
            if step["do"] == "kv_trial":
                self._lock()
            answer = self._follow_step(step)
            channel.post("ack-%d-%d" % (number, rank), dict(answer, rank=rank, host=self.inventory_host))
            number += 1
        line = "%s: node %d of the server led by %s: %s" % (self.host, rank, step["leader"], step.get("line"))
        display.display(line)
        out = {"changed": self.changed, "status": step["status"], "follower_of": step["leader"], "line": line,
               "value": step.get("value"), "pin": info["pin"]}
        if step["status"] in ("failed", "no_stable_value"):
            out["msg"] = line
        return out

    def _follow_step(self, step):
        """One of node 0's steps on this node: a kv_trial state (the same value and record), or watching the GPUs
        during node 0's load; the answer node 0 waits for."""
        if step["do"] == "kv_trial":
            fact = step.get("fact")
            if fact is not None:   # this node's own fingerprint in its pin: what its next run compares with
                fact = dict(fact, fingerprint=self.info["fingerprint"], fingerprint_hash=self.info["fingerprint_hash"])
            try:
                result = self._trial_module(step["state"], step.get("text"), fact)
            except ModuleFailed as exc:
                return {"ok": False, "msg": str(exc)}
            if result.get("invocation_id"):
                self.invocation_id = result["invocation_id"]
            return {"ok": True}
        watched = {}
        if step.get("watch"):
            found = self._module("gpu_info", {"watch": step["watch"], "gpus": self.gpus}, may_fail=True)
            watched = found.get("watched") or {}
        running = self._fingerprint()
        return {"ok": True, "min_free_gib_per_gpu": watched.get("min_free_gib_per_gpu") or {},
                "running": bool(running["running"]), "same_start": running.get("invocation_id") == self.invocation_id,
                "boot": self._boot()}

    # -- before the search -----------------------------------------------------------------------------------------

    def _run(self, info=None):
        settings = kv_tune.check_settings(self.args)
        unit = settings["unit"]
        info = info or self._fingerprint()
        self.checkpoint = info.get("checkpoint_bytes")
        # Before anything restarts: several servers on one host answer on their own ports, on their own GPUs.
        self.url = info.get("url") or self.url
        self.gpus = kv_tune.unit_gpus(info.get("gpu_memory"))
        if self.gpus is not None:   # the neighbours' GPUs too: their memory is what the pair has left
            for found in self.neighbours.values():
                self.gpus = sorted(set(self.gpus) | set(kv_tune.unit_gpus(found.get("gpu_memory")) or []))
        self.node = kv_multinode.node_of(info.get("server_args"))
        others = None
        if self.node is not None and not self._task.check_mode:
            if self.node["node_rank"] > 0:
                return self._follow(info, settings)
            others = self._lead()
        if self.args["reset"]:
            return self._reset(info)
        safe = None
        for _step in range(4):
            plan = kv_tune.plan_start(info, self.host, unit, settings["force"], self._task.check_mode, self.run_id,
                                      others)
            if plan["do"] not in ("restart", "revert", "disarm"):
                break
            if plan["do"] != "disarm" and info.get("fingerprint"):
                # A model the formula cannot read would fail the tune after this restart: fail before it.
                kv_tune.model_inputs(info["config"], info["fingerprint"]["server_args"], info["sglang_version"])
            self._lock()
            display.display("%s: %s" % (self.host, plan["why"]))
            if plan["do"] == "disarm":
                self._trial_module("disarmed")
            else:
                ready = self._ready(self._trial_module("reverted").get("invocation_id"))
                if not ready["ready"]:
                    safe = self._after_a_failed_start(info, settings, ready)
                    break
            info = self._fingerprint()
        if safe is None and plan["do"] == "refuse":
            raise ModuleFailed(plan["msg"])
        if safe is None and plan["do"] == "report":
            display.display(plan["line"])
            return {"changed": self.changed, "status": plan["status"], "why": plan["why"], "line": plan["line"],
                    "pin": info["pin"], "fingerprint_hash": info.get("fingerprint_hash")}
        if safe is None and plan["do"] != "tune":
            raise ModuleFailed("%s did not settle before the search (%s)" % (unit, plan.get("why")))
        self.url = info["url"] or self.url
        # The formula must know the model (attention, dtype) before anything restarts: an unknown one fails here.
        model = kv_tune.model_inputs(info["config"], info["fingerprint"]["server_args"], info["sglang_version"])
        if safe is None and plan["dry_run"]:
            display.display(plan["line"])
            return {"changed": False, "status": "would_tune", "why": plan["why"], "line": plan["line"],
                    "pin": info["pin"], "fingerprint_hash": info.get("fingerprint_hash")}
        self._lock()
        if safe is not None:
            start = kv_tune.safe_start(safe["boot"], info["fingerprint"], model, settings)
            boot, why, self.invocation_id = safe["boot"], safe["why"], None
        else:
            ready = self._ready(info["invocation_id"])
            if not ready["ready"]:
                raise ModuleFailed("%s must serve its last-known-good value before it is tuned (%s: %s); nothing was "
                                   "restarted" % (unit, ready["reason"], ready["detail"]))
            boot, why, start, self.invocation_id = self._boot(), plan["why"], None, info["invocation_id"]
            if self.nodes is not None:   # the server's P and A: the least of any node's, as it joined
                boot = kv_multinode.server_boot(boot, self.nodes["boots"])
        running_value = info["mem_fraction_static"]
        if running_value is None:
            running_value = (boot.get("server_args") or {}).get("mem_fraction_static")
        if running_value is None and start is None and settings["start"] is None:
            # Neither the command line nor the log says what the server runs: SGLang's own default, inferred.
            start = kv_tune.safe_start(boot, info["fingerprint"], model, settings)
            display.display("%s: %s runs SGLang's default --mem-fraction-static, which neither its command line nor "
                            "its startup log states: starting from %s, inferred for these GPUs and SGLang %s"
                            % (self.host, unit, kv_search.value_text(start, settings["resolution"]),
                               info.get("sglang_version") or "(newest)"))
        verify = None if safe is not None else self._class_value(settings)
        tuner = kv_tune.Tuner(self.host, settings, why, running_value, boot, info["fingerprint"],
                              info["fingerprint_hash"], lower_bound=kv_tune.lower_bound(boot, model, settings["min_tokens"]),
                              invocation_id=self.invocation_id, start=start, verify=verify)
        return self._search(tuner, info)

    def _class_value(self, settings):
        """per_class: the value this member verifies (its class's less the margin), None for a search of its own."""
        entry = (self.args["class_plan"] or {}).get(settings["unit"])
        if settings["strategy"] != "per_class" or not entry or self.node is not None:
            return None
        canary = entry.get("canary_host")
        outcome = None
        if canary == self.inventory_host:   # another unit of this host, tuned earlier in this task
            outcome = self.tuned.get(entry["canary_unit"])
        elif canary and canary in self._vars.get("hostvars", {}):
            found = self._vars["hostvars"][canary].get("kv_tune_outcome")
            outcome = kv_tune.unit_outcome(plain(dict(found)), entry["canary_unit"]) if found is not None else None
        value = kv_tune.class_value(entry, outcome)
        if value is None:
            if entry.get("role") == "member":
                display.display("%s: the canary %s of its class found no value: a search of its own"
                                % (self.host, entry.get("canary")))
            return None
        return kv_tune.verify_value(value, settings)

    def _after_a_failed_start(self, info, settings, ready):
        """The last-known-good value did not come back: tune from a safe start when it ran out of memory, else stop
        loudly with the unit left as it is."""
        boot = self._boot()
        lkg = (boot.get("server_args") or {}).get("mem_fraction_static", info.get("mem_fraction_static"))
        lkg_text = "?" if lkg is None else str(lkg)
        message = kv_tune.failed_start(boot, settings["unit"], lkg_text)
        if message is not None:
            raise ModuleFailed("%s (%s: %s)" % (message, ready["reason"], ready["detail"]))
        if info.get("fingerprint") is None:
            raise ModuleFailed("%s does not start on its last-known-good value %s, and its unit file cannot be read "
                               "well enough to fingerprint it" % (settings["unit"], lkg_text))
        failure = boot.get("failure") or {}
        why = ("the last-known-good value %s no longer starts (%s: %s): tuning from a safe start"
               % (lkg_text, failure.get("kind"), failure.get("line")))
        display.display("%s: %s" % (self.host, why))
        return {"boot": boot, "why": why}

    def _reset(self, info):
        """kv_tune_reset: forget the pin; the unit runs the value of its base unit file again."""
        if self._task.check_mode:
            line = "%s: %s would lose its pin (%s); check mode restarts nothing." % (
                self.host, self.args["unit"], "none" if info["pin"] is None else info["pin"].get("mem_fraction_static"))
            display.display(line)
            return {"changed": info["pin"] is not None, "status": "would_reset", "why": "kv_tune_reset", "line": line,
                    "pin": info["pin"], "fingerprint_hash": info.get("fingerprint_hash")}
        self._lock()
        ready = self._ready(self._trial_module("reset").get("invocation_id"))
        after = self._fingerprint()
        line = "%s: %s lost its pin and runs %s (its base value)%s" % (
            self.host, self.args["unit"], after.get("mem_fraction_static") or "SGLang's default",
            "" if ready["ready"] else "; IT DOES NOT SERVE: %s: %s" % (ready["reason"], ready["detail"]))
        display.display(line)
        if not ready["ready"]:
            raise ModuleFailed(line)
        return {"changed": True, "status": "reset", "why": "kv_tune_reset", "line": line, "pin": None}

    # -- the search ------------------------------------------------------------------------------------------------

    def _search(self, tuner, info):
        started = _now()
        display.display(tuner.start_line())
        step = tuner.first_step()
        while step["do"] != "done":
            if step["do"] == "trial":
                observation = self._observe_trial(step)
            elif step["do"] == "revert":
                display.display("%s: %s: back to the last-known-good value %s"
                                % (self.host, step["why"], step["text"] or "(SGLang's default)"))
                reverted = self._trial_module("reverted")
                observation = {"ready": self._ready(reverted.get("invocation_id")), "running": self._fingerprint()}
            else:  # commit a new best, or pin: the fact records every trial
                observation = self._trial_module("committed", step["text"], tuner.fact_entry(_now()))
            was_trial = step["do"] == "trial"
            step = tuner.advance(observation)
            if was_trial:
                display.display(tuner.progress_line())
        result = tuner.result(step["status"], started, _now(), (info["fingerprint"] or {}).get("versions"))
        line = kv_tune.result_line(result)
        display.display(line)
        out = {"changed": True, "status": step["status"], "why": tuner.reason, "line": line, "pin": info["pin"],
               "result": result, "report": kv_tune.report_markdown(result)}
        if step["msg"]:
            out["msg"] = step["msg"]
        return out

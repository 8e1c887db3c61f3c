# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The KV tuner's loop for one unit, on the controller (documentation: plugins/modules/kv_tune.py).

This file only performs: it runs the collection's modules on the host and prints progress. Every decision is
module_utils/kv_tune.py's Tuner, which answers each observation with the next step; the loop below executes it.
"""
from __future__ import annotations

import datetime
import os

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.llmserve.sglang.plugins.module_utils import kv_tune
from ansible_collections.llmserve.sglang.plugins.module_utils.checks import InvalidInput

display = Display()

_COLLECTION = "llmserve.sglang."
ARGUMENT_SPEC = dict(
    unit=dict(type="str", default="sglang.service"),
    start=dict(type="float"),
    cap=dict(type="float", default=0.98),
    resolution=dict(type="float", default=0.005),
    safety_gib=dict(type="float", default=1.0),
    budget=dict(type="int", default=6),
    min_tokens=dict(type="int"),
    force=dict(type="bool", default=False),
    model_revision=dict(type="str"),
    url=dict(type="str", default="http://127.0.0.1:30000"),
    api_key=dict(type="str", no_log=True),
    ready_timeout=dict(type="float", default=1800),
    ready_interval=dict(type="float", default=5),
    stress_fill_ratio=dict(type="float", default=0.95),
    stress_duration=dict(type="float", default=120),
    confirm_timeout=dict(type="int"),
)


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
        validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        del validation
        if args["confirm_timeout"] is None:
            args["confirm_timeout"] = int(args["ready_timeout"] + 2 * args["stress_duration"] + 600)
        self.args = args
        self.host = task_vars.get("inventory_hostname", "?")
        self.armed = False     # a trial started on the host and neither committed nor reverted
        # Ansible's workers run in their own session: one whose ansible-playbook was killed lives on, and a search
        # that outlived its controller would go on restarting servers that nobody watches.
        self._controller = os.getppid()
        try:
            return self._run()
        except Exception as exc:
            reverted = self._revert_if_armed()
            if not isinstance(exc, (InvalidInput, ModuleFailed, ControllerGone)):
                raise
            return {"failed": True, "changed": reverted, "msg": str(exc) + (
                " (the trial in progress was reverted)" if reverted else "")}
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)

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

    # -- the host --------------------------------------------------------------------------------------------------

    def _module(self, name, module_args, may_fail=False):
        if os.getppid() != self._controller and not (name == "kv_trial" and module_args["state"] == "reverted"):
            raise ControllerGone("ansible-playbook is gone; the trial in progress is reverted and the search ends")
        result = self._execute_module(module_name=_COLLECTION + name, module_args=module_args, task_vars=self._vars)
        if result.get("failed") and not may_fail:
            raise ModuleFailed(result.get("msg") or "%s failed: %s" % (name, result))
        return result

    def _fingerprint(self):
        return self._module("kv_fingerprint", {"unit": self.args["unit"], "model_revision": self.args["model_revision"],
                                               "require_running": False})

    def _ready(self):
        return self._module("sglang_ready", {
            "url": self.url, "unit": self.args["unit"], "api_key": self.args["api_key"],
            "timeout": self.args["ready_timeout"], "interval": self.args["ready_interval"]})

    def _trial_module(self, state, text=None, fact=None):
        module_args = {"unit": self.args["unit"], "state": state}
        if text is not None:
            module_args["value"] = text
        if state == "started":
            module_args["confirm_timeout"] = self.args["confirm_timeout"]
            self.armed = True
        if fact is not None:
            module_args["fact"] = fact
        result = self._module("kv_trial", module_args)
        if state != "started":
            self.armed = False
        return result

    def _back_to_last_known_good(self, why):
        display.display("%s: %s: back to the last-known-good value" % (self.host, why))
        self._trial_module("reverted")
        ready = self._ready()
        if not ready["ready"]:
            raise ModuleFailed("%s did not serve its last-known-good value again (%s: %s); nothing was tuned"
                               % (self.args["unit"], ready["reason"], ready["detail"]))

    def _observe_trial(self, step):
        if step["restart"]:
            self._trial_module("started", step["text"])
        ready = self._ready()
        stress = None
        if ready["ready"]:
            stress = self._module("kv_stress", {
                "url": self.url, "api_key": self.args["api_key"], "fill_ratio": self.args["stress_fill_ratio"],
                "duration": self.args["stress_duration"]}, may_fail=True)
            if stress.get("failed"):
                stress = {"held": False, "failure_reason": stress.get("msg")}
        boot = self._module("sglang_startup_facts", {"unit": self.args["unit"]}, may_fail=True)
        running = self._fingerprint()
        return {"ready": ready, "stress": stress, "boot": {} if boot.get("failed") else boot,
                "running": running if running["running"] else None}

    # -- the loop --------------------------------------------------------------------------------------------------

    def _run(self):
        settings = kv_tune.check_settings(self.args)
        self.url = self.args["url"]
        info = self._fingerprint()
        plan = kv_tune.plan_start(info, self.host, settings["unit"], settings["force"], self._task.check_mode)
        if plan["do"] == "revert":
            self._back_to_last_known_good(plan["why"])
            info = self._fingerprint()
            plan = kv_tune.plan_start(info, self.host, settings["unit"], settings["force"])
        if plan["do"] == "refuse":
            raise ModuleFailed(plan["msg"])
        if plan["do"] == "report":
            display.display(plan["line"])
            return {"changed": False, "status": plan["status"], "why": plan["why"], "line": plan["line"],
                    "pin": info["pin"]}
        if plan["do"] != "tune":
            raise ModuleFailed("%s did not come back on its last-known-good value" % settings["unit"])
        self.url = info["url"] or self.url
        # The formula must know the model (attention, dtype) before anything restarts: an unknown one fails here.
        model = kv_tune.model_inputs(info["config"], info["fingerprint"]["server_args"], info["sglang_version"])
        if plan["dry_run"]:
            display.display(plan["line"])
            return {"changed": False, "status": "would_tune", "why": plan["why"], "line": plan["line"],
                    "pin": info["pin"]}
        ready = self._ready()
        if not ready["ready"]:
            raise ModuleFailed("%s must serve its last-known-good value before it is tuned (%s: %s); nothing was "
                               "restarted" % (settings["unit"], ready["reason"], ready["detail"]))
        boot = self._module("sglang_startup_facts", {"unit": settings["unit"]})
        running_value = info["mem_fraction_static"]
        if running_value is None:
            running_value = (boot.get("server_args") or {}).get("mem_fraction_static")
        tuner = kv_tune.Tuner(self.host, settings, plan["why"], running_value, boot, info["fingerprint"],
                              info["fingerprint_hash"], lower_bound=kv_tune.lower_bound(boot, model, settings["min_tokens"]))
        return self._search(tuner, info)

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
                self._trial_module("reverted")
                observation = {"ready": self._ready(), "running": self._fingerprint()}
            else:  # commit a new best, or pin: the fact records every trial
                observation = self._trial_module("committed", step["text"], tuner.fact_entry(_now()))
            was_trial = step["do"] == "trial"
            step = tuner.advance(observation)
            if was_trial:
                display.display(tuner.progress_line())
        result = tuner.result(step["status"], started, _now(), (info["fingerprint"] or {}).get("versions"))
        line = kv_tune.result_line(result)
        display.display(line)
        out = {"changed": tuner.restarts > 0 or tuner.best is not None, "status": step["status"],
               "why": tuner.reason, "line": line, "pin": info["pin"], "result": result,
               "report": kv_tune.report_markdown(result)}
        if step["msg"]:
            out["msg"] = step["msg"]
        return out

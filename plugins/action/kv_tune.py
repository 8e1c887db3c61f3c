# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The KV tuner on the controller (documentation: plugins/modules/kv_tune.py).

This file only performs: plugin_utils/run/ decides every step of the host's run and this action executes each one (a
module call on the host, a line for the operator, a message to the other nodes of a server; run/steps.py is the
protocol) and sends back what it saw. It keeps only what it must clean up whatever happens: the unit's lock and an armed trial.
"""
from __future__ import annotations

import contextlib
import datetime
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any, Optional

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.llmserve.sglang.plugins.module_utils.checks import InvalidInput
from ansible_collections.llmserve.sglang.plugins.plugin_utils.node_channel import ChannelTimeout, NodeChannel, NodeLink
from ansible_collections.llmserve.sglang.plugins.plugin_utils.plain import plain
from ansible_collections.llmserve.sglang.plugins.plugin_utils.run import host as host_run, unit_run
from ansible_collections.llmserve.sglang.plugins.plugin_utils.run.steps import RunFailed, Step, Steps
from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner import progress_lines
from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner.run_settings import STRATEGIES
from ansible_collections.llmserve.sglang.plugins.plugin_utils.worker_children import stop_children

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
    strategy=dict(type="str", default="per_host", choices=list(STRATEGIES)),
    class_margin_steps=dict(type="int", default=0),
    class_plan=dict(type="dict"),
    pin_tokens=dict(type="bool", default=False),
    run_id=dict(type="str"),
    watch=dict(type="dict"),
)


class ModuleFailed(RunFailed):
    """A module failed on the host; the message is its own."""


class ControllerGone(RunFailed):
    """ansible-playbook died under this worker (killed): the search must not go on by itself."""


# What ends a unit's run with a failed result (its trial reverted); anything else is a bug, raised after the cleanup.
_EXPECTED = (InvalidInput, RunFailed, ChannelTimeout)


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = True
    _armed = False      # a trial is started and not yet committed or reverted: the cleanup reverts it
    _node_link: Optional[NodeLink] = None   # the other nodes of the unit's server, once it talks to them

    def run(self, tmp: Optional[str] = None, task_vars: Optional[dict[str, Any]] = None) -> dict[str, Any]:
        super(ActionModule, self).run(tmp, task_vars)
        self._vars = task_vars or {}
        _validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        # Ansible's workers run in their own session: one whose ansible-playbook was killed lives on, and a search
        # that outlived its controller would go on restarting servers that nobody watches.
        self._controller = os.getppid()
        self._progress = None
        try:
            host = self._vars.get("inventory_hostname", "?")
            with self._signals_end_the_run():
                return self._drive(host_run.host_steps(host, args, self._task.check_mode))
        except _EXPECTED as exc:
            return {"failed": True, "changed": False, "msg": str(exc)}
        finally:
            self._remove_tmp_path(self._connection._shell.tmpdir)

    @contextlib.contextmanager
    def _signals_end_the_run(self) -> Iterator[None]:
        """SIGTERM and SIGINT reach a worker from ansible-playbook, which forwards them when it is interrupted or
        stops at a dead worker (another node's, killed): Ansible's own handler then ends the worker at once
        (os._exit), leaving a trial in progress to the host's revert timer. While the run lasts, a signal ends it
        as a controller gone does instead: the call in progress interrupted, the trial reverted at once on this
        node, the lock released; another signal meanwhile is ignored, so that the cleanup runs to its end."""
        if threading.current_thread() is not threading.main_thread():   # signals reach the main thread only
            yield
            return
        stopping: list[int] = []

        def stop(signum: int, _frame: Any) -> None:
            if not stopping:
                stopping.append(signum)
                raise ControllerGone("ansible-playbook stopped this worker (%s); the trial in progress is reverted "
                                     "and the search ends" % signal.Signals(signum).name)

        previous = {signum: signal.signal(signum, stop) for signum in (signal.SIGTERM, signal.SIGINT)}
        try:
            yield
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    def _drive(self, steps: Steps[Any], run: Optional[unit_run.UnitRun] = None) -> Any:
        """Perform each step of ``steps`` (a generator of plugin_utils/run/) and send back what it gave; its result."""
        answer = None
        while True:
            try:
                step = steps.send(answer)
            except StopIteration as stop:
                return stop.value
            if "say" in step:
                display.display(step["say"])
            answer = None
            if "call" in step:
                answer = self._call(step["call"], step["args"], step["may_fail"])
            elif "nodes" in step:
                if (step.get("message") or {}).get("state") == "started":
                    self._armed = True   # the other nodes start a trial: one that fails to is reverted on all
                answer = self._link(run).perform(step)
            elif "tune_unit" in step:
                answer = self._tune_unit(step)

    def _tune_unit(self, step: Step) -> dict[str, Any]:
        """One unit's run, with what must be undone whatever happens: an armed trial reverted at once (on every
        node), the lock released, the other nodes of its server released."""
        host = self._vars.get("inventory_hostname", "?")
        held = step["args"].get("run_id")   # rollout.yml's: it holds the lock from before its upgrade
        run = unit_run.UnitRun(
            host, step["label"], step["args"], self._task.check_mode, held or uuid.uuid4().hex[:8],
            "%s pid %d" % (socket.gethostname(), self._controller), _now, info=step["info"],
            neighbours=step["neighbours"], tuned=step["tuned"], outcome_of=self._outcome_of, lock_held=bool(held))
        self._armed, self._node_link = False, None
        self._progress = progress_lines.Progress(run.label, time.monotonic)
        gone = False
        try:
            result = self._drive(run.steps(), run)
        except Exception as exc:
            gone = isinstance(exc, ControllerGone)
            reverted = self._revert_if_armed(run)
            if not isinstance(exc, _EXPECTED):
                self._release(run, {"failed": True, "msg": str(exc)})
                raise
            result = run.failed(str(exc), reverted)
        finally:
            if run.locked:   # the run knows: it takes the lock, and hears each answer before its next step
                self._cleanup(run, run.unlock(gone), "could not release the tuning lock of %s (%%s); it lapses by itself"
                              % run.args["unit"])
        self._release(run, result)
        return self._drive(run.finish(result), run)

    def _call(self, name: str, module_args: dict[str, Any], may_fail: bool) -> dict[str, Any]:
        if not host_run.outlives_controller(name, module_args):
            self._check_controller()
        cut_short = host_run.cut_short(name, module_args)
        own = name == "kv_trial" and module_args.get("run_id") is not None   # this run's trial of its own unit
        if own and module_args["state"] == "started":
            self._armed = True
        self._say(self._progress and self._progress.on_call(name, module_args))
        try:
            with self._during_call(cut_short):
                result = self._execute_module(module_name=_COLLECTION + name, module_args=module_args,
                                              task_vars=self._vars)
        except Exception:
            if cut_short:
                self._check_controller()   # a call cut short may also raise (the connection lost)
            raise
        if cut_short:
            # Gone during the call: its result (a load cut short) is nobody's. A kv_trial call is judged as before:
            # its result stands (a commit made is no trial left armed), and the next call sees the controller gone.
            self._check_controller()
        self._say(self._progress and self._progress.on_end(name, result))
        if result.get("failed"):
            if not may_fail:
                raise ModuleFailed(result.get("msg") or "%s failed: %s" % (name, result))
        elif own and module_args["state"] not in ("started", "prepared", "locked", "unlocked"):
            self._armed = False
        return result

    @staticmethod
    def _say(line: Optional[str]) -> None:
        if line:
            display.display(line)

    @contextlib.contextmanager
    def _during_call(self, cut_short: bool) -> Iterator[None]:
        """While a module call lasts, once a second: the progress line again whenever it is due (a server loading for
        minutes); and, for a call to ``cut_short`` (host_run.cut_short), a look whether ansible-playbook is gone.
        Then its processes are stopped, so that it returns, and the run ends with the trial reverted at once,
        instead of after a load or a watch that nobody will judge."""
        progress, done = self._progress, threading.Event()

        def beat() -> None:
            while not done.wait(1.0):
                if cut_short and os.getppid() != self._controller:
                    stop_children()   # the connection's ssh of this call (again, should ansible start another)
                    continue
                if progress:
                    self._say(progress.heartbeat())

        beater = threading.Thread(target=beat, name="kv-tune-call", daemon=True)
        beater.start()
        try:
            yield
        finally:
            done.set()
            beater.join()

    def _outcome_of(self, host: str) -> Optional[dict[str, Any]]:
        """What another host's kv_tune registered (a class's canary), as plain data; None when it has nothing."""
        hostvars = self._vars.get("hostvars", {})
        found = hostvars[host].get("kv_tune_outcome") if host in hostvars else None
        return None if found is None else plain(dict(found))

    def _revert_if_armed(self, run: unit_run.UnitRun) -> bool:
        """Whatever went wrong after a trial started, the host does not wait for its timer: back to the
        last-known-good value now (best effort: an unreachable host still has its timer)."""
        return self._armed and self._cleanup(run, run.revert(), "could not revert the trial in progress (%s); the "
                                                                "host's revert timer will do it")

    def _cleanup(self, run: unit_run.UnitRun, steps: Steps[Any], warning: str) -> bool:
        try:
            self._drive(steps, run)
        except Exception as exc:  # pylint: disable=broad-except
            display.warning("%s: %s" % (run.label, warning % exc))
            return False
        return True

    # -- the other nodes of a server that spans hosts --------------------------------------------------------------

    def _check_controller(self) -> None:
        if os.getppid() != self._controller:
            raise ControllerGone("ansible-playbook is gone; the trial in progress is reverted and the search ends")

    def _link(self, run: Optional[unit_run.UnitRun]) -> NodeLink:
        if self._node_link is None:
            node = run.node if run is not None else None
            if node is None:   # only a unit's run of a server that spans hosts yields a nodes step
                raise RunFailed("a message to the other nodes of a server outside a run of one")
            self._node_link = NodeLink(NodeChannel(self._task._uuid, node["key"]), node["node_rank"],
                                       check=self._check_controller)
        return self._node_link

    def _release(self, run: unit_run.UnitRun, result: dict[str, Any]) -> None:
        """Node 0, whatever happened (also a failure before the others joined): the other nodes stop following."""
        if run.leads():
            try:
                self._link(run).release(run.release_message(result))
            except OSError as exc:
                display.warning("%s: could not release the other nodes (%s); they stop at their timeout"
                                % (run.label, exc))

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The kv_tune action itself against a scripted host (test_kv_tune_action.yaml), the way ansible-core tests its
reboot action: ActionModule built with a mocked task and connection, each _execute_module call answered by the next
entry of the case's script, which must name that very call. The exact sequence of module calls (and of the messages
to the other nodes of a server), the lines said and the result are asserted."""
from __future__ import annotations

import copy
import json
import os
import signal
import threading
import time
from pathlib import Path
from unittest import mock

import pytest
import yaml

from ansible.playbook.play_context import PlayContext

from ansible_collections.llmserve.sglang.plugins.action import kv_tune as kv_tune_action
from ansible_collections.llmserve.sglang.plugins.plugin_utils.node_channel import ChannelTimeout
from ansible_collections.llmserve.sglang.tests.unit.plugins.plugin_utils.run.scripted_run import BOOT, INFO

HERE = Path(__file__).parent
CASES = yaml.safe_load((HERE / "test_kv_tune_action.yaml").read_text())
# INFO: kv_fingerprint of a unit that runs 0.88 (start I0) and was never tuned, the base every script entry
# overrides; BOOT: sglang_startup_facts of a boot at 0.88 (P and A per GPU, the pool). The run's own tests share them.
# Every case runs with this API key: it may reach the modules that take it (their api_key is no_log) and nothing
# else - no line, warning, result, other module's arguments or message to the other nodes.
API_KEY = "sk-sweep-7f3a9c"
TAKE_THE_KEY = ("sglang_ready", "kv_stress")


class Host(object):
    """The case's script: each entry ``[what, answer]`` is the next call expected. ``what`` is the module's short
    name (``kv_trial`` with its state and value: ``kv_trial started 0.910``), or ``nodes <kind>`` for a message to
    the other nodes; a third item, arguments the call must have (a dict: those of its keys, with these values).
    kv_fingerprint's and sglang_startup_facts' answers are overrides of INFO and BOOT; an answer
    ``{raise: ChannelTimeout | RuntimeError, msg}`` raises that instead; ``{block: answer}`` is a call that lasts
    (a load, a watch) until the action stops its processes (worker_children.stop_children), then answers that;
    ``{signal: SIGTERM | SIGINT}`` a call during which ansible-playbook forwards that signal to the worker."""

    def __init__(self, script):
        self.script = [(list(entry) + [None, None])[:3] if isinstance(entry, list) else [entry, None, None]
                       for entry in script]
        self.calls = []
        self.run_ids = set()    # the runs the unit's own kv_trial calls were made as
        self.sent = []          # (module, its arguments) of every call, and every message to the other nodes
        self.stopped = threading.Event()    # the action stopped the processes of the call in progress
        self.blocked = []       # seconds each blocking call lasted

    def answer(self, what, args=None):
        self.calls.append(what)
        assert self.script, "unexpected call %s %s: the script has ended" % (what, args)
        expected, answer, with_args = self.script.pop(0)
        assert what == expected, "call %d: %s (%s), the script expects %s" % (len(self.calls), what, args, expected)
        for key, value in (with_args or {}).items():
            found = (args or {}).get(key)
            if isinstance(value, dict) and isinstance(found, dict):
                found = {name: found.get(name, "(absent)") for name in value}
            assert found == value, "call %d: %s with %s=%r, the script expects %r" % (
                len(self.calls), what, key, found, value)
        answer = copy.deepcopy(answer)
        if isinstance(answer, dict) and "block" in answer:
            began = time.monotonic()
            assert self.stopped.wait(10), "call %d: %s was never cut short" % (len(self.calls), what)
            self.stopped.clear()
            self.blocked.append(time.monotonic() - began)
            answer = answer["block"]
        if isinstance(answer, dict) and "signal" in answer:
            os.kill(os.getpid(), getattr(signal, answer["signal"]))
            time.sleep(5)   # the action's handler raises here
            raise AssertionError("call %d: %s went on after %s" % (len(self.calls), what, answer["signal"]))
        if isinstance(answer, dict) and "raise" in answer:
            raise {"ChannelTimeout": ChannelTimeout, "RuntimeError": RuntimeError,
                   "ControllerGone": kv_tune_action.ControllerGone}[answer["raise"]](answer["msg"])
        if what == "kv_fingerprint":
            return dict(copy.deepcopy(INFO), **(answer or {}))
        if what == "sglang_startup_facts":
            return dict(copy.deepcopy(BOOT), **(answer or {}))
        return {} if answer is None else answer

    def execute_module(self, module_name, module_args, task_vars):
        name = module_name.rsplit(".", 1)[-1]
        self.sent.append((name, copy.deepcopy(module_args)))
        what = name
        if name == "kv_trial" and "run_id" in module_args:
            self.run_ids.add(module_args["run_id"])
            what = " ".join([name, module_args["state"]] + ([module_args["value"]] if "value" in module_args else []))
        elif name == "kv_trial":   # a neighbour's, restarted on its own value
            what = "kv_trial %s of %s" % (module_args["state"], module_args["unit"])
        return self.answer(what, module_args)


class Link(object):
    """The other nodes of a server, scripted like the host (``nodes join``, ``nodes tell``, ...)."""

    def __init__(self, host):
        self.host = host
        self.released = None

    def perform(self, step):
        self.host.sent.append(("nodes", copy.deepcopy(step)))
        return self.host.answer("nodes " + step["nodes"], step)

    def release(self, message):
        self.host.sent.append(("nodes", copy.deepcopy(message)))
        self.host.answer("nodes release", message)
        self.released = message


def run_case(case, monkeypatch):
    host = Host(case["host"])
    task = mock.MagicMock()
    task.args = dict({"api_key": API_KEY}, **(case.get("args") or {}))
    task.async_val = False
    task.check_mode = bool(case.get("check_mode"))
    task._uuid = "task-uuid"
    connection = mock.MagicMock()
    connection._shell.tmpdir = None
    action = kv_tune_action.ActionModule(task, connection, PlayContext(), loader=None, templar=None)
    action._execute_module = host.execute_module
    action._remove_tmp_path = lambda path: None
    action._early_needs_tmp_path = lambda: False
    links = []
    monkeypatch.setattr(kv_tune_action, "NodeLink", lambda *a, **k: links.append(Link(host)) or links[-1])
    monkeypatch.setattr(kv_tune_action, "NodeChannel", lambda *a, **k: None)
    monkeypatch.setattr(kv_tune_action, "stop_children", lambda *a, **k: host.stopped.set() or [4242])
    said, warned = [], []
    monkeypatch.setattr(kv_tune_action.display, "display", said.append)
    monkeypatch.setattr(kv_tune_action.display, "warning", warned.append)
    controller = [case.get("controller_gone_after")]
    parent = kv_tune_action.os.getppid()

    def getppid():
        # The controller's pid until the given number of calls were made; then another (ansible-playbook died).
        return parent if controller[0] is None or len(host.calls) < controller[0] else 1
    monkeypatch.setattr(kv_tune_action.os, "getppid", getppid)
    hostvars = {name: {"kv_tune_outcome": outcome} for name, outcome in (case.get("hostvars") or {}).items()}
    task_vars = {"inventory_hostname": case.get("inventory_hostname", "gpu1"), "hostvars": hostvars}
    if case.get("raises"):
        with pytest.raises(RuntimeError, match=case["raises"]):
            action.run(task_vars=task_vars)
        result = None
    else:
        result = action.run(task_vars=task_vars)
    return host, result, said, warned, links


def subset(expected, actual, where="result"):
    """Dicts as subsets, lists item by item, msg and line as substrings, anything else equal."""
    if isinstance(expected, dict):
        assert isinstance(actual, dict), "%s: %r is not a dict" % (where, actual)
        for key, value in expected.items():
            assert key in actual, "%s: no %s in %s" % (where, key, sorted(actual))
            subset(value, actual[key], "%s.%s" % (where, key))
    elif isinstance(expected, list):
        assert isinstance(actual, list) and len(actual) == len(expected), "%s: %r" % (where, actual)
        for number, (item, found) in enumerate(zip(expected, actual)):
            subset(item, found, "%s[%d]" % (where, number))
    elif isinstance(expected, str) and where.endswith(("msg", "line")):
        assert expected in (actual or ""), "%s: %r not in %r" % (where, expected, actual)
    else:
        assert expected == actual, "%s: %r != %r" % (where, expected, actual)


@pytest.mark.parametrize("case", CASES, ids=[case["id"] for case in CASES])
def test_kv_tune_action(case, monkeypatch):
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    host, result, said, warned, links = run_case(case, monkeypatch)
    assert {signum: signal.getsignal(signum) for signum in handlers} == handlers   # Ansible's again once it ends
    assert host.calls == [entry[0] if isinstance(entry, list) else entry for entry in case["host"]]
    if result is not None:
        subset(case["result"], result)
    for line in case.get("said", []):
        assert any(line in text for text in said), "no line says %r:\n%s" % (line, "\n".join(said))
    for line in case.get("warned", []):
        assert any(line in text for text in warned), "no warning says %r: %s" % (line, warned)
    if case.get("released") is not None:
        subset(case["released"], links[-1].released, "released")
    if case.get("run_id") is not None:
        assert host.run_ids == {case["run_id"]}
    assert all(seconds < 3 for seconds in host.blocked), host.blocked   # cut short within seconds, not at its end
    leaked = [where for where, what in [("result", result), ("said", said), ("warned", warned)] + host.sent
              if where not in TAKE_THE_KEY and API_KEY in json.dumps(what, default=str)]
    assert not leaked, "the API key reached %s" % leaked
    if any(where == "sglang_ready" for where, _args in host.sent):   # the sweep has something to find
        assert any(args.get("api_key") == API_KEY for where, args in host.sent if where == "sglang_ready")

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Data-driven unit tests of the collection's modules (in the manner of community.general's UTHelper).

A module's cases live in a YAML file beside its test (test_gpu_info.py -> test_gpu_info.yaml), as a list of:

  id:      the case's name in pytest's output
  input:   the module's arguments (internal ones such as _ansible_check_mode too)
  output:  what the result must hold. Every key given is compared with the result's: dicts as subsets (recursively),
           lists item by item, anything else with == (a bool only equals a bool). `msg` is a substring of the
           result's msg. A failure is `failed: true` with a msg; without `failed: true` the module must not fail.
           The module's warnings (AnsibleModule.warn) are in the result as `warnings`.
  mocks:
    run_command:  the commands the module runs, in order: command (the exact argv list), environ_update (compared
                  when given), then rc, out, err (0, "", "" when left out).
    open_url:     the HTTP requests it makes, in order: method (GET), url, body (a subset of the JSON body, when
                  given), headers (a subset, names in any case, when given), then the answer: response: {status
                  (200), body (a dict or list goes out as JSON)}, or raise: connection_refused | timeout |
                  remote_disconnected. A status of 400 or more raises urllib's HTTPError, as open_url and urllib do.
    get_bin_path: {name: path or null}; any other name is found at /usr/bin/<name>.
    Other keys are for the test itself (test_gpu_info.py reads `nvml`).

Each call must be the next one expected of its kind; any other call fails the test (the mock raises UnexpectedCall,
which no `except Exception` in a module swallows), and so does an expected call never made. An entry with
`repeat: true` is not consumed: it answers that call any number of times, in any order, and must be made at least
once (for calls from a module's sampling thread, made as often as the thread gets to run).

In strings, $FIXTURES stands for the path of tests/fixtures; a whole string "@file:<path under tests/fixtures>" is
that file's text, and "@json:<path>" its parsed JSON.

Use:

    @pytest.mark.parametrize("case", uthelper.cases(__file__))
    def test_gpu_info(case):
        uthelper.run_case(gpu_info, case)

run_case(module, case, http_targets=("open_url",)) runs module.main() once with the case's arguments and mocks,
checks everything above and returns the result. http_targets names where the fake HTTP goes: an attribute of the
module (patched where the module has it), or an (object, attribute) pair, which must exist. The fake answers both
open_url(url, data, headers, method, ...) and a urllib opener's .open(request, timeout=...).
"""
from __future__ import annotations

import contextlib
import http.client
import io
import json
import threading
import urllib.error
from pathlib import Path
from unittest import mock

import pytest
import yaml

from ansible.module_utils import basic
from ansible.module_utils.common.parameters import PASS_VARS
from ansible.module_utils.testing import patch_module_args

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"

# What `raise:` in an open_url mock throws, as urllib throws it (a refused connect is wrapped, a read error is not).
HTTP_ERRORS = {
    "connection_refused": lambda: urllib.error.URLError(ConnectionRefusedError(111, "Connection refused")),
    "timeout": lambda: TimeoutError("timed out"),
    "remote_disconnected": lambda: http.client.RemoteDisconnected("Remote end closed connection without response"),
}


# --------------------------------------------------------------------------------------------------
# Cases
# --------------------------------------------------------------------------------------------------

def _expand(value):
    if isinstance(value, dict):
        return {key: _expand(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_expand(item) for item in value]
    if isinstance(value, str):
        if value.startswith("@file:"):
            return (FIXTURES / value[len("@file:"):]).read_text()
        if value.startswith("@json:"):
            return json.loads((FIXTURES / value[len("@json:"):]).read_text())
        return value.replace("$FIXTURES", str(FIXTURES))
    return value


def cases(test_file: str, extra_keys=()) -> list:
    """The cases of the YAML file beside ``test_file``, as pytest params named by their id. ``extra_keys``: keys the
    test itself reads (files a module must leave, say)."""
    path = Path(test_file).with_suffix(".yaml")
    with path.open() as handle:
        loaded = yaml.safe_load(handle)
    params = []
    allowed = {"id", "input", "output", "mocks"} | set(extra_keys)
    for case in loaded:
        unknown = set(case) - allowed
        if "id" not in case or unknown:
            raise ValueError("%s: a case needs an id and only %s: %r" % (path.name, ", ".join(sorted(allowed)), case))
        params.append(pytest.param(_expand(case), id=case["id"]))
    return params


# --------------------------------------------------------------------------------------------------
# Comparison
# --------------------------------------------------------------------------------------------------

def _short(value, limit: int = 300) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def differences(expected, actual, where: str = "result") -> list:
    """Where ``actual`` differs from ``expected``: dicts as subsets, lists item by item, the rest with ==."""
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return ["%s: expected a dict, got %s" % (where, _short(actual))]
        found = []
        for key, value in expected.items():
            if key not in actual:
                found.append("%s.%s: missing (expected %s)" % (where, key, _short(value)))
            else:
                found += differences(value, actual[key], "%s.%s" % (where, key))
        return found
    if isinstance(expected, list):
        if not isinstance(actual, list) or len(actual) != len(expected):
            return ["%s: expected %s, got %s" % (where, _short(expected), _short(actual))]
        found = []
        for position, (value, item) in enumerate(zip(expected, actual)):
            found += differences(value, item, "%s[%d]" % (where, position))
        return found
    same = expected == actual
    if isinstance(expected, bool) or isinstance(actual, bool):
        same = same and type(expected) is type(actual)
    return [] if same else ["%s: expected %s, got %s" % (where, _short(expected), _short(actual))]


# --------------------------------------------------------------------------------------------------
# Mocks
# --------------------------------------------------------------------------------------------------

class UnexpectedCall(BaseException):
    """A call no mock expects: a BaseException, so that a module's `except Exception` lets it through."""


class ExpectedCalls:
    """One kind of call (run_command, open_url): entries consumed in order, `repeat: true` ones answer any time."""

    def __init__(self, kind: str, entries: list, matches):
        self.kind, self.matches = kind, matches
        self.queue = [entry for entry in entries if not entry.get("repeat")]
        self.repeat = [entry for entry in entries if entry.get("repeat")]
        self.repeat_used = set()
        self.problems = []
        self.lock = threading.Lock()  # modules may call from several threads

    def take(self, call: dict) -> dict:
        with self.lock:
            if self.queue and self.matches(self.queue[0], call):
                return self.queue.pop(0)
            for position, entry in enumerate(self.repeat):
                if self.matches(entry, call):
                    self.repeat_used.add(position)
                    return entry
            problem = "unexpected %s call %s; the next one expected is %s" % (
                self.kind, _short(call), _short(self.queue[0]) if self.queue else "none")
            self.problems.append(problem)
        raise UnexpectedCall(problem)

    def leftovers(self) -> list:
        found = list(self.problems)
        found += ["%s call expected but not made: %s" % (self.kind, _short(entry)) for entry in self.queue]
        found += ["%s call (repeat) expected but never made: %s" % (self.kind, _short(entry))
                  for position, entry in enumerate(self.repeat) if position not in self.repeat_used]
        return found


def _command_matches(entry: dict, call: dict) -> bool:
    if "command" not in entry:
        raise ValueError("a run_command mock needs a command: %r" % (entry,))
    command = call["command"]
    if isinstance(command, (list, tuple)):
        command = [str(part) for part in command]
    if command != entry["command"]:
        return False
    return "environ_update" not in entry or entry["environ_update"] == call["environ_update"]


def _request_matches(entry: dict, call: dict) -> bool:
    if "url" not in entry:
        raise ValueError("an open_url mock needs a url: %r" % (entry,))
    if entry.get("method", "GET").upper() != call["method"] or entry["url"] != call["url"]:
        return False
    if "body" in entry and differences(entry["body"], call["body"]):
        return False
    headers = {name.lower(): value for name, value in call["headers"].items()}
    return all(headers.get(name.lower()) == value for name, value in (entry.get("headers") or {}).items())


class FakeResponse(io.BytesIO):
    """What open_url and urllib return: read(), getcode(), status, headers, a context manager."""

    def __init__(self, url: str, status: int, data: bytes):
        super().__init__(data)
        self.url, self.status, self.code = url, status, status
        self.headers = http.client.HTTPMessage()
        self.headers["Content-Type"] = "application/json"

    def getcode(self):
        return self.status

    def geturl(self):
        return self.url

    def info(self):
        return self.headers


class FakeHttp:
    """Stands in for ansible's open_url (called) and for a urllib opener (.open(request, timeout=...))."""

    def __init__(self, calls: ExpectedCalls):
        self.calls = calls

    def __call__(self, url, data=None, headers=None, method=None, **_kwargs):
        return self._answer(method or ("GET" if data is None else "POST"), url, data, headers or {})

    def open(self, fullurl, data=None, timeout=None):  # pylint: disable=unused-argument
        if isinstance(fullurl, str):
            return self._answer("GET" if data is None else "POST", fullurl, data, {})
        return self._answer(fullurl.get_method(), fullurl.full_url, fullurl.data, dict(fullurl.header_items()))

    def _answer(self, method, url, data, headers):
        body = data.decode() if isinstance(data, bytes) else data
        try:
            body = json.loads(body) if body else body
        except ValueError:
            pass
        entry = self.calls.take({"method": method.upper(), "url": url, "body": body, "headers": dict(headers)})
        if entry.get("raise"):
            raise HTTP_ERRORS[entry["raise"]]()
        response = entry.get("response") or {}
        status, answer = response.get("status", 200), response.get("body")
        if isinstance(answer, (dict, list)):
            answer = json.dumps(answer)
        payload = (answer or "").encode()
        if status >= 400:
            reason = http.client.responses.get(status, "Error")
            raise urllib.error.HTTPError(url, status, reason, http.client.HTTPMessage(), io.BytesIO(payload))
        return FakeResponse(url, status, payload)


# --------------------------------------------------------------------------------------------------
# Running a case
# --------------------------------------------------------------------------------------------------

def _module_args(case: dict) -> dict:
    """The case's input, and the result's `invocation` asked for where the core adds it only when asked (2.21:
    INJECT_INVOCATION; 2.19 always adds it and refuses the internal argument)."""
    args = dict(case.get("input") or {})
    if "inject_invocation" in PASS_VARS:
        args.setdefault("_ansible_inject_invocation", True)
    return args


def run_case(module, case: dict, http_targets=("open_url",)) -> dict:
    """Run ``module.main()`` with the case's input and mocks; fail the test on any difference; return the result."""
    mocks = case.get("mocks") or {}
    commands = ExpectedCalls("run_command", mocks.get("run_command") or [], _command_matches)
    requests = ExpectedCalls("open_url", mocks.get("open_url") or [], _request_matches)
    bin_paths = mocks.get("get_bin_path") or {}
    warnings = []

    def run_command(self, args, check_rc=False, environ_update=None, **_kwargs):
        entry = commands.take({"command": args, "environ_update": environ_update})
        rc, out, err = entry.get("rc", 0), entry.get("out", ""), entry.get("err", "")
        if check_rc and rc != 0:
            self.fail_json(cmd=args, rc=rc, stdout=out, stderr=err, msg=err.strip() or out.strip())
        return rc, out, err

    def get_bin_path(self, arg, required=False, opt_dirs=None):  # pylint: disable=unused-argument
        path = bin_paths.get(arg, "/usr/bin/" + arg)
        if path is None and required:
            self.fail_json(msg='Failed to find required executable "%s" in paths: /usr/bin' % arg)
        return path

    def warn(self, warning, *args, **kwargs):  # pylint: disable=unused-argument
        warnings.append(warning)

    fake_http = FakeHttp(requests)
    stdout = io.StringIO()
    exit_code = crash = None
    with contextlib.ExitStack() as stack:
        stack.enter_context(patch_module_args(_module_args(case)))
        stack.enter_context(mock.patch.object(basic.AnsibleModule, "run_command", run_command))
        stack.enter_context(mock.patch.object(basic.AnsibleModule, "get_bin_path", get_bin_path))
        stack.enter_context(mock.patch.object(basic.AnsibleModule, "warn", warn))
        for target in http_targets:
            if isinstance(target, str) and not hasattr(module, target):
                continue  # the default, open_url, where a module has none
            owner, name = (module, target) if isinstance(target, str) else target
            stack.enter_context(mock.patch.object(owner, name, fake_http))
        stack.enter_context(contextlib.redirect_stdout(stdout))
        try:
            module.main()
        except SystemExit as exc:
            exit_code = exc.code
        except UnexpectedCall:
            crash = "the module stopped at the unexpected call"
    problems = commands.leftovers() + requests.leftovers()
    lines = [line for line in stdout.getvalue().splitlines() if line.strip()]
    if exit_code is None or not lines:
        problems.append(crash or "the module ended without exit_json or fail_json (exit code %r)" % exit_code)
        pytest.fail("case %s:\n  %s" % (case["id"], "\n  ".join(problems)), pytrace=False)
    result = json.loads(lines[-1])
    result["warnings"] = warnings
    problems += _check_output(case.get("output") or {}, result)
    if problems:
        pytest.fail("case %s:\n  %s" % (case["id"], "\n  ".join(problems)), pytrace=False)
    return result


def _check_output(expected: dict, result: dict) -> list:
    expected = dict(expected)
    problems = []
    if expected.pop("failed", False):
        if not result.get("failed"):
            problems.append("the module was expected to fail, it did not")
    elif result.get("failed"):
        return ["the module failed: %s" % result.get("msg")]
    if "msg" in expected:
        text = expected.pop("msg")
        if text not in str(result.get("msg")):
            problems.append("msg: %r is not in %r" % (text, result.get("msg")))
    return problems + differences(expected, result)

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The rollout's decisions (playbooks/rollout.yml, role rollout): what a failure in a phase means for the host, what
the host ended on, and the fleet summary. Pure: the role's tasks observe and execute, these functions decide.

A host goes through the phases in order: ``lock`` (the unit's tuning lock, so that no tune runs while the host is
upgraded, and the rollout does not start on a unit being tuned), ``gate_before`` (a real generation before anything
changes), ``drain`` (the
user's hook), ``upgrade`` (the roles of site.yml), ``gate_after`` (a real generation from the upgraded server),
``retune`` (the kv_tune role), ``undrain`` (the user's hook), then ``done``.
"""
from __future__ import annotations

import posixpath
import re
from typing import Any, Collection

from ansible_collections.llmserve.sglang.plugins.module_utils import checks
from ansible_collections.llmserve.sglang.plugins.module_utils.service import kv_pin
from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner import run_settings
from ansible_collections.llmserve.sglang.plugins.plugin_utils.unit_files import service_units
from ansible_collections.llmserve.sglang.plugins.module_utils.capacity.kv_search import value_text
from ansible_collections.llmserve.sglang.plugins.module_utils.service import server_args as sa

PHASES = ("lock", "gate_before", "drain", "upgrade", "gate_after", "retune", "undrain", "done")
# Phases in which the host may already run something else than before: a failure there rolls SGLang back.
CHANGED_PHASES = ("upgrade", "gate_after", "retune")
SUMMARY_KEYS = ("host", "status", "phase", "before", "after", "retune", "error", "line")
PHASE_TEXT = {
    "lock": "taking the unit's tuning lock",
    "gate_before": "the health gate before the upgrade",
    "drain": "the drain hook",
    "upgrade": "the upgrade (nvidia_driver, sglang, sglang_service)",
    "gate_after": "the health gate after the upgrade",
    "retune": "the re-tune (kv_tune)",
    "undrain": "the undrain hook",
}


class RolloutError(ValueError):
    """An input the decisions cannot use (an unknown phase, a bad rollout input)."""


# PEP 440 versions in their normal form (what pip prints and installs with ==): 0.5.10, 0.4.6.post5, 0.5.0rc2,
# 1!2.0.dev1, 0.5.9+cu128. Anything else (an empty string, a specifier, "0.5.9 && reboot") is not a version.
_PEP440 = re.compile(r"([0-9]+!)?[0-9]+(\.[0-9]+)*((a|b|rc)[0-9]+)?(\.post[0-9]+)?(\.dev[0-9]+)?"
                     r"(\+[a-z0-9]+(\.[a-z0-9]+)*)?")
_UNIT = re.compile(r"^[A-Za-z0-9_.@-]+\.service$")
_URL = re.compile(r"^https?://[A-Za-z0-9.\[\]:_-]+(/[^\s]*)?$")
_SERIAL_PERCENT = re.compile(r"^([0-9]+(\.[0-9]+)?)%$")
# Seconds the gates and the roll-back's restart may wait: the tuner's own bound for a server's start.
MAX_WAIT_S = run_settings.BOUNDS["ready_timeout"][1]
MAX_INTERVAL_S = run_settings.BOUNDS["ready_interval"][1]
HOOKS = ("rollout_drain_tasks", "rollout_undrain_tasks")
# The inputs of playbooks/rollout.yml that check_inputs reads from each host's variables; an input a host does not
# set takes its role's default, which is valid (the unit tests check the defaults).
INPUTS = ("sglang_version", "nvidia_driver_branch", "nvidia_driver_version", "rollout_serial",
          "rollout_max_fail_percentage", "rollout_gate_timeout", "rollout_ready_timeout", "rollout_ready_interval",
          "rollout_unit", "rollout_url", "rollout_retune", "rollout_lock_lease", "rollout_hook_timeout") + HOOKS
# The sglang_service role's inputs that say which servers the upgrade's roles would restart on a host.
TOPOLOGY = ("sglang_service_name", "sglang_service_instances", "sglang_service_server_args")
# Seconds the rollout's lock on a unit lasts unless it is released (a controller that dies leaves it until then):
# at least ten minutes, at most a day (the tuner's own bound for a trial's revert).
LOCK_LEASE_S = (600, run_settings.BOUNDS["confirm_timeout"][1])


def hook_path(path: str, playbook_dir: str) -> str:
    """Where a hook's task file is on the controller: absolute, or relative to the playbook (the role's defaults)."""
    return posixpath.normpath(posixpath.join(playbook_dir, path))


def _serial_problem(serial: Any) -> str | None:
    """Why ``serial`` (Ansible's play keyword: a batch size, a percentage, or a list of them) is not a rollout's
    batches, or None. Ansible reads 0 as "all hosts at once": no canary."""
    batches = serial if isinstance(serial, list) else [serial]
    if not batches:
        return "must name at least one batch"
    for batch in batches:
        text = str(batch).strip()
        percent = _SERIAL_PERCENT.fullmatch(text)
        if percent:
            if not 0 < float(percent.group(1)) <= 100:
                return "a percentage must lie in (0, 100]%% (got %r)" % (batch,)
        elif isinstance(batch, bool) or not text.isdigit() or int(text) < 1:
            return "each batch must be a host count >= 1 or a percentage such as '25%%' (got %r)" % (batch,)
    return None


def _number_problem(value: Any, kind: type, low: float, high: float) -> str | None:
    try:
        number = checks.parse_number("", value, kind, RolloutError)
    except RolloutError:
        return "must be %s (got %r)" % ("a whole number" if kind is int else "a number", value)
    return None if low <= number <= high else "must lie in [%s, %s] (got %r)" % (low, high, value)


def input_problems(values: dict[str, Any], regular_files: Collection[str] = frozenset(),
                   playbook_dir: str = ".") -> list[str]:
    """What is wrong with one host's rollout inputs: a list of "name: why" (empty when all are valid). ``values``:
    the inputs of INPUTS that the host sets; ``regular_files``: the hook paths (hook_path) that are regular files on
    the controller, observed by the caller."""
    problems: list[str] = []

    def bad(name: str, why: str) -> None:
        problems.append("%s %s" % (name, why))

    if "sglang_version" in values and not _PEP440.fullmatch(str(values["sglang_version"])):
        bad("sglang_version", "must be an exact PEP 440 version such as 0.5.10 or 0.4.6.post5 (got %r)"
            % (values["sglang_version"],))
    branch = str(values.get("nvidia_driver_branch", ""))
    if "nvidia_driver_branch" in values and not re.fullmatch(r"[0-9]{3}", branch):
        bad("nvidia_driver_branch", "must be a driver branch such as '580' (got %r)" % (values["nvidia_driver_branch"],))
    version = str(values.get("nvidia_driver_version") or "")
    if version and not (re.fullmatch(r"[0-9]+\.[0-9]+(\.[0-9]+)?", version)
                        and (not branch or version.split(".", maxsplit=1)[0] == branch)):
        bad("nvidia_driver_version", "must be empty or an upstream version of the driver branch such as 580.105.08 "
            "(got %r)" % (version,))
    if "rollout_serial" in values:
        why = _serial_problem(values["rollout_serial"])
        if why:
            bad("rollout_serial", why)
    for name, kind, low, high in (("rollout_max_fail_percentage", float, 0, 100),
                                  ("rollout_gate_timeout", int, 1, MAX_WAIT_S),
                                  ("rollout_ready_timeout", int, 1, MAX_WAIT_S),
                                  ("rollout_ready_interval", int, 1, MAX_INTERVAL_S),
                                  ("rollout_lock_lease", int) + LOCK_LEASE_S,
                                  ("rollout_hook_timeout", int, 10, MAX_WAIT_S)):
        if name in values:
            why = _number_problem(values[name], kind, low, high)
            if why:
                bad(name, why)
    if "rollout_unit" in values and not _UNIT.fullmatch(str(values["rollout_unit"])):
        bad("rollout_unit", "must be a systemd service name such as sglang.service (got %r)" % (values["rollout_unit"],))
    if "rollout_url" in values and not _URL.fullmatch(str(values["rollout_url"])):
        bad("rollout_url", "must be an http:// or https:// URL such as http://127.0.0.1:30000 (got %r)"
            % (values["rollout_url"],))
    if "rollout_retune" in values:
        try:
            checks.parse_bool("rollout_retune", values["rollout_retune"], RolloutError)
        except RolloutError:
            bad("rollout_retune", "must be true or false (got %r)" % (values["rollout_retune"],))
    hooks = {name: str(values.get(name) or "") for name in HOOKS}
    for name, path in hooks.items():
        if path and hook_path(path, playbook_dir) not in regular_files:
            bad(name, "must be empty or a task file on the controller, absolute or relative to the playbook: %s is not "
                "a regular file" % hook_path(path, playbook_dir))
    if hooks["rollout_drain_tasks"] and not hooks["rollout_undrain_tasks"]:
        bad("rollout_drain_tasks", "is set without rollout_undrain_tasks: every upgraded host would stay drained")
    problems += topology_problems(values)
    return problems


def _nodes(args: Any) -> int:
    """--nnodes of a server's arguments (1 when not given or not a number: the role's own check names those)."""
    found = {sa.canonical(key): value for key, value in (args or {}).items()} if isinstance(args, dict) else {}
    try:
        return int(found.get("nnodes") or 1)
    except (TypeError, ValueError):
        return 1


def topology_problems(values: dict[str, Any]) -> list[str]:
    """What rollout.yml does not handle on a host, from the sglang_service role's inputs it sets: several servers
    (the upgrade's roles restart every one of them, and the rollout gates, locks and re-tunes only rollout_unit),
    and a server that spans hosts (its nodes must change together). A list of "name why", like input_problems."""
    name = values.get("sglang_service_name", "sglang")
    instances = values.get("sglang_service_instances") or []
    try:
        units = service_units.unit_names(instances, name)
    except service_units.ServiceUnitsError as exc:
        return ["sglang_service_instances %s" % exc]
    unit = str(values.get("rollout_unit") or "%s.service" % name)
    problems: list[str] = []
    if len(units) > 1:
        problems.append("sglang_service_instances gives this host the servers %s, and rollout.yml upgrades exactly "
                        "one server per host (rollout_unit %s): the others would restart on the new release with "
                        "no lock, gate or re-tune. Not handled yet: upgrade such hosts with site.yml, then "
                        "tune_kv.yml" % (", ".join(units), unit))
    spans = [(label, _nodes(args)) for label, args in
             [("sglang_service_server_args", values.get("sglang_service_server_args"))]
             + [("sglang_service_instances[%d].server_args" % i, inst.get("server_args"))
                for i, inst in enumerate(instances) if isinstance(inst, dict)]]
    for label, nodes in spans:
        if nodes > 1:
            problems.append("%s sets nnodes %d: a server that spans hosts must change on all its nodes together, "
                            "which rollout.yml does not do yet; upgrade its nodes with site.yml, then tune_kv.yml"
                            % (label, nodes))
    return problems


def check_inputs(host_values: dict[str, dict[str, Any]], regular_files: Collection[str] = frozenset(),
                 playbook_dir: str = ".") -> dict[str, Any]:
    """Every host's rollout inputs (``host_values``: {host: the inputs it sets}) checked before any host is touched.
    Returns {hosts, sglang_versions}; raises RolloutError naming each bad input and the hosts that have it."""
    hosts_of: dict[str, list[str]] = {}
    for host in sorted(host_values):
        for problem in input_problems(host_values[host], regular_files, playbook_dir):
            hosts_of.setdefault(problem, []).append(host)
    if hosts_of:
        raise RolloutError("Invalid input for playbooks/rollout.yml, nothing was done: " + "; ".join(
            "%s (%s)" % (problem, ", ".join(hosts)) for problem, hosts in sorted(hosts_of.items())))
    versions = sorted({str(values["sglang_version"]) for values in host_values.values() if "sglang_version" in values})
    return {"hosts": len(host_values), "sglang_versions": versions}


def _check_phase(phase: str) -> None:
    if phase not in PHASES:
        raise RolloutError("unknown rollout phase %r (known: %s)" % (phase, ", ".join(PHASES)))


def rescue_plan(phase: str, before: dict[str, Any] | None = None) -> dict[str, Any]:
    """What the rescue does after a failure in ``phase``, given ``before`` (the kv_fingerprint result recorded before
    the upgrade): ``roll_back`` (reinstall ``version``, the SGLang version recorded then, and restart) when the
    failure came after the upgrade began; ``undrain`` (call the undrain hook once the host serves again) when the
    drain hook had started and the failure was not the undrain hook itself; ``gate`` (check a real generation)
    whenever anything was rolled back or is to be undrained; ``no_record``: a roll-back was due, but no version was
    recorded to return to (the host is then left as it is, and says so). With a roll-back, ``pin``: the kv_trial
    arguments that put back the pin verified on the release it restores (:func:`pin_restore`), written after the
    reinstall and before the restart, and ``restart``: whether the role restarts the unit itself (kv_trial's reset
    restarts it)."""
    _check_phase(phase)
    version = _versions(before)["sglang"]
    due = phase in CHANGED_PHASES
    roll_back = due and bool(version)
    undrain = phase in ("drain",) + CHANGED_PHASES
    pin = pin_restore(before) if roll_back else None
    return {"phase": phase, "roll_back": roll_back, "version": version if roll_back else None,
            "undrain": undrain, "gate": roll_back or undrain, "no_record": due and not version,
            "pin": pin, "restart": roll_back and (pin or {}).get("state") != "reset"}


def pin_restore(before: dict[str, Any] | None) -> dict[str, Any] | None:
    """The kv_trial arguments that make the unit's pin the one recorded ``before`` the upgrade (its kv_fingerprint
    result): that entry committed again (drop-in and fact, no restart), or the pin reset where there was none (a
    re-tune on the new release may have pinned a value no load verified on the old one). None where the pin then
    could not be read (``pin_error``): it is left as it is."""
    before = before or {}
    if before.get("pin_error"):
        return None
    entry = before.get("pin")
    if entry is None:
        return {"state": "reset"}
    if kv_pin.check_entry(entry) is not None:
        return None
    text = entry.get("text") or value_text(entry["mem_fraction_static"])
    return {"state": "committed", "value": text, "fact": entry}


def _versions(fingerprint_result: dict[str, Any] | None) -> dict[str, Any]:
    """{sglang, driver, model} of a kv_fingerprint result (None where unknown)."""
    fp = (fingerprint_result or {}).get("fingerprint") or {}
    versions, model = fp.get("versions") or {}, fp.get("model") or {}
    return {"sglang": versions.get("sglang"), "driver": versions.get("driver"), "model": model.get("path")}


def _state_text(state: dict[str, Any]) -> str:
    parts = ["SGLang %s" % (state.get("sglang") or "?")]
    if state.get("driver"):
        parts.append("driver %s" % state["driver"])
    if state.get("model"):
        parts.append("model %s" % state["model"])
    return ", ".join(parts)


def _short(text: Any, limit: int = 400) -> str:
    text = " ".join(str(text or "").split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def outcome(host: str, phase: str, before: dict[str, Any] | None = None, after: dict[str, Any] | None = None,
            failure: dict[str, Any] | None = None, plan: dict[str, Any] | None = None,
            rollback: dict[str, Any] | None = None, gate: dict[str, Any] | None = None,
            retune: dict[str, Any] | None = None) -> dict[str, Any]:
    """The host's rollout outcome, from what the tasks observed.

    ``phase``: the phase the host reached (``done`` after the whole block); ``before``/``after``: kv_fingerprint
    results before the upgrade and at the end; ``failure``: {task, msg} of the failed task (the rescue's
    ansible_failed_task/result); ``plan``: rescue_plan's answer; ``rollback``: {failed, msg} of the roll-back
    (None when none ran); ``gate``: the sglang_ready result after the rescue; ``retune``: the kv_tune result.
    Returns {host, status, phase, before, after, retune, error, failed, msg, line}; ``failed`` says whether the
    host must fail, ``msg`` what it fails with."""
    _check_phase(phase)
    was, now = _versions(before), _versions(after)
    if not (after or {}).get("fingerprint"):
        now = dict(was) if phase in ("lock", "gate_before", "drain") else now
    retune = retune or {}
    row: dict[str, Any] = {"host": host, "phase": phase, "before": was, "after": now, "retune": retune.get("status"),
                           "retune_why": retune.get("why")}
    if phase == "done":
        changed = was != now
        row.update(status="upgraded" if changed else "unchanged", failed=False, error=None)
        what = ("%s -> %s" % (_state_text(was), _state_text(now))) if changed else "keeps %s" % _state_text(now)
        tune = ("; re-tune: %s" % retune["status"]) if retune.get("status") else ""
        row["msg"] = row["line"] = "%s: %s%s" % (host, what, tune)
        return row
    failure = failure or {}
    error = "%s failed%s: %s" % (PHASE_TEXT.get(phase, phase),
                                 (" (task '%s')" % failure["task"]) if failure.get("task") else "",
                                 _short(failure.get("msg") or "no message"))
    plan = plan or {}
    serving = bool((gate or {}).get("ready"))
    if plan.get("roll_back"):
        if rollback and rollback.get("failed"):
            # What the host runs and whether it answers, read after the failed roll-back, not assumed.
            status = "rollback_failed"
            end = "the roll-back to SGLang %s failed too (%s); the host runs %s and %s" % (
                plan["version"], _short(rollback.get("msg")), _state_text(now),
                "serves (a real generation answered)" if serving else "is NOT serving (%s)" % (
                    (gate or {}).get("reason") or "not checked"))
        elif serving:
            status = "rolled_back"
            end = "rolled back: back on %s and serving" % _state_text(dict(now, sglang=now["sglang"] or plan["version"]))
        else:
            status = "rollback_failed"
            end = "rolled back to SGLang %s, but it does not answer a real generation (%s); the host is NOT serving" \
                  % (plan["version"], (gate or {}).get("reason") or "not checked")
    elif phase == "lock":
        status = "not_upgraded"
        end = "nothing was changed: another run holds the unit"
    elif phase == "gate_before":
        status = "not_upgraded"
        end = "nothing was changed: it did not serve before the upgrade"
    elif phase == "drain":
        status = "not_upgraded"
        end = "nothing was upgraded: still on %s%s" % (_state_text(was), "" if serving else ", NOT serving")
    elif phase == "undrain":
        status = "undrain_failed"
        end = "upgraded to %s and serving, but still drained" % _state_text(now)
    else:
        status = "rollback_failed"
        end = "no SGLang version was recorded before the upgrade, so nothing was rolled back: left on %s" % \
              _state_text(now)
    row.update(status=status, failed=True, error=error)
    row["msg"] = "%s: %s; %s." % (host, error, end)
    row["line"] = "%s: FAILED in %s; %s" % (host, phase, end)
    return row


def summary_rows(outcomes: dict[str, Any], pending: Collection[str] = ()) -> list[dict[str, Any]]:
    """The fleet summary: one row per host of ``outcomes`` (host -> its outcome, None when the host never got to
    record one: unreachable, or in a batch that has not run: ``pending``)."""
    rows: list[dict[str, Any]] = []
    for host in sorted(outcomes):
        res = outcomes[host]
        if res:
            rows.append({key: res.get(key) for key in SUMMARY_KEYS})
        elif host in pending:
            rows.append({"host": host, "status": "not_started",
                         "line": "%s: NOT STARTED (a later batch; the rollout stops at a batch with a failed host)"
                                 % host})
        else:
            rows.append({"host": host, "status": "unknown",
                         "line": "%s: NO OUTCOME (unreachable, or failed before the rollout began on it)" % host})
    return rows


def failed_row(row: dict[str, Any]) -> bool:
    """Whether a summary row is a host the rollout did not leave upgraded or as it was (rolled back, not upgraded, a
    rollback or undrain that failed, no outcome)."""
    return row["status"] not in ("upgraded", "unchanged", "not_started")

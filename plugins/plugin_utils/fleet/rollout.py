# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The rollout's decisions (playbooks/rollout.yml, role rollout): what a failure in a phase means for the host's
servers (re-tune them for the new release, or roll the host back), what each server ended on, and the fleet summary.
Pure: the role's tasks observe and execute, these functions decide. Its inputs are checked in rollout_inputs.py.

A host goes through the phases in order, all its servers (rollout_units) together, since they share its SGLang:
``lock`` (each unit's tuning lock, so that no tune runs while the host is upgraded, and the rollout does not start
on a unit being tuned), ``gate_before`` (each server's fingerprint and a real generation before anything changes),
``drain`` (the user's hook), ``upgrade`` (the roles of site.yml), ``gate_after`` (a real generation from each
upgraded server), ``retune`` (the kv_tune role, the host's servers together), ``undrain`` (the user's hook), then
``done``.
"""
from __future__ import annotations

from typing import Any, Collection, Sequence

from ansible_collections.llmserve.sglang.plugins.module_utils.capacity.kv_search import value_text
from ansible_collections.llmserve.sglang.plugins.module_utils.service import kv_pin
from ansible_collections.llmserve.sglang.plugins.module_utils.service.host_units import target_label, unit_outcome
from ansible_collections.llmserve.sglang.plugins.plugin_utils.fleet.multinode import ECHO_KINDS
from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner.start_value import failed_start

PHASES = ("lock", "gate_before", "drain", "upgrade", "gate_after", "retune", "undrain", "done")
# Phases in which the host may already run something else than before: a failure there rolls SGLang back, unless it
# is one a value of --mem-fraction-static fixes (RETUNE_PHASES).
CHANGED_PHASES = ("upgrade", "gate_after", "retune")
# Phases in which a server that does not start, or stops, on the new release with its old pin is re-tuned for it
# when the failure is a lack of memory (failure_cause); a failure of the re-tune itself rolls back.
RETUNE_PHASES = ("upgrade", "gate_after")
SUMMARY_KEYS = ("host", "server", "unit", "status", "phase", "before", "after", "pin_before", "pin_after", "retune",
                "cause", "error", "line")
# Statuses of a server that the rollout left upgraded or as it was.
GOOD_STATUSES = ("upgraded", "retuned", "unchanged", "not_started")
PHASE_TEXT = {
    "lock": "taking the units' tuning locks",
    "gate_before": "the health gate before the upgrade",
    "drain": "the drain hook",
    "upgrade": "the upgrade (nvidia_driver, sglang, sglang_service)",
    "gate_after": "the health gate after the upgrade",
    "retune": "the re-tune (kv_tune)",
    "undrain": "the undrain hook",
}


class RolloutError(ValueError):
    """An input the decisions cannot use (an unknown phase)."""


def _check_phase(phase: str) -> None:
    if phase not in PHASES:
        raise RolloutError("unknown rollout phase %r (known: %s)" % (phase, ", ".join(PHASES)))


def per_unit(results: Any) -> dict[str, dict[str, Any]]:
    """{unit: result} of the results a role's loop over rollout_units registered (each names its unit as ``item``,
    or as ``unit``); a result without either is skipped. None gives {}."""
    found: dict[str, dict[str, Any]] = {}
    for res in results or []:
        unit = _unit_of(res)
        if unit:
            found[unit] = res
    return found


def failed_starts(service_failed: Any, gate_results: Any) -> dict[str, str]:
    """{unit: the InvocationID of its start seen failing}: by sglang_service's wait (``service_failed``: its
    ``sglang_service_failed_starts``, unit -> id) or by the rollout's gate (``gate_results``: sglang_ready's loop
    results, with ``failed_invocation_id``; the later word). The rescue reads that start's own log: systemd may have
    begun another start of the unit since (RestartSec), whose log says nothing yet, and a lack of memory read as "no
    failure" would roll back what a re-tune keeps."""
    found = {str(unit): str(start) for unit, start in (service_failed if isinstance(service_failed, dict) else {}).items()
             if start}
    for unit, res in per_unit(gate_results).items():
        if res.get("failed_invocation_id"):
            found[unit] = str(res["failed_invocation_id"])
    return found


def _unit_of(res: Any) -> str | None:
    """The unit a loop's result is about: its item (a unit, or a loop's earlier result over the units) or unit."""
    if not isinstance(res, dict):
        return None
    item = res.get("item") or res.get("unit")
    if isinstance(item, dict):
        return _unit_of(item)
    return str(item) if item else None


def failure_cause(boots: Any, node_boots: dict[str, Any] | None = None) -> dict[str, Any]:
    """Whether the host's servers failed on the new release for a lack of memory, from their last starts' logs
    (``boots``: sglang_startup_facts per unit, as a loop registers them; ``node_boots``: host -> such results of
    each node of a server that spans hosts, this host's included, instead): ``memory`` when at least one server's
    last start ran out of memory in a way a value of --mem-fraction-static fixes (the tuner's own rule for a pin
    that no longer starts, start_value.failed_start) and no other failed for another reason. On a server that spans
    hosts, a node's lost connection (nccl_error) beside another node's lack of memory is only its echo. Anything
    else (a crash, an import error, weights that do not fit, a gate that failed with no failure in any log) is not.
    Returns {memory, why}."""
    starts = list(per_unit(boots).items()) if node_boots is None else [
        ("%s %s" % (host, unit), boot) for host, results in node_boots.items() for unit, boot in per_unit(results).items()]
    memory: list[str] = []
    other: list[str] = []
    echoes: list[str] = []
    for label, boot in starts:
        failure = boot.get("failure") or {}
        if not failure.get("kind"):
            continue
        text = ("%s: %s: %s" % (label, failure["kind"], _short(failure.get("line"), 160))).rstrip(": ")
        if failed_start(boot, label, "") is None:
            memory.append(text)
        elif node_boots is not None and failure["kind"] in ECHO_KINDS:
            echoes.append(text)
        else:
            other.append(text)
    if other or (echoes and not memory):
        return {"memory": False, "why": "not a lack of memory (%s)" % "; ".join(other + echoes)}
    if memory:
        return {"memory": True, "why": "a lack of memory on the old pin (%s)" % "; ".join(memory)}
    return {"memory": False, "why": "no server's startup log shows a failure a value of --mem-fraction-static fixes"}


def peers_state(host: str, nodes: Sequence[str], peers: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """What the other nodes of ``host``'s server (``nodes``: its hosts by rank; ``peers``: host -> the rollout's
    variables there, with ``failed``: {msg} where a task of it failed) say at a step where every node waits for the
    others: ``failed``, each peer that failed ("host failed in phase P: msg"), and ``retuned``, whether every node
    kept the re-tune after a lack of memory. The nodes of a server change together, so a node stops where a peer
    failed, and keeps a re-tune only with all."""
    failed = []
    for peer in nodes:
        values = peers.get(peer) or {}
        if peer != host and values.get("failed"):
            failed.append("%s failed in phase %s: %s" % (peer, values.get("__rollout_phase", "?"),
                                                         _short(values["failed"].get("msg"), 200)))
    return {"failed": failed, "retuned": all((peers.get(peer) or {}).get("__rollout_retuned") for peer in nodes)}


def rescue_plan(phase: str, before: Any = None, boots: Any = None, retune: bool = True,
                node_boots: dict[str, Any] | None = None, cause: dict[str, Any] | None = None) -> dict[str, Any]:
    """What the rescue does after a failure in ``phase``, given ``before`` (kv_fingerprint per unit, recorded before
    the upgrade) and, for a failure in RETUNE_PHASES, ``boots`` (sglang_startup_facts per unit, read after it):

    - ``retune``: the servers failed for a lack of memory (``cause``, failure_cause) and ``retune`` (rollout_retune)
      allows it: stop those whose last start failed (``stop``), re-tune them all for the new release from a safe
      start (the kv_tune role), and roll back only when that fails (then ask again with phase ``retune``);
    - ``roll_back`` (reinstall ``version``, the SGLang version recorded before, put back each unit's pin,
      ``pins``: pin_restore per unit, and restart ``restart``, the units whose pin restore does not restart them)
      for any other failure after the upgrade began; ``no_record``: one was due, but no version was recorded to
      return to (the host is then left as it is, and says so);
    - ``undrain`` (call the undrain hook once every server serves again) when the drain hook had started and the
      failure was not the undrain hook itself; ``gate`` (check a real generation from each server) whenever
      anything was re-tuned, rolled back or is to be undrained.

    A node of a server that spans hosts gives ``node_boots`` (every node's, failure_cause), so that its nodes decide
    alike; ``cause``, when given, is kept as the plan's cause (a roll-back after the re-tune it asked for failed)."""
    _check_phase(phase)
    befores = per_unit(before)
    version = next((_versions(res)["sglang"] for res in befores.values() if _versions(res)["sglang"]), None)
    if cause is None and phase in RETUNE_PHASES:
        cause = failure_cause(boots, node_boots)
    retune_now = bool(phase in RETUNE_PHASES and cause and cause["memory"] and retune)
    due = phase in CHANGED_PHASES and not retune_now
    roll_back = due and bool(version)
    pins = {}
    if roll_back:
        pins = {unit: pin for unit, res in befores.items() if (pin := pin_restore(res)) is not None}
    restart = [unit for unit in befores if roll_back and pins.get(unit, {}).get("state") != "reset"]
    undrain = phase in ("drain",) + CHANGED_PHASES
    # The servers whose last start failed on the old pin: stopped before the re-tune (systemd would start them
    # again and again on the value that fails).
    stop = [unit for unit, boot in per_unit(boots).items() if ((boot or {}).get("failure") or {}).get("kind")]
    return {"phase": phase, "retune": retune_now, "stop": stop if retune_now else [], "cause": cause,
            "roll_back": roll_back,
            "version": version if roll_back else None, "undrain": undrain, "gate": roll_back or undrain or retune_now,
            "no_record": due and not version, "pins": [dict(pin, unit=unit) for unit, pin in pins.items()],
            "restart": restart}


def _entry_text(entry: dict[str, Any]) -> str:
    """The pinned value of a fact entry as written: its text, else the value's own shortest form."""
    return entry.get("text") or value_text(entry["mem_fraction_static"])


def pin_restore(before: dict[str, Any] | None) -> dict[str, Any] | None:
    """The kv_trial arguments that make a unit's pin the one recorded ``before`` the upgrade (its kv_fingerprint
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
    text = _entry_text(entry)
    return {"state": "committed", "value": text, "fact": entry}


def uncapped_pins(before: Any, on_disk: Any) -> list[dict[str, Any]]:
    """The pins whose pool cap (kv_tune_pin_tokens' max_total_tokens, sized for the cell of the release it was
    verified on) the upgrade's restart must not carry into the new release, as kv_trial arguments: each unit whose
    pin has a cap (``before``: kv_fingerprint per unit before the upgrade) and whose fingerprint on disk, once the new
    SGLang, driver or model is installed (``on_disk``: kv_fingerprint per unit then), is no longer the one the pin
    was verified with: {unit, value, fact}, the same entry without its cap. The re-tune then pins (and caps) anew;
    a roll-back puts the whole entry back (pin_restore)."""
    found = []
    now = per_unit(on_disk)
    for unit, res in per_unit(before).items():
        entry = (res or {}).get("pin")
        if not isinstance(entry, dict) or kv_pin.check_entry(entry) is not None or entry.get("max_total_tokens") is None:
            continue
        digest = (now.get(unit) or {}).get("fingerprint_hash")
        if digest and digest != entry.get("fingerprint_hash"):
            fact = {key: value for key, value in entry.items() if key != "max_total_tokens"}
            found.append({"unit": unit, "value": _entry_text(entry),
                          "fact": fact})
    return found


def _versions(fingerprint_result: dict[str, Any] | None) -> dict[str, Any]:
    """{sglang, driver, model} of a kv_fingerprint result (None where unknown)."""
    fp = (fingerprint_result or {}).get("fingerprint") or {}
    versions, model = fp.get("versions") or {}, fp.get("model") or {}
    return {"sglang": versions.get("sglang"), "driver": versions.get("driver"), "model": model.get("path")}


def pin_numbers(fingerprint_result: dict[str, Any] | None) -> dict[str, Any] | None:
    """{value, tokens} of the pin a kv_fingerprint result read (the value's text and the pool it was verified with),
    None when the unit had none."""
    entry = (fingerprint_result or {}).get("pin")
    if not isinstance(entry, dict) or kv_pin.check_entry(entry) is not None:
        return None
    return {"value": _entry_text(entry), "tokens": entry.get("tokens")}


def _pin_text(pin: dict[str, Any] | None) -> str:
    if not pin:
        return "no pin"
    return "%s (%s tokens)" % (pin["value"], "{:,}".format(pin["tokens"]) if pin.get("tokens") else "?")


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


def outcome(host: str, phase: str, units: Sequence[str] | None = None, before: Any = None, after: Any = None,
            failure: dict[str, Any] | None = None, plan: dict[str, Any] | None = None,
            rollback: dict[str, Any] | None = None, gate: Any = None, retune: dict[str, Any] | None = None,
            retuned: bool = False, retune_failure: dict[str, Any] | None = None,
            undrain_failure: dict[str, Any] | None = None) -> dict[str, Any]:
    """The host's rollout outcome, a row per server, from what the tasks observed.

    ``phase``: the phase the host reached (``done`` after the whole block), or failed in; ``units``: the host's
    servers (rollout_units); ``before``/``after``: kv_fingerprint per unit before the upgrade and at the end;
    ``failure``: the failed task (failure_text); ``plan``: rescue_plan's answer; ``rollback``: {failed, msg} of
    the roll-back (None when none ran); ``gate``: sglang_ready per unit after the rescue; ``retune``: the kv_tune
    result; ``retuned``: the re-tune the plan asked for after a lack of memory succeeded, ``retune_failure``: the
    task where it failed instead; ``undrain_failure``: the rescue's undrain hook failed there. Returns {host, failed,
    msg, line, rows}: ``failed`` says whether the host must fail, ``msg`` what it fails with, ``rows`` one per
    server (server_row)."""
    _check_phase(phase)
    befores, afters, gates = per_unit(before), per_unit(after), per_unit(gate)
    names = list(units or []) or list(befores) or list(afters) or ["?"]
    error = None
    if phase != "done":
        error = "%s failed%s" % (PHASE_TEXT.get(phase, phase), failure_text(failure))
        cause = (plan or {}).get("cause") or {}
        if retune_failure:
            error += "; %s, and the re-tune for the new release failed%s" % (cause.get("why"),
                                                                             failure_text(retune_failure))
        elif cause.get("why") and not cause.get("memory"):
            error += "; %s" % cause["why"]
        if undrain_failure:
            error += "; then the undrain hook failed%s" % failure_text(undrain_failure)
    everyone = bool(names) and all((gates.get(unit) or {}).get("ready") for unit in names)
    rows = [server_row(host, host if len(names) == 1 else target_label(host, unit), unit, phase,
                       befores.get(unit), afters.get(unit), error, plan, rollback, gates.get(unit),
                       unit_outcome(retune, unit) if retune else None, retuned and everyone and not undrain_failure,
                       drained=bool(undrain_failure))
            for unit in names]
    failed = [row for row in rows if row["failed"]]
    lines = "\n".join(row["line"] for row in rows)
    return {"host": host, "failed": bool(failed), "msg": "\n".join(row["msg"] for row in failed) or lines,
            "line": lines, "rows": rows}


def failure_text(failure: dict[str, Any] | None) -> str:
    """What a failed task said, from {task, result} (the rescue's ansible_failed_task's name and
    ansible_failed_result) or {task, msg}: its message, or for a loop, each failed item's (named by its item)."""
    failure = failure or {}
    result = failure.get("result") or {}
    items = [res for res in result.get("results") or [] if isinstance(res, dict) and res.get("failed")]
    if items:
        msg = "; ".join("%s: %s" % (_unit_of(res) or "?", res.get("msg") or res.get("reason") or "failed")
                        for res in items)
    else:
        msg = failure.get("msg") or result.get("msg") or "no message"
    return "%s: %s" % ((" (task '%s')" % failure["task"]) if failure.get("task") else "", _short(msg, 300))


def server_row(host: str, label: str, unit: str, phase: str, before: dict[str, Any] | None,
               after: dict[str, Any] | None, error: str | None, plan: dict[str, Any] | None,
               rollback: dict[str, Any] | None, gate: dict[str, Any] | None, retune: dict[str, Any] | None,
               kept: bool = False, drained: bool = False) -> dict[str, Any]:
    """One server's row: {host, server (its label: the host, or host/unit where it has several), unit, status, phase,
    before, after, pin_before, pin_after, retune, retune_why, cause, error, failed, msg, line}. ``error``: what
    failed on the host (outcome's); ``kept``: the re-tune after a lack of memory held and every server serves;
    ``drained``: the host is still drained (its undrain hook failed)."""
    was, now = _versions(before), _versions(after)
    if not (after or {}).get("fingerprint"):
        now = dict(was) if phase in ("lock", "gate_before", "drain") else now
    retune = retune or {}
    plan = plan or {}
    pins = {"pin_before": pin_numbers(before), "pin_after": pin_numbers(after)}
    row: dict[str, Any] = {"host": host, "server": label, "unit": unit, "phase": phase, "before": was, "after": now,
                           "retune": retune.get("status"), "retune_why": retune.get("why"),
                           "cause": (plan.get("cause") or {}).get("why"), **pins}
    pin_change = "pin %s -> %s" % (_pin_text(pins["pin_before"]), _pin_text(pins["pin_after"]))
    if phase == "done":
        changed = was != now
        row.update(status="upgraded" if changed else "unchanged", failed=False, error=None)
        what = ("%s -> %s" % (_state_text(was), _state_text(now))) if changed else "keeps %s" % _state_text(now)
        tune = ("; re-tune: %s, %s" % (retune["status"], pin_change)) if retune.get("status") else ""
        row["msg"] = row["line"] = "%s: %s%s" % (label, what, tune)
        return row
    serving = bool((gate or {}).get("ready"))
    if kept:
        row.update(status="retuned", failed=False, error=error)
        row["msg"] = row["line"] = "%s: %s -> %s; %s failed for %s: re-tuned for the new release, %s" % (
            label, _state_text(was), _state_text(now), PHASE_TEXT.get(phase, phase), plan["cause"]["why"], pin_change)
        return row
    if plan.get("retune") and not drained:
        status = "not_serving"
        end = "re-tuned for %s, but the host's servers do not all answer a real generation (this one: %s)" % (
            _state_text(now), "serves" if serving else (gate or {}).get("reason") or "not checked")
    elif plan.get("roll_back"):
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
            end = "rolled back to SGLang %s, but it does not answer a real generation (%s); the server is NOT " \
                  "serving" % (plan["version"], (gate or {}).get("reason") or "not checked")
    elif phase == "lock":
        status = "not_upgraded"
        end = "nothing was changed: another run holds the unit"
    elif phase == "gate_before":
        status = "not_upgraded"
        end = "nothing was changed: it did not serve before the upgrade"
    elif phase == "drain":
        status = "not_upgraded"
        end = "nothing was upgraded: still on %s%s" % (_state_text(was), "" if serving else ", NOT serving")
    elif phase == "undrain" or plan.get("retune"):
        status = "undrain_failed"
        end = "upgraded to %s and serving, but still drained" % _state_text(now)
    else:
        status = "rollback_failed"
        end = "no SGLang version was recorded before the upgrade, so nothing was rolled back: left on %s" % \
              _state_text(now)
    row.update(status=status, failed=True, error=error)
    row["msg"] = "%s: %s; %s." % (label, error, end)
    row["line"] = "%s: FAILED in %s; %s" % (label, phase, end)
    return row


def summary_rows(outcomes: dict[str, Any], pending: Collection[str] = ()) -> list[dict[str, Any]]:
    """The fleet summary: a row per server of ``outcomes`` (host -> its outcome, None when the host never got to
    record one: unreachable, or in a batch that has not run: ``pending``)."""
    rows: list[dict[str, Any]] = []
    for host in sorted(outcomes):
        res = outcomes[host]
        if res:
            rows.extend({key: row.get(key) for key in SUMMARY_KEYS} for row in res.get("rows") or [])
        elif host in pending:
            rows.append({"host": host, "server": host, "status": "not_started",
                         "line": "%s: NOT STARTED (a later batch; the rollout stops at a batch with a failed host)"
                                 % host})
        else:
            rows.append({"host": host, "server": host, "status": "unknown",
                         "line": "%s: NO OUTCOME (unreachable, or failed before the rollout began on it)" % host})
    return rows


def failed_row(row: dict[str, Any]) -> bool:
    """Whether a summary row is a server the rollout did not leave upgraded or as it was (rolled back, not upgraded,
    a roll-back or undrain that failed, not serving, no outcome)."""
    return row["status"] not in GOOD_STATUSES

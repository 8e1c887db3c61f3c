# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The rollout's decisions (playbooks/rollout.yml, role rollout): what a failure in a phase means for the host, what
the host ended on, and the fleet summary. Pure: the role's tasks observe and execute, these functions decide.

A host goes through the phases in order: ``gate_before`` (a real generation before anything changes), ``drain`` (the
user's hook), ``upgrade`` (the roles of site.yml), ``gate_after`` (a real generation from the upgraded server),
``retune`` (the kv_tune role), ``undrain`` (the user's hook), then ``done``.
"""
from __future__ import annotations

PHASES = ("gate_before", "drain", "upgrade", "gate_after", "retune", "undrain", "done")
# Phases in which the host may already run something else than before: a failure there rolls SGLang back.
CHANGED_PHASES = ("upgrade", "gate_after", "retune")
SUMMARY_KEYS = ("host", "status", "phase", "before", "after", "retune", "error", "line")
PHASE_TEXT = {
    "gate_before": "the health gate before the upgrade",
    "drain": "the drain hook",
    "upgrade": "the upgrade (nvidia_driver, sglang, sglang_service)",
    "gate_after": "the health gate after the upgrade",
    "retune": "the re-tune (kv_tune)",
    "undrain": "the undrain hook",
}


class RolloutError(ValueError):
    """An input the decisions cannot use (an unknown phase)."""


def _check_phase(phase):
    if phase not in PHASES:
        raise RolloutError("unknown rollout phase %r (known: %s)" % (phase, ", ".join(PHASES)))


def rescue_plan(phase, before=None):
    """What the rescue does after a failure in ``phase``, given ``before`` (the kv_fingerprint result recorded before
    the upgrade): ``roll_back`` (reinstall ``version``, the SGLang version recorded then, and restart) when the
    failure came after the upgrade began; ``undrain`` (call the undrain hook once the host serves again) when the
    drain hook had started and the failure was not the undrain hook itself; ``gate`` (check a real generation)
    whenever anything was rolled back or is to be undrained; ``no_record``: a roll-back was due, but no version was
    recorded to return to (the host is then left as it is, and says so)."""
    _check_phase(phase)
    version = _versions(before)["sglang"]
    due = phase in CHANGED_PHASES
    roll_back = due and bool(version)
    undrain = phase in ("drain",) + CHANGED_PHASES
    return {"phase": phase, "roll_back": roll_back, "version": version if roll_back else None,
            "undrain": undrain, "gate": roll_back or undrain, "no_record": due and not version}


def _versions(fingerprint_result):
    """{sglang, driver, model} of a kv_fingerprint result (None where unknown)."""
    fp = (fingerprint_result or {}).get("fingerprint") or {}
    versions, model = fp.get("versions") or {}, fp.get("model") or {}
    return {"sglang": versions.get("sglang"), "driver": versions.get("driver"), "model": model.get("path")}


def _state_text(state):
    parts = ["SGLang %s" % (state.get("sglang") or "?")]
    if state.get("driver"):
        parts.append("driver %s" % state["driver"])
    if state.get("model"):
        parts.append("model %s" % state["model"])
    return ", ".join(parts)


def _short(text, limit=400):
    text = " ".join(str(text or "").split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def outcome(host, phase, before=None, after=None, failure=None, plan=None, rollback=None, gate=None,
            retune=None):
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
        now = dict(was) if phase in ("gate_before", "drain") else now
    retune = retune or {}
    row = {"host": host, "phase": phase, "before": was, "after": now, "retune": retune.get("status"),
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
            status = "rollback_failed"
            end = "the roll-back to SGLang %s failed too (%s); the host is NOT serving" % (
                plan["version"], _short(rollback.get("msg")))
        elif serving:
            status = "rolled_back"
            end = "rolled back: back on %s and serving" % _state_text(dict(now, sglang=now["sglang"] or plan["version"]))
        else:
            status = "rollback_failed"
            end = "rolled back to SGLang %s, but it does not answer a real generation (%s); the host is NOT serving" \
                  % (plan["version"], (gate or {}).get("reason") or "not checked")
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


def summary_rows(outcomes, pending=()):
    """The fleet summary: one row per host of ``outcomes`` (host -> its outcome, None when the host never got to
    record one: unreachable, or in a batch that has not run: ``pending``)."""
    rows = []
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

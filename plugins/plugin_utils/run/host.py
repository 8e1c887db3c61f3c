# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A host's run (docs/DESIGN.md, "The tuner"): each unit of the host in turn, as a :func:`steps.tune_unit` step the
action runs as a unit_run.UnitRun; units that share GPUs know each other. Also what decides, for the action, which
calls go on or are cut short once ansible-playbook is gone."""
from __future__ import annotations

from typing import Any, Optional

from ansible_collections.llmserve.sglang.plugins.module_utils import checks
from ansible_collections.llmserve.sglang.plugins.module_utils.service.host_units import (
    combine_units, neighbours, target_label, unit_gpus)
from ansible_collections.llmserve.sglang.plugins.plugin_utils.run import steps
from ansible_collections.llmserve.sglang.plugins.plugin_utils.run.calls import fingerprint_args, ready_call
from ansible_collections.llmserve.sglang.plugins.plugin_utils.run.context import Info
from ansible_collections.llmserve.sglang.plugins.plugin_utils.run.steps import Steps, call, say
from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner.run_settings import (
    TuneError, check_settings, with_defaults)

# kv_trial states that may still run once ansible-playbook is gone: they put the host back and let go.
CLEAN_UP_STATES = ("reverted", "unlocked")


def outlives_controller(name: str, args: Optional[dict[str, Any]]) -> bool:
    """Whether module ``name`` with ``args`` may still be called once ansible-playbook is gone (killed; its worker
    lives on): only what puts the host back and lets go."""
    return name == "kv_trial" and (args or {}).get("state") in CLEAN_UP_STATES


def cut_short(name: str, args: Optional[dict[str, Any]]) -> bool:
    """Whether a call of module ``name`` in progress is cut short (its processes stopped) when ansible-playbook is
    found gone meanwhile: a wait, a load or a watch lasts up to a trial's length (minutes), all of it on an
    unverified value that nobody will commit, so the worker reverts at once instead (issue 32). Never a kv_trial:
    a start, commit or revert cut in the middle on the controller goes on on the host, and could restart the
    server on the trial's value after the revert that follows; it is short, and the run ends after it."""
    return name != "kv_trial" and not outlives_controller(name, args)


def host_steps(host: str, args: dict[str, Any], check_mode: bool = False) -> Steps[dict[str, Any]]:
    """Every unit of the host in turn (kv_tune_units), each with its own lock, trials, pin and report; units that
    share GPUs (as each is configured, running or not) know each other, so that each is loaded with its neighbours
    and they serve together afterwards. A neighbour that is down is started on its last-known-good value before a
    unit's run, or that unit is not tuned: a search without it would take the memory it needs to start again."""
    args = with_defaults(args)
    # The host's reports and host_vars file are named after it (kv_tune role): refused before anything runs.
    checks.file_name("The inventory host name", host, TuneError)
    units = args["units"] or [args["unit"]]
    if len(units) == 1:
        return (yield steps.tune_unit(units[0], dict(args, unit=units[0]), host, None, {}, {}))
    for unit in units:
        check_settings(dict(args, unit=unit))
    infos: dict[str, Info] = {}
    for unit in units:
        infos[unit] = yield call("kv_fingerprint", fingerprint_args(args, unit))
    sharing = neighbours({unit: held_gpus(info) for unit, info in infos.items()})
    tuned: dict[str, Any] = {}
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
        tuned[unit] = yield steps.tune_unit(unit, dict(args, unit=unit), label, None if restarted else infos[unit],
                                            {other: infos[other] for other in sharing[unit]}, dict(tuned))
        if sharing[unit] and tuned[unit].get("changed"):
            infos[unit] = yield call("kv_fingerprint", fingerprint_args(args, unit))  # what its neighbours must find
    return combine_units(host, tuned)


def _start_neighbour(args: dict[str, Any], label: str, unit: str, other: str, info: Info,
                     check_mode: bool) -> Steps[tuple[Info, Optional[str], bool]]:
    """``other`` shares the GPUs of ``unit`` and does not run: it is started on its last-known-good value, so that
    every trial of ``unit`` meets its memory. (its kv_fingerprint now, None, whether it was restarted), or (info, why
    ``unit`` is not tuned, whether it was restarted)."""
    gpus = held_gpus(info)
    shared = "the same GPUs (%s)" % gpu_text(gpus) if gpus else "GPUs it cannot tell apart"
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


def held_gpus(info: Info) -> Optional[list[int]]:
    """The GPUs a unit holds: those its configuration gives it, else those its processes use; None: unknown."""
    return info.get("configured_gpus") or unit_gpus(info.get("gpu_memory"))


def gpu_text(gpus: list[int]) -> str:
    """``0-7``, ``0-3``, ``0, 2, 5``: a list of GPU indices for a line."""
    if gpus == list(range(gpus[0], gpus[-1] + 1)) and len(gpus) > 2:
        return "%d-%d" % (gpus[0], gpus[-1])
    return ", ".join(str(gpu) for gpu in gpus)


def lkg_text(info: Info) -> str:
    """The last-known-good value of a unit that does not run: its pin, else what its unit file starts (unless a
    trial drop-in says otherwise), else its base unit file's."""
    value = (info.get("pin") or {}).get("mem_fraction_static")
    if value is None and not info.get("trial_pending"):
        value = info.get("mem_fraction_static")
    return "(its base unit file's)" if value is None else str(value)

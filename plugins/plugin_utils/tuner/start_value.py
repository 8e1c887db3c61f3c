# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Before the search: whether a unit needs tuning at all, what must settle first (a stale server, a pending trial,
armed timers, a stopped unit), whether its GPUs let SGLang start, what a last-known-good value that no longer starts
means, and the one place that decides where the search starts."""
from __future__ import annotations

from typing import Any, Callable

from ansible_collections.llmserve.sglang.plugins.module_utils.capacity import kv_base, kv_defaults, kv_search
from ansible_collections.llmserve.sglang.plugins.module_utils.service import kv_pin
from ansible_collections.llmserve.sglang.plugins.module_utils.service.fingerprint import retune_reason
from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner.report_lines import fraction_text, unchanged_line, watch_note
from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner.pool_model import lower_bound
from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner.run_settings import TuneError
from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner.trials import OOM_KINDS


# SGLang refuses to start when a rank has less than 90% of the most free memory (get_available_gpu_memory).
BALANCE = 0.9


def watch_lower_to(why: str | None, watch: dict[str, Any] | None) -> Any:
    """The value a near miss of the headroom watch asks to verify (``watch``: kv_fingerprint's, kv_watch.decision's),
    where that near miss is why the unit is tuned (``why``, plan_start's); None otherwise (a changed fingerprint
    asks for a search of its own)."""
    watch = watch or {}
    return watch.get("lower_to") if watch.get("retune") and why == watch["retune"] else None


def gpu_imbalance(gpu_memory: list[dict[str, Any]] | None) -> str | None:
    """Why SGLang would refuse to start on these GPUs ("The memory capacity is unbalanced"), with the numbers, or
    None. ``gpu_memory`` is kv_fingerprint's: the unit's GPUs are those its processes use (all when it runs on none);
    what other processes hold stays taken when the unit starts again."""
    gpus = [gpu for gpu in gpu_memory or [] if gpu.get("total_bytes")]
    mine = [gpu for gpu in gpus if gpu.get("server_bytes")] or gpus
    if len(mine) < 2:
        return None
    free = {gpu["index"]: gpu["total_bytes"] - gpu["reserved_bytes"] - gpu["other_bytes"] for gpu in mine}
    most = max(free.values())
    short = [gpu for gpu in mine if free[gpu["index"]] < BALANCE * most]
    if not short:
        return None
    held = "; ".join("GPU %d: %.1f GiB held by %s" % (
        gpu["index"], gpu["other_bytes"] / 2.0 ** 30,
        ", ".join("pid %s (%s)" % (proc["pid"], proc.get("name") or "?") for proc in gpu["other_processes"])
        or "other processes") for gpu in short)
    return ("the GPUs are unbalanced for SGLang: %s, so that GPU has %.1f GiB where another has %.1f GiB (SGLang "
            "refuses less than %d%% of the most). Free those GPUs first; nothing was restarted, the server keeps "
            "running" % (held, min(free[gpu["index"]] for gpu in short) / 2.0 ** 30, most / 2.0 ** 30,
                         BALANCE * 100))


def own_trial(info: dict[str, Any], unit: str, run_id: str | None) -> bool:
    """Whether the unit runs a trial that this run armed (its own revert timer; kv_trial state=started with
    restart=false, before the rollout's upgrade restart): that start is the search's first trial, measured in place
    under the load and committed or searched on from, not reverted. Anything else pending (another run's trial, a
    server not running the trial's value, something newer on disk) is reverted as before."""
    if not run_id or not info["trial_pending"] or not info["running"] or info.get("stale"):
        return False
    running, trial = info.get("mem_fraction_static"), info.get("trial_value")
    try:
        timer = kv_pin.paths(unit, run_id)["revert_unit"] + ".timer"
    except kv_pin.PinError:   # not a run's id: no timer is its own
        return False
    return (timer in (info.get("revert_timers") or []) and running is not None and trial is not None
            and abs(running - trial) <= kv_search.TOLERANCE)


def plan_start(info: dict[str, Any], host: str, unit: str, force: bool = False, check_mode: bool = False,
               run_id: str | None = None, others: str | None = None, pin_tokens: Any = None) -> dict[str, Any]:
    """What to do with a unit before any search, from kv_fingerprint's result ``info``, in this order:

    - ``{"do": "refuse", "msg"}``: its ExecStart does not take the tuner's value, another live run holds its lock, or
      its GPUs are too unbalanced for SGLang to start again; nothing happens;
    - ``{"do": "restart", "why"}``: what is on disk (SGLang, a model's config) is newer than the running server:
      restart it on its last-known-good value first, so that the fingerprint describes what runs; ask again after;
    - ``{"do": "revert", "why"}``: a trial of an earlier run is pending, or the unit is stopped: back to its
      last-known-good value first, then ask again (a trial this run armed and the server runs is no reason:
      :func:`own_trial`, the rollout's upgrade restart, is tuned from);
    - ``{"do": "disarm", "why"}``: revert timers of an earlier run are armed without a trial (they would restart a
      healthy server later): stop them, then ask again;
    - ``{"do": "report", "status", "why", "line"}``: nothing to do (``unchanged``), or check mode (``would_tune``);
    - ``{"do": "repin", "change", "why"}``: the pin holds, but ``pin_tokens`` (kv_tune_pin_tokens; None: not judged,
      as on the other nodes of a server, which node 0's pin leads) asks it to cap the pool or no longer to
      (kv_pin.cap_change): rewrite the pin, no restart;
    - ``{"do": "tune", "why", "dry_run", "line"}``: tune, or (``dry_run``, check mode) say that it would.

    Every step but ``report`` and ``refuse`` changes the host: the caller (run ``run_id``) takes the unit's lock first;
    its own lock is no reason to refuse. ``others``: why the other nodes of a multi-node server need tuning (it is
    tuned as one), or None."""
    if not info["takes_kv_args"]:
        return {"do": "refuse", "msg": (
            "%s cannot be tuned: its ExecStart does not end with $LLMSERVE_KV_ARGS, so the tuner's drop-ins would not "
            "change --mem-fraction-static (render the unit with the llmserve.sglang.sglang_service role). Nothing "
            "was restarted." % unit)}
    lock = info.get("lock") or {}
    if lock.get("live") and lock.get("run_id") != run_id:
        return {"do": "refuse", "msg": kv_pin.lock_message(unit, lock, kv_pin.paths(unit)["lock"])}
    first: dict[str, Any] | None = None
    own = own_trial(info, unit, run_id)
    if info.get("stale") and info["running"]:
        first = {"do": "restart", "why": "what is on disk is newer than the running server (%s): restarting it on its "
                                         "last-known-good value first" % "; ".join(info["stale"])}
    elif (info["trial_pending"] and not own) or not info["running"]:
        first = {"do": "revert", "why": "a trial of an earlier run was never confirmed" if info["trial_pending"]
                 else "%s was not running" % unit}
    elif info.get("revert_timers") and not own:
        first = {"do": "disarm", "why": "revert timers of an earlier run are armed without a trial (%s)"
                                        % ", ".join(info["revert_timers"])}
    if first is not None:
        if first["do"] != "disarm":
            imbalance = gpu_imbalance(info.get("gpu_memory"))
            if imbalance:
                return {"do": "refuse", "msg": "%s: %s." % (unit, imbalance)}
        if check_mode:
            return {"do": "report", "status": "would_tune", "why": first["why"],
                    "line": "%s: %s: %s; check mode changes nothing." % (host, unit, first["why"])}
        return first
    reason = retune_reason(info["pin"], info["fingerprint"], info["fingerprint_hash"], info["mem_fraction_static"],
                           force, info.get("pin_error"), info.get("watch")) or others
    if own:
        # Never "unchanged" with a trial pending: its timer would restart the server later.
        reason = "%s runs this run's trial %s%s: verifying it under the load" % (
            unit, fraction_text(info["trial_value"]), " (%s)" % reason if reason else "")
    change = kv_pin.cap_change(info["pin"], pin_tokens) if reason is None and pin_tokens is not None else None
    if change is not None:
        why = ("kv_tune_pin_tokens: the pin caps the pool at the verified one from the next start, no restart"
               if change == "cap" else "kv_tune_pin_tokens is off: the pin's cap of %d tokens goes from the next "
               "start, no restart" % info["pin"]["max_total_tokens"])
        if check_mode:
            return {"do": "report", "status": "would_tune", "why": why,
                    "line": "%s: %s: %s; check mode changes nothing." % (host, unit, why)}
        return {"do": "repin", "change": change, "why": why}
    if reason is None:
        return {"do": "report", "status": "unchanged", "why": None,
                "line": unchanged_line(host, unit, info["pin"]) + watch_note(info.get("watch"))}
    imbalance = gpu_imbalance(info.get("gpu_memory"))
    if imbalance and not check_mode:
        return {"do": "refuse", "msg": "%s would be tuned (%s), but %s." % (unit, reason, imbalance)}
    return {"do": "tune", "why": reason, "dry_run": bool(check_mode),
            "line": "%s: %s would be tuned (%s); check mode restarts nothing." % (host, unit, reason)}


def failed_start(boot: dict[str, Any] | None, unit: str, value_text: str) -> str | None:
    """Whether a last-known-good value that did not come back can be tuned away (None) or ends the run (the message):
    an out-of-memory at start (the KV budget, graph capture, warm-up) can, any other failure cannot."""
    failure = (boot or {}).get("failure") or {}
    if failure.get("kind") in ("init_oom",) + OOM_KINDS:
        return None
    return ("%s does not start on its last-known-good value %s (%s: %s)%s. A value of --mem-fraction-static will not "
            "fix that; the unit is left as it is for an operator to see"
            % (unit, value_text, failure.get("kind") or "no classified failure", failure.get("line") or "see its journal",
               (" -- " + failure["advice"]) if failure.get("advice") else ""))


def failed_start_to_read(info: dict[str, Any]) -> str | None:
    """The start of a stopped unit (its InvocationID) whose log may show its last-known-good value failing on what is
    on disk now, or None: a start on something since replaced (``stale``: kv_fingerprint's, what changed on disk
    since that start), a pending trial's or a unit without a pin says nothing about the pin now."""
    if info["running"] or info["trial_pending"] or info.get("stale") or not info.get("pin"):
        return None
    return info.get("invocation_id") or None


def pin_failed_last(info: dict[str, Any], boot: dict[str, Any] | None) -> bool:
    """Whether a stopped unit's last start (``boot``: sglang_startup_facts' of :func:`failed_start_to_read`'s start)
    was its pin's, on what is on disk now, and never became ready, whatever it failed of: on a node of a server that
    spans hosts, a peer's failure may be what ended it."""
    value = ((boot or {}).get("server_args") or {}).get("mem_fraction_static")
    return (failed_start_to_read(info) is not None and value is not None and not (boot or {}).get("ready")
            and abs(value - info["pin"]["mem_fraction_static"]) <= kv_search.TOLERANCE)


def stopped_after_failing(info: dict[str, Any], boot: dict[str, Any] | None) -> str | None:
    """Why a stopped unit is tuned from a safe start without starting its last-known-good value again, or None (start
    it again and see). ``boot`` is sglang_startup_facts' of :func:`failed_start_to_read`'s start (on node 0 of a
    server that spans hosts, the server's: multinode.server_start_failure). Only where that start is the pin's own
    failure to start for a lack of memory (a rollout stops a server that its upgrade's start left failing): the same
    value on the same release, model and unit would fail the same way, a model load later."""
    boot = boot or {}
    failure = boot.get("failure") or {}
    if not pin_failed_last(info, boot) or failure.get("kind") not in ("init_oom",) + OOM_KINDS:
        return None
    return ("its last start, on the last-known-good value %s and what is on disk now, failed for a lack of memory "
            "(%s: %s), so that value is not started again"
            % (fraction_text(boot["server_args"]["mem_fraction_static"]), failure["kind"], failure.get("line")))


def safe_start(boot: dict[str, Any] | None, fingerprint: dict[str, Any] | None, model: dict[str, Any] | None,
               settings: dict[str, Any]) -> float:
    """Where to start when the last-known-good value no longer starts: SGLang's own default for these GPUs and
    arguments, kept above the formula's minimum of the failed boot (P and A) and at or below the cap, on the grid."""
    args = (fingerprint or {}).get("server_args") or {}
    gpu = (fingerprint or {}).get("gpu") or {}
    try:
        start = kv_defaults.default_for_server_args(
            gpu.get("memory_total_mib"), args, sglang_version=((fingerprint or {}).get("versions") or {}).get("sglang"))
    except kv_base.KvModelError as exc:
        raise TuneError("no safe value to start from: %s" % exc) from None
    res = settings["resolution"]
    low = lower_bound(boot, model)
    if low is not None:
        start = max(start, low + 2 * res)
    return min(kv_search.grid_down(start, res), kv_search.grid_down(settings["cap"], res))


def first_value(host: str, settings: dict[str, Any], running_value: float | None, verify: float | None = None,
                safe: float | None = None, default: Callable[[], float] | None = None,
                lowest: float | None = None) -> tuple[float, str]:
    """Where the search starts, decided here and nowhere else, as ``(value, source)``: the class's value less the
    margin (``verify``, per_class: source ``class``), else kv_tune_start (``kv_tune_start``) unless it lies below
    ``lowest`` (the formula's lowest viable value from the running server's P and A: a restart there cannot give a
    pool, so it is skipped), else ``safe`` (the last-known-good value no longer starts: :func:`safe_start`'s,
    ``safe_start``), else the value the server runs (``running``), else SGLang's own default for these GPUs and
    this version (``sglang_default``: neither the command line nor the startup log states the value; ``default``
    computes it, only then). Raises TuneError when there is none, or it lies above the cap."""
    start = settings["start"]
    if start is not None and lowest is not None and start < lowest - kv_search.TOLERANCE:
        start = None
    for value, source in ((verify, "class"), (start, "kv_tune_start"), (safe, "safe_start"),
                          (running_value, "running")):
        if value is not None:
            break
    else:
        value, source = (default() if default is not None else None), "sglang_default"
    if value is None:
        raise TuneError("%s: cannot start the search: the server's command line has no --mem-fraction-static and "
                        "its startup log does not say it; set kv_tune_start. Nothing was restarted." % host)
    if value > settings["cap"] + kv_search.TOLERANCE:
        raise TuneError("%s: kv_tune_cap (%s) is below the value %s runs (%s): raise kv_tune_cap, or give "
                        "kv_tune_start at or below it. Nothing was restarted."
                        % (host, settings["cap"], settings["unit"], fraction_text(value, settings["resolution"])))
    return value, source

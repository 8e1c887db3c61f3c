# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The KV tuner's decisions for one SGLang unit, as a state machine that does no I/O (docs/DESIGN.md, "The tuner").

The ``llmserve.sglang.kv_tune`` action plugin is the only caller: it reads the host through the collection's modules,
hands each observation to :class:`Tuner`, and performs the step it returns. Everything that is decided lives here
and is unit-tested from observations alone:

- whether there is anything to do (:func:`retune_reason`: the pin, the fingerprint, the running value, force);
- the settings and their errors (:func:`check_settings`);
- what a trial was (:func:`classify_trial`, by the phase in which it ended) and whether the server ran the value it
  was given (:func:`readback_error`, from its command line and its startup log);
- the order of steps (:meth:`Tuner.advance`): trial (a restart on a value, or the running server measured in place),
  commit (a new best becomes the host's last-known-good), revert (back to the last-known-good), pin (the fact), done;
- the records: each trial's row, the result, the fact entry, the progress and result lines, and the fleet summary.

Steps are dicts: ``{"do": "trial", "n": 2, "value": 0.91, "text": "0.910", "restart": True}``, ``{"do": "commit",
"value": .., "text": ..}``, ``{"do": "revert", "value": .., "text": .., "why": ..}``, ``{"do": "pin"}`` and ``{"do":
"done", "status": "tuned" | "no_stable_value" | "failed", "msg": ..}``. The commit-confirmed protocol around them
(a trial armed with a revert timer on the host, confirmed only by a commit) is the kv_trial module's.
"""
from __future__ import annotations

import re

from ansible_collections.llmserve.sglang.plugins.module_utils import (
    checks, kv_base, kv_capacity_report, kv_cell, kv_defaults, kv_pin, kv_search, kv_shape)
from ansible_collections.llmserve.sglang.plugins.module_utils.fingerprint import fingerprint_diff

# The trial records written into the host's fact (the report keeps every field).
FACT_TRIAL_KEYS = ("n", "f", "text", "outcome", "restart", "tokens", "min_free_gib")
_UNIT_NAME = re.compile(r"^[A-Za-z0-9_.@-]+\.service$")
_OOM_KINDS = ("capture_oom", "runtime_oom")
# Failures that no value of f can fix: the search ends on them instead of lowering f.
_FATAL_KINDS = ("unbalanced_memory", "nccl_error", "weights_oom")
# SGLang refuses to start when a rank has less than 90% of the most free memory (get_available_gpu_memory).
BALANCE = 0.9
STRATEGIES = ("per_host", "per_class")


class TuneError(checks.InvalidInput):
    """A setting or an observation the tuner cannot work with; the message says which and what to do."""


# --------------------------------------------------------------------------------------------------------------
# Settings
# --------------------------------------------------------------------------------------------------------------

def check_settings(raw):
    """The tuner's settings (the role's kv_tune_* variables without the prefix) checked and typed. Raises TuneError
    with the variable's name before anything on the host changes."""
    def need(ok, msg):
        if not ok:
            raise TuneError("Invalid input for llmserve.sglang.kv_tune: " + msg)

    def num(name, kind=float):
        try:
            return checks.parse_number("kv_tune_" + name, raw.get(name), kind, TuneError)
        except TuneError as exc:
            raise TuneError("Invalid input for llmserve.sglang.kv_tune: %s" % exc) from None

    unit = str(raw.get("unit") or "")
    need(_UNIT_NAME.match(unit), "kv_tune_unit must be a systemd service name such as sglang.service (got '%s')."
         % unit)
    settings = {"unit": unit, "force": bool(raw.get("force")), "start": None}
    if raw.get("start") is not None:
        settings["start"] = num("start")
        need(0 < settings["start"] < 1, "kv_tune_start must lie strictly between 0 and 1 (got %s)." % raw["start"])
    settings["cap"] = num("cap")
    need(0 < settings["cap"] < 1, "kv_tune_cap must lie strictly between 0 and 1 (got %s)." % raw["cap"])
    need(settings["start"] is None or settings["cap"] >= settings["start"],
         "kv_tune_cap (%s) is below kv_tune_start (%s): there is nothing to search." % (raw["cap"], raw["start"]))
    settings["resolution"] = num("resolution")
    try:
        kv_search.check_resolution(settings["resolution"])
    except kv_search.KvSearchError:
        need(False, "kv_tune_resolution must be a decimal step in [%s, 0.1] such as 0.005 or 0.0005 (got %s)."
             % (kv_search.MIN_RESOLUTION, raw["resolution"]))
    need(settings["start"] is None or kv_search.on_grid(settings["start"], settings["resolution"]),
         "kv_tune_start (%s) is not on the kv_tune_resolution grid (%s)." % (raw.get("start"), raw["resolution"]))
    settings["safety_gib"] = num("safety_gib")
    need(settings["safety_gib"] >= 0, "kv_tune_safety_gib must be >= 0 (got %s)." % raw["safety_gib"])
    settings["budget"] = num("budget", int)
    need(settings["budget"] >= 1, "kv_tune_budget must be at least 1 (got %s)." % raw["budget"])
    settings["min_tokens"] = None if raw.get("min_tokens") is None else num("min_tokens", int)
    need(settings["min_tokens"] is None or settings["min_tokens"] > 0,
         "kv_tune_min_tokens must be a positive token count (got %s)." % raw.get("min_tokens"))
    for name in ("ready_timeout", "ready_interval", "stress_duration", "confirm_timeout"):
        settings[name] = num(name)
    need(settings["ready_timeout"] > 0 and settings["ready_interval"] > 0 and settings["stress_duration"] > 0
         and settings["confirm_timeout"] > settings["ready_timeout"] + settings["stress_duration"],
         "kv_tune_ready_timeout, kv_tune_ready_interval and kv_tune_stress_duration must be > 0, and "
         "kv_tune_confirm_timeout (%s) longer than a trial (ready timeout + load), or the host would revert a trial "
         "that is still running." % raw["confirm_timeout"])
    settings["stress_fill_ratio"] = num("stress_fill_ratio")
    need(0 < settings["stress_fill_ratio"] <= 1,
         "kv_tune_stress_fill_ratio must lie in (0, 1] (got %s)." % raw["stress_fill_ratio"])
    settings["strategy"] = str(raw.get("strategy") or "per_host")
    need(settings["strategy"] in STRATEGIES, "kv_tune_strategy must be one of %s (got '%s')."
         % (", ".join(STRATEGIES), settings["strategy"]))
    settings["class_margin_steps"] = num("class_margin_steps", int) if raw.get("class_margin_steps") is not None else 1
    need(0 <= settings["class_margin_steps"] <= 20,
         "kv_tune_class_margin_steps must be a whole number of grid steps in [0, 20] (got %s)."
         % raw.get("class_margin_steps"))
    return settings


# --------------------------------------------------------------------------------------------------------------
# Is there anything to do
# --------------------------------------------------------------------------------------------------------------

def retune_reason(pin, fingerprint, fingerprint_hash, running_value, force=False, pin_error=None):
    """Why the unit must be tuned, or None when its pin still holds: same fingerprint hash and the server runs the
    pinned value."""
    if force:
        return "kv_tune_force"
    if pin_error:
        return pin_error
    if not pin:
        return "never tuned"
    if pin.get("fingerprint_hash") != fingerprint_hash:
        changed = fingerprint_diff(pin.get("fingerprint") or {}, fingerprint or {})
        return "fingerprint changed: " + (", ".join(changed) or "its hash")
    pinned = pin.get("mem_fraction_static")
    if pinned is None or running_value is None or not kv_search.same_value(pinned, running_value):
        return "the server runs %s, not the pinned %s" % (running_value, pinned)
    return None


def gpu_imbalance(gpu_memory):
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


def plan_start(info, host, unit, force=False, check_mode=False, run_id=None, others=None):
    """What to do with a unit before any search, from kv_fingerprint's result ``info``, in this order:

    - ``{"do": "refuse", "msg"}``: its ExecStart does not take the tuner's value, another live run holds its lock, or
      its GPUs are too unbalanced for SGLang to start again; nothing happens;
    - ``{"do": "restart", "why"}``: what is on disk (SGLang, a model's config) is newer than the running server:
      restart it on its last-known-good value first, so that the fingerprint describes what runs; ask again after;
    - ``{"do": "revert", "why"}``: a trial of an earlier run is pending, or the unit is stopped: back to its
      last-known-good value first, then ask again;
    - ``{"do": "disarm", "why"}``: revert timers of an earlier run are armed without a trial (they would restart a
      healthy server later): stop them, then ask again;
    - ``{"do": "report", "status", "why", "line"}``: nothing to do (``unchanged``), or check mode (``would_tune``);
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
    first = None
    if info.get("stale") and info["running"]:
        first = {"do": "restart", "why": "what is on disk is newer than the running server (%s): restarting it on its "
                                         "last-known-good value first" % "; ".join(info["stale"])}
    elif info["trial_pending"] or not info["running"]:
        first = {"do": "revert", "why": "a trial of an earlier run was never confirmed" if info["trial_pending"]
                 else "%s was not running" % unit}
    elif info.get("revert_timers"):
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
                           force, info.get("pin_error")) or others
    if reason is None:
        return {"do": "report", "status": "unchanged", "why": None, "line": unchanged_line(host, unit, info["pin"])}
    imbalance = gpu_imbalance(info.get("gpu_memory"))
    if imbalance and not check_mode:
        return {"do": "refuse", "msg": "%s would be tuned (%s), but %s." % (unit, reason, imbalance)}
    return {"do": "tune", "why": reason, "dry_run": bool(check_mode),
            "line": "%s: %s would be tuned (%s); check mode restarts nothing." % (host, unit, reason)}


# --------------------------------------------------------------------------------------------------------------
# Several servers on one host (sglang@a on GPUs 0-3, sglang@b on 4-7)
# --------------------------------------------------------------------------------------------------------------

def target_label(host, unit):
    """How lines, reports and the summary name one of several units of a host: ``gpu1/sglang@a``."""
    stem = unit[:-len(".service")] if unit.endswith(".service") else unit
    return "%s/%s" % (host, stem)


def report_name(label):
    """The file name (without extension) of a unit's reports: its label, with no directory in it."""
    return label.replace("/", "_")


def unit_gpus(gpu_memory):
    """The GPUs a running unit's processes use (kv_fingerprint's ``gpu_memory``), or None: not running, unknown."""
    found = sorted(gpu["index"] for gpu in gpu_memory or [] if gpu.get("server_bytes"))
    return found or None


def neighbours(gpu_sets):
    """unit -> the other units whose servers share a GPU with it (unit -> its GPUs, None: unknown, shares nothing
    known).

    A trial of a unit then loads its neighbours too, at the same time: the batches of servers on one GPU take their
    activations from the same free memory, and a value stable alone can run the pair out of memory at peak traffic."""
    found = {unit: [] for unit in gpu_sets}
    for unit, gpus in gpu_sets.items():
        for other, other_gpus in gpu_sets.items():
            if other != unit and gpus and other_gpus and set(gpus) & set(other_gpus):
                found[unit].append(other)
    return {unit: sorted(others) for unit, others in found.items()}


def unit_outcome(outcome, unit):
    """What kv_tune returned for ``unit`` out of what it returned for its host (all of it when it tuned one unit or
    failed before any)."""
    units = (outcome or {}).get("units") or {}
    return units.get(unit, outcome)


def combine_units(host, results):
    """The host's result when it has several units (unit -> that unit's result, in the order tuned): a failure of one
    unit fails the host after the others are tuned, and names the unit."""
    failed = [(unit, res) for unit, res in results.items()
              if res.get("failed") or res.get("status") in ("failed", "no_stable_value")]
    statuses = set(res.get("status") for res in results.values() if not res.get("failed"))
    out = {"changed": any(res.get("changed") for res in results.values()), "units": results,
           "line": "\n".join(res.get("line") or "%s: %s" % (res.get("label", unit), res.get("msg"))
                             for unit, res in results.items())}
    if failed:
        out["status"] = "no_stable_value" if all(res.get("status") == "no_stable_value" for _u, res in failed) \
            else "failed"
        out["msg"] = "%s: %d of %d units not tuned: %s" % (host, len(failed), len(results), "; ".join(
            res.get("msg") or res.get("line") or unit for unit, res in failed))
    elif statuses == {"unchanged"}:
        out["status"] = "unchanged"
    else:
        for status in ("would_tune", "would_reset", "tuned", "reset", "unchanged"):
            if status in statuses:
                out["status"] = status
                break
    return out


def expand_units(outcomes):
    """host -> kv_tune's result, as label -> one unit's result: a host with several units gives a row each."""
    out = {}
    for host, outcome in outcomes.items():
        units = (outcome or {}).get("units") or {}
        if len(units) > 1:
            for unit, res in units.items():
                out[res.get("label") or target_label(host, unit)] = res
        else:
            out[host] = outcome
    return out


def report_items(outcome):
    """The reports a host's result gives: one per unit that was searched, {name, unit, status, line, result,
    report}."""
    units = (outcome or {}).get("units") or {}
    found = units.values() if len(units) > 1 else [outcome or {}]
    return [{"name": report_name(res.get("label") or "?"), "unit": res.get("unit"), "status": res.get("status"),
             "line": res.get("line"), "result": res["result"], "report": res.get("report")}
            for res in found if res.get("result")]


# --------------------------------------------------------------------------------------------------------------
# kv_tune_strategy: per_class
# --------------------------------------------------------------------------------------------------------------

def class_plan(probes, hosts, force=False):
    """Who searches and who verifies, per class of identical fingerprints (GPUs, driver, SGLang, model, memory
    arguments: the fingerprint hash). ``probes``: host -> what kv_tune said in check mode (``status``,
    ``fingerprint_hash``, ``pin``; None or failed: no answer); ``hosts``: the play's hosts in inventory order.
    Returns host -> ``{"role", "class", "canary", "value", "why"}``:

    - ``canary``: the first host of its class that must be tuned searches for the class (``value`` None);
    - ``member``: verifies the class's value with one restart under the load; ``canary`` names the host whose tune
      gives it, or ``value`` is already known: a host of the class holds a pin of this very fingerprint (status
      ``unchanged``). Hosts whose pin holds are members too: they are not tuned at all;
    - ``alone``: no fingerprint (no answer, a unit that cannot be read): its own search, if any.
    ``force`` (kv_tune_force): no pin counts, every class gets a canary."""
    plan, classes = {}, {}
    for host in hosts:
        probe = probes.get(host) or {}
        key = probe.get("fingerprint_hash")
        if not key or probe.get("failed"):
            plan[host] = {"role": "alone", "class": None, "canary": None, "value": None,
                          "why": "no fingerprint: %s" % (probe.get("msg") or "the host did not answer")}
            continue
        classes.setdefault(key, []).append(host)
    for key, members in classes.items():
        pinned = [] if force else [host for host in members if probes[host].get("status") == "unchanged"
                                   and (probes[host].get("pin") or {}).get("mem_fraction_static") is not None]
        label = key[:12]
        if pinned:
            source = pinned[0]
            value = probes[source]["pin"]["mem_fraction_static"]
            for host in members:
                plan[host] = {"role": "member", "class": label, "canary": None, "value": value,
                              "why": "%s holds the class's pin %s" % (source, value)}
            continue
        canary = members[0]
        for host in members:
            plan[host] = {"role": "canary" if host == canary else "member", "class": label, "value": None,
                          "canary": None if host == canary else canary,
                          "why": "searches for %d host(s) of class %s" % (len(members), label) if host == canary
                          else "verifies the value of %s, the canary of class %s" % (canary, label)}
    return plan


def class_plan_units(probes, hosts, force=False):
    """:func:`class_plan` over every unit of every host (a host with several servers has a target per unit; a class
    may hold units of one host). ``probes``: host -> what kv_tune said in check mode. Returns host ->
    ``{"canary": whether one of its units searches for a class, "units": {unit: class_plan's entry, with the
    canary's ``canary_host`` and ``canary_unit``}, "lines": [one per unit]}``."""
    targets, where = [], {}
    for host in hosts:
        probe = probes.get(host) or {}
        units = probe.get("units") or {}
        several = len(units) > 1
        for unit, unit_probe in (units.items() if units else [(probe.get("unit"), probe)]):
            label = target_label(host, unit) if several else host
            targets.append((label, unit_probe))
            where[label] = (host, unit)
    plan = class_plan(dict(targets), [label for label, _probe in targets], force=force)
    out = {host: {"canary": False, "units": {}, "lines": []} for host in hosts}
    for label, _probe in targets:
        host, unit = where[label]
        entry = dict(plan[label])
        entry["canary_host"], entry["canary_unit"] = where.get(entry["canary"], (None, None))
        out[host]["canary"] = out[host]["canary"] or entry["role"] == "canary"
        if unit is not None:
            out[host]["units"][unit] = entry
        out[host]["lines"].append("%s: %s of class %s: %s" % (label, entry["role"], entry["class"], entry["why"]))
    return out


def class_value(entry, canary_outcome=None):
    """The value a member of a class verifies (before the margin), or None: its own search. ``entry``: its
    class_plan entry; ``canary_outcome``: what the canary's kv_tune returned (None: it did not run or answer)."""
    if not entry or entry.get("role") != "member":
        return None
    if entry.get("value") is not None:
        return entry["value"]
    res = canary_outcome or {}
    if res.get("status") == "tuned" and res.get("result"):
        return res["result"]["after"]["mem_fraction_static"]
    if res.get("status") == "unchanged" and res.get("pin"):
        return res["pin"].get("mem_fraction_static")
    return None


def verify_value(value, settings):
    """The class's value less the margin, on the grid and at most the cap: what a member runs under the load.

    The margin (kv_tune_class_margin_steps grid steps, one by default) absorbs what differs between hosts of one
    fingerprint without being in it (CUDA context and driver reservations, a few MiB to a few hundred): one step is
    0.47 GiB per GPU on a 96 GB card and 0.7 GiB on an H200. Anything larger fails the verification, which runs the
    same load as a search trial; the host then searches on its own."""
    res = settings["resolution"]
    lowered = kv_search.grid_down(value + kv_search.TOLERANCE, res) - settings["class_margin_steps"] * res
    return min(kv_search.grid_down(lowered + kv_search.TOLERANCE, res), kv_search.grid_down(settings["cap"], res))


def failed_start(boot, unit, value_text):
    """Whether a last-known-good value that did not come back can be tuned away (None) or ends the run (the message):
    an out-of-memory at start (the KV budget, graph capture, warm-up) can, any other failure cannot."""
    failure = (boot or {}).get("failure") or {}
    if failure.get("kind") in ("init_oom",) + _OOM_KINDS:
        return None
    return ("%s does not start on its last-known-good value %s (%s: %s)%s. A value of --mem-fraction-static will not "
            "fix that; the unit is left as it is for an operator to see"
            % (unit, value_text, failure.get("kind") or "no classified failure", failure.get("line") or "see its journal",
               (" -- " + failure["advice"]) if failure.get("advice") else ""))


def safe_start(boot, fingerprint, model, settings):
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


def unchanged_line(host, unit, pin):
    return ("%s: %s keeps %s (%s KV tokens), pinned %s: fingerprint unchanged."
            % (host, unit, _text(pin.get("mem_fraction_static"), pin.get("settings", {}).get("resolution"),
                                 pin.get("text")),
               _count(pin.get("tokens")), pin.get("time", "?")))


# --------------------------------------------------------------------------------------------------------------
# The model, for the lowest value worth trying
# --------------------------------------------------------------------------------------------------------------

def model_inputs(config, memory_args, sglang_version):
    """What the formula needs of the model, from config.json (as data) and the fingerprint's memory args: the KV
    cell per GPU (bytes per token), the page size and the multimodal reservation. None without a config (a Hub id
    the host has no copy of). A model the formula cannot read fails here, before anything restarts."""
    if config is None:
        return None
    args = memory_args or {}
    try:
        shape = kv_shape.model_shape(config, dtype=args.get("dtype") or "auto")
        cell = kv_cell.cell_size_bytes(
            shape, tp_size=args.get("tp_size") or 1, dp_size=args.get("dp_size") or 1,
            enable_dp_attention=bool(args.get("enable_dp_attention")), kv_cache_dtype=args.get("kv_cache_dtype") or "auto",
            sglang_version=sglang_version, speculative_algorithm=args.get("speculative_algorithm"))
        mm_gib = kv_capacity_report.mm_reservation_gib(shape, sglang_version)
    except kv_base.KvModelError as exc:
        raise TuneError("the model cannot be tuned: %s. Nothing was restarted." % exc) from None
    return {"cell_size_bytes": cell, "page_size": args.get("page_size") or 1, "mm_reservation_gib": mm_gib,
            "hybrid_state": shape.linear_state is not None}


def effective_memory(boot):
    """(P, A) of a boot in terms of the command line's --mem-fraction-static. SGLang 0.4.x sized a multimodal model's
    pool with s * f (it said so: mem_fraction_static_source 'multimodal_reduction'); A - P * (1 - s * f) is
    A' - P' * (1 - f) with P' = s * P and A' = A - P * (1 - s), so the formula, the floor and the slope keep working
    on the values the tuner writes. (None, None) when the log does not give them or cannot be trusted (another process
    allocated while SGLang loaded: the search re-measures instead of predicting from it)."""
    boot = boot or {}
    p, a = boot.get("pre_load_free_gib"), boot.get("post_load_free_gib")
    if not p or not a or boot.get("untrusted"):
        return None, None
    used, logged = boot.get("mem_fraction_static"), boot.get("mem_fraction_static_logged")
    if boot.get("mem_fraction_static_source") == "multimodal_reduction" and used and logged:
        scale = used / logged
        return p * scale, a - p * (1 - scale)
    return p, a


def lower_bound(boot, model, min_tokens=None):
    """The formula's lowest viable value from the running server's P and A (and, with the model known, the pool that
    holds ``min_tokens``); None when its startup log does not give P and A, or they cannot be trusted."""
    p, a = effective_memory(boot)
    if not p or not a:
        return None
    model = model or {}
    if min_tokens is not None and model.get("hybrid_state"):
        raise TuneError("kv_tune_min_tokens is not supported for hybrid linear-attention models yet: their state pool "
                        "shares the budget with the KV pool. Unset it; nothing was restarted.")
    return kv_search.lower_bound(p, a, target_tokens=min_tokens if model else None,
                                 cell_size_bytes=model.get("cell_size_bytes"), page_size=model.get("page_size", 1),
                                 mm_reservation_gib=model.get("mm_reservation_gib", 0.0))


# --------------------------------------------------------------------------------------------------------------
# One trial
# --------------------------------------------------------------------------------------------------------------

def classify_trial(ready, stress, boot, not_memory_gib=None):
    """(outcome, why) of a trial from its readiness wait, its load (None when it never answered) and the startup
    facts of its boot. The phase decides an out-of-memory: before the KV pool (init_oom: f too low), after it but
    before the first answer (startup_oom: graphs, warm-up), under the load (runtime_oom, also when a server sharing
    the GPUs did not hold the same load). A failure that is not about
    memory is ``fatal``: an unbalanced GPU, NCCL, the weights not fitting, an exception at start, or a crash under
    the load while ``not_memory_gib`` or more stayed free."""
    boot = boot or {}
    failure = boot.get("failure") or {}
    kind = failure.get("kind")
    if kind in _FATAL_KINDS:
        return "fatal", "%s: %s" % (kind, failure.get("line"))
    if ready.get("ready"):
        if stress and stress.get("held"):
            return "stable", None
        why = (stress or {}).get("failure_reason") or failure.get("line") or "the load did not hold"
        if kind in _OOM_KINDS:
            return "runtime_oom", why
        # A server sharing the GPUs, loaded at the same time, did not hold: the pair ran out of memory under load.
        if any(not other.get("held") for other in ((stress or {}).get("also") or {}).values()):
            return "runtime_oom", why
        free = (stress or {}).get("min_free_gib")
        if not_memory_gib is not None and free is not None and free >= not_memory_gib:
            return "fatal", "%s, with %.1f GiB still free: not a lack of memory" % (why, free)
        return "crash", why
    if kind == "init_oom":
        return "init_oom", failure.get("line")
    if kind in _OOM_KINDS:
        return "startup_oom", failure.get("line")
    if kind is not None:
        return "fatal", "%s: %s" % (kind, failure.get("line"))
    if ready.get("reason") == "timeout":
        return "timeout", "timeout: %s" % ready.get("detail")
    return "crash", "%s: %s" % (ready.get("reason"), ready.get("detail"))


def oom_deficit_gib(boot):
    """GiB that were missing when the boot ran out of memory (torch's "Tried to allocate" minus "free"), or None."""
    oom = ((boot or {}).get("failure") or {}).get("oom") or {}
    if oom.get("tried_gib") is None or oom.get("free_gib") is None:
        return None
    return max(0.0, float(oom["tried_gib"]) - float(oom["free_gib"]))


def growth(boot):
    """KV-like memory per GiB of KV budget: (target + draft KV) / target KV of the boot (a classic EAGLE draft's own
    pool grows with the target's), or None when the log does not say."""
    kv, draft = (boot or {}).get("kv_size_gib"), (boot or {}).get("draft_kv_size_gib")
    if not kv:
        return None
    return (kv + (draft or 0.0)) / kv


def readback_error(text, argv_value, log_value):
    """None when the server ran the trial's value; else why not. ``argv_value`` is the --mem-fraction-static on the
    running server's command line (None: not running, or no flag), ``log_value`` the one its startup log printed
    (None: no server_args line)."""
    wanted = kv_search.parse_value(text)
    seen = []
    for where, value in (("its command line", argv_value), ("its startup log", log_value)):
        if value is not None and not kv_search.same_value(value, wanted):
            seen.append("%s says %s" % (where, value))
    if not seen:
        return None
    return ("the server did not run the trial's --mem-fraction-static %s: %s. Something else sets the value "
            "(another drop-in, an edited unit?)" % (text, " and ".join(seen)))


# --------------------------------------------------------------------------------------------------------------
# The per-unit search
# --------------------------------------------------------------------------------------------------------------

class Tuner(object):
    """The search of one unit, from the decision to tune to the pin. Feed :meth:`advance` the observation of the
    step it returned last (see the module docstring for the steps and :meth:`advance` for the observations)."""

    def __init__(self, host, settings, reason, running_value, boot, fingerprint, fingerprint_hash, lower_bound=None,
                 invocation_id=None, start=None, verify=None):
        """``running_value``: the --mem-fraction-static the server runs now (its command line, else the startup
        log's), its last-known-good value; ``boot``: the startup facts of the running server (of the failed start,
        when the last-known-good value no longer starts); ``lower_bound``: the formula's lowest viable value (None:
        anything that starts), the caller's from the model and the boot; ``invocation_id``: the start of the running
        server (a measurement in place must be of that start); ``start``: where to start when not kv_tune_start or
        the running value (the last-known-good value no longer starts: a safe start); ``verify``: the value of the
        host's class (kv_tune_strategy per_class) less the margin: it is tried first, and when it holds the load with
        the margin it is pinned at once; when it does not, the search goes on from it as a search of its own."""
        self.host = host
        self.s = settings
        self.reason = reason
        self.fingerprint = fingerprint
        self.fingerprint_hash = fingerprint_hash
        self.boot = boot or {}
        self.lower_bound = lower_bound
        self.before = {"mem_fraction_static": running_value, "tokens": self.boot.get("max_total_num_tokens"),
                       "text": None if running_value is None else _text(running_value, settings["resolution"])}
        self.lkg = running_value            # the value the host returns to: running at the start, then each commit
        self.invocation_id = invocation_id
        self.verify = verify
        self.start = verify if verify is not None else settings["start"] if settings["start"] is not None else (
            start if start is not None else running_value)
        if self.start is None:
            raise TuneError("%s: cannot start the search: the server's command line has no --mem-fraction-static and "
                            "its startup log does not say it; set kv_tune_start. Nothing was restarted." % host)
        if self.start > settings["cap"] + kv_search.TOLERANCE:
            raise TuneError("%s: kv_tune_cap (%s) is below the value %s runs (%s): raise kv_tune_cap, or give "
                            "kv_tune_start at or below it. Nothing was restarted."
                            % (host, settings["cap"], settings["unit"], self.text(self.start)))
        after_weights = self.boot.get("post_load_free_gib")
        if after_weights is not None and settings["safety_gib"] >= after_weights:
            raise TuneError("%s: kv_tune_safety_gib (%s GiB) is not below the memory left after the weights load (%.2f "
                            "GiB per GPU): no value of --mem-fraction-static can keep that much free. Nothing was "
                            "restarted." % (host, settings["safety_gib"], after_weights))
        self.verified = None                # per_class: whether the class's value held (None: not tried)
        self.state = None                   # kv_search's, from the first boot that says P
        self.trials = []
        self.restarts = 0
        self.error = None
        self.step = None

    # -- the written form ------------------------------------------------------------------------------------------

    def text(self, value):
        """The value as written everywhere: on the grid with its decimals, an operator's off-grid value as given."""
        return _text(value, self.s["resolution"])

    # -- steps -----------------------------------------------------------------------------------------------------

    def first_step(self):
        in_place = (kv_search.same_value(self.start, self.before["mem_fraction_static"] or 0)
                    and self.invocation_id is not None and all(effective_memory(self.boot)))
        return self._go({"do": "trial", "n": 1, "value": self.start, "text": self.text(self.start),
                         "restart": not in_place})

    def advance(self, observation):
        """The next step after the observation of the current one:

        - trial: ``{"started": kv_trial's result (None in place), "ready": sglang_ready's result, "stress":
          kv_stress's or None, "boot": sglang_startup_facts', "running": kv_fingerprint's or None}``;
        - commit and pin: ``{}``;
        - revert: ``{"ready": .., "running": ..}``."""
        done = self.step["do"]
        if done == "trial":
            return self._after_trial(observation)
        if done == "commit":
            return self._next_trial_or_end()
        if done == "revert":
            return self._after_revert(observation)
        if done == "pin":
            return self._done()
        raise TuneError("nothing to advance after %r" % (done,))

    def _go(self, step):
        self.step = step
        if step["do"] in ("trial", "revert") and step.get("restart", True):
            self.restarts += 1
        return step

    def _not_memory_gib(self, boot):
        """Free GiB under load above which a crash is not a lack of memory: a tenth of the memory before the
        weights, at least four margins."""
        p = boot.get("pre_load_free_gib") or self.boot.get("pre_load_free_gib")
        return max(4 * self.s["safety_gib"], 0.1 * p) if p else None

    def _after_trial(self, obs):
        step, boot = self.step, obs.get("boot") or {}
        outcome, why = classify_trial(obs.get("ready") or {}, obs.get("stress"), boot, self._not_memory_gib(boot))
        running = obs.get("running") or {}
        # Which start answered first (a revert by the host's timer explains a wrong value too), then the value.
        error = self._identity_error(step, obs) or readback_error(
            step["text"], running.get("mem_fraction_static"), (boot.get("server_args") or {}).get("mem_fraction_static"))
        if error is None and running and running.get("fingerprint_hash") not in (None, self.fingerprint_hash):
            error = ("the memory picture changed during the search (%s): start again once the host is settled"
                     % ", ".join(fingerprint_diff(self.fingerprint, running.get("fingerprint") or {})))
        if error is None and boot.get("untrusted"):
            # Another process allocated on the GPUs while this start loaded: its pool, its headroom and whatever
            # held or failed are not this value's. Start it again once; twice in a row, the GPUs are not ours.
            again = step.get("remeasure", 0) < 1
            record = self._record(step, "untrusted", "; ".join(boot["untrusted"]), obs)
            if again:
                record["next"] = step["value"]
                return self._go(dict(step, n=len(self.trials) + 1, restart=True, remeasure=step.get("remeasure", 0) + 1))
            record["outcome"] = "unverified"
            self.error = ("two starts at %s in a row gave startup logs whose memory numbers cannot be trusted (%s): "
                          "another process allocates GPU memory while SGLang loads; tune again when nothing else runs "
                          "on these GPUs" % (step["text"], boot["untrusted"][0]))
            return self._end()
        record = self._record(step, outcome, why, obs)
        if error is None and outcome == "stable" and record["min_free_gib"] is None:
            error = ("the load held but no GPU memory sample was taken (neither NVML nor nvidia-smi answered on the "
                     "host): without the free memory under load the search cannot judge a value")
        if error is not None:
            record["outcome"], record["why"] = "unverified", error
            self.error = error
            return self._end()
        if self.state is None:
            self._start_search(boot)
        p, a = effective_memory(boot)
        kv_search.record(self.state, {
            "f": step["value"], "outcome": outcome, "min_free_gib": record["min_free_gib"], "tokens": record["tokens"],
            "growth": growth(boot), "oom_deficit_gib": oom_deficit_gib(boot), "pre_load_free_gib": p,
            "post_load_free_gib": a})
        record["next"] = kv_search.next_trial(self.state)
        if self.verified is None and self.verify is not None:
            # The class's value held (or not) on this host: done, or a search of its own from here.
            self.verified = outcome == "stable" and kv_search.same_value(kv_search.best(self.state) or 0, step["value"])
            if self.verified:
                kv_search.stop(self.state, "the class's value held the load with the margin")
                record["next"] = None
        if outcome == "stable" and kv_search.same_value(kv_search.best(self.state) or 0, step["value"]):
            self.lkg = step["value"]
            return self._go({"do": "commit", "value": step["value"], "text": step["text"]})
        return self._next_trial_or_end()

    def _identity_error(self, step, obs):
        """Why the server that answered and held the load is not the start this trial made (a revert by the host's
        timer, a restart by anyone), or None."""
        wanted = ((obs.get("started") or {}).get("invocation_id") if step["restart"] else self.invocation_id)
        seen = [(where, (obs.get(key) or {}).get("invocation_id")) for where, key in (
            ("the server that answered is", "ready"), ("the unit now runs", "running"))]
        wrong = ["%s start %s" % (where, value) for where, value in seen if value is not None and value != wanted]
        if not wrong or wanted is None:
            return None
        return ("this trial started %s, but %s: the host reverted it, or something restarted it, so the measurements "
                "are not this value's" % (wanted, " and ".join(wrong)))

    def _start_search(self, boot):
        p = effective_memory(boot)[0] or effective_memory(self.boot)[0] or boot.get("pre_load_free_gib") \
            or self.boot.get("pre_load_free_gib")
        if not p:
            raise TuneError("%s: neither the trial's startup log nor the running server's gives the free GPU memory "
                            "before the weights load (P): the search cannot predict" % self.host)
        guess = self.before["mem_fraction_static"]
        self.state = kv_search.new_state(
            p, self.start, lo=self._lower_bound(), cap=self.s["cap"], resolution=self.s["resolution"],
            safety_gib=self.s["safety_gib"], budget=self.s["budget"],
            guess=guess if guess is not None and guess <= self.s["cap"] else None)

    def _lower_bound(self):
        # Kept a step below the cap: a formula minimum above the cap still leaves the cap to try.
        if self.lower_bound is None:
            return None
        return min(self.lower_bound, self.s["cap"] - self.s["resolution"])

    def _next_trial_or_end(self):
        value = kv_search.next_trial(self.state)
        if value is None:
            return self._end()
        return self._go({"do": "trial", "n": len(self.trials) + 1, "value": value, "text": self.text(value),
                         "restart": True})

    def _end(self):
        """After the last trial: back to the last-known-good value unless the server already runs it."""
        last = self.trials[-1]
        if self.error is None and last["outcome"] == "stable" and (
                kv_search.same_value(last["f"], self.lkg or 0) or not last["restart"]):
            # The server runs the last-known-good value already: the best, committed (with the fact) right after
            # its trial, or the running server measured in place.
            return self._done()
        why = (self.error and "the last trial was not verified") or (
            "the last trial was not the best" if self.best is not None else "no trial held the load with the margin")
        return self._go({"do": "revert", "value": self.lkg, "text": self.text(self.lkg) if self.lkg else None,
                         "why": why})

    def _after_revert(self, obs):
        ready, running = obs.get("ready") or {}, obs.get("running") or {}
        if not ready.get("ready"):
            self.error = ("%s did not come back on its last-known-good value %s (%s: %s): the unit is left as it is "
                          "for an operator to see" % (self.s["unit"], self.step["text"], ready.get("reason"),
                                                      ready.get("detail")))
            return self._done()
        if self.lkg is not None:
            mismatch = readback_error(self.step["text"], running.get("mem_fraction_static"), None)
            if mismatch:
                self.error = (self.error + "; " if self.error else "") + mismatch
                return self._done()
        if self.best is not None and self.error is None:
            # The fact records the trials after the last commit too.
            return self._go({"do": "pin", "value": self.best, "text": self.text(self.best)})
        return self._done()

    def _done(self):
        fatal = [t for t in self.trials if t["outcome"] == "fatal"]
        if self.error is None and fatal:
            self.error = ("%s at %s is not about memory, so no value of --mem-fraction-static fixes it; %s serves %s"
                          % (fatal[-1]["why"], fatal[-1]["text"], self.s["unit"],
                             self.text(self.lkg) if self.lkg else "its base value"))
        if self.error is not None:
            status, msg = "failed", "%s: %s. Nothing was pinned by this trial." % (self.host, self.error)
        elif self.best is None:
            status = "no_stable_value"
            msg = ("%s: no value held the load with %s GiB to spare in %d trials; %s serves its last-known-good value "
                   "%s again. Trials: %s." % (self.host, self.s["safety_gib"], len(self.trials), self.s["unit"],
                                              self.text(self.lkg) if self.lkg else "(SGLang's default)",
                                              ", ".join("%s %s" % (t["text"], t["outcome"]) for t in self.trials)))
        else:
            status, msg = "tuned", None
        return self._go({"do": "done", "status": status, "msg": msg})

    # -- records ---------------------------------------------------------------------------------------------------

    @property
    def best(self):
        return None if self.state is None else kv_search.best(self.state)

    def _record(self, step, outcome, why, obs):
        stress, boot, ready = obs.get("stress") or {}, obs.get("boot") or {}, obs.get("ready") or {}
        record = {
            "n": step["n"], "f": step["value"], "text": step["text"], "outcome": outcome, "restart": step["restart"],
            "tokens": boot.get("max_total_num_tokens"), "min_free_gib": stress.get("min_free_gib"),
            "min_free_gib_per_gpu": stress.get("min_free_gib_per_gpu") or {},
            "peak_tokens_held": stress.get("peak_tokens_held"), "fill_reached": stress.get("fill_reached"),
            "requests_completed": stress.get("requests_completed", 0),
            "throughput_tokens_per_s": stress.get("throughput_tokens_per_s"), "ready_s": ready.get("elapsed_s"),
            "invocation_id": ready.get("invocation_id"), "why": why, "next": None,
            # What the server said it runs, as written there (the command line's text, the log's value).
            "read_back": {"command_line": ((obs.get("running") or {}).get("server_args") or {}).get("mem_fraction_static"),
                          "startup_log": (boot.get("server_args") or {}).get("mem_fraction_static")},
        }
        self.trials.append(record)
        return record

    def progress_line(self):
        """One line for the trial just recorded."""
        t = self.trials[-1]
        if t["outcome"] == "unverified":
            tail = "stopped"
        elif t["outcome"] == "untrusted":
            tail = "again " + self.text(t["next"])
        elif self.state["done"]:
            tail = "done: " + self.state["reason"]
        else:
            tail = "next " + self.text(t["next"])
        return ("%s: trial %d/%d f=%s%s, %s KV tokens, min free under load %s: %s%s; %s"
                % (self.host, t["n"], self.s["budget"], t["text"],
                   " (restart)" if t["restart"] else " (running, no restart)", _count(t["tokens"]),
                   "-" if t["min_free_gib"] is None else "%.2f GiB" % t["min_free_gib"], t["outcome"],
                   (" (%s)" % t["why"]) if t["outcome"] != "stable" and t["why"] else "", tail))

    def start_line(self):
        if self.verify is not None:
            return ("%s: verifying %s on %s (%s), its class's value less %d grid step(s), under the load; its own "
                    "search if it does not hold (at most %d trials)." % (
                        self.host, self.text(self.verify), self.s["unit"], self.reason, self.s["class_margin_steps"],
                        self.s["budget"]))
        return ("%s: tuning %s (%s) from %s, cap %s, resolution %s, safety %s GiB, at most %d trials."
                % (self.host, self.s["unit"], self.reason, self.text(self.start), self.s["cap"], self.s["resolution"],
                   self.s["safety_gib"], self.s["budget"]))

    def after(self):
        """The value the host runs now and its KV tokens (the best trial's; the last-known-good's without one)."""
        if self.best is None:
            return dict(self.before)
        tokens = [t["tokens"] for t in self.trials if t["outcome"] == "stable" and kv_search.same_value(t["f"], self.best)]
        return {"mem_fraction_static": self.best, "tokens": tokens[0] if tokens else None, "text": self.text(self.best)}

    def result(self, status, started, finished, versions):
        """The report of this tune (the controller's <host>.json)."""
        search = {} if self.state is None else {key: self.state[key] for key in (
            "reason", "best", "floor", "ceiling", "cap", "resolution", "safety_gib", "budget", "p_gib", "growth")}
        return {
            "host": self.host, "unit": self.s["unit"], "status": status, "why": self.reason, "error": self.error,
            "before": self.before, "after": self.after(), "restarts": self.restarts, "search": search,
            "trials": self.trials, "settings": {key: self.s[key] for key in (
                "cap", "resolution", "safety_gib", "budget", "min_tokens", "stress_duration", "stress_fill_ratio")},
            "versions": versions, "fingerprint": self.fingerprint, "fingerprint_hash": self.fingerprint_hash,
            "started": started, "time": finished,
            "verify": None if self.verify is None else {"value": self.verify, "held": bool(self.verified)},
        }

    def fact_entry(self, finished):
        """The unit's entry in /etc/ansible/facts.d/sglang_kv.fact: the pinned value and what proved it."""
        after = self.after()
        return {
            "mem_fraction_static": after["mem_fraction_static"], "text": after["text"],
            "tokens": after["tokens"], "before": self.before, "restarts": self.restarts,
            "trials": [{key: t[key] for key in FACT_TRIAL_KEYS} for t in self.trials],
            "fingerprint": self.fingerprint, "fingerprint_hash": self.fingerprint_hash,
            "versions": (self.fingerprint or {}).get("versions"),
            "settings": {key: self.s[key] for key in ("cap", "resolution", "safety_gib", "budget", "min_tokens")},
            "time": finished,
        }


# --------------------------------------------------------------------------------------------------------------
# Lines and the fleet summary
# --------------------------------------------------------------------------------------------------------------

def _count(tokens):
    return "?" if tokens is None else "{:,}".format(int(tokens))


def _text(value, resolution=None, text=None):
    if text is not None:
        return text
    if value is None:
        return "?"
    if resolution and kv_search.on_grid(value, resolution):
        return kv_search.value_text(value, resolution)
    return kv_search.value_text(value)


def result_line(result):
    """``host: 0.880 -> 0.910, KV 159,282 -> 202,389 tokens (+27%), 1 restart``."""
    before, after = result["before"], result["after"]
    resolution = result["settings"]["resolution"]
    gain = ""
    if before.get("tokens") and after.get("tokens"):
        gain = " (%+.0f%%)" % (100.0 * (after["tokens"] - before["tokens"]) / before["tokens"])
    note = {"tuned": "", "no_stable_value": " (NO STABLE VALUE: last-known-good kept)"}.get(
        result["status"], " (FAILED: %s)" % result.get("error"))
    verify = result.get("verify")
    if verify:
        note += (", the class's value held" if verify["held"] else
                 ", the class's value %s did not hold: searched on its own" % _text(verify["value"], resolution))
    return ("%s: %s -> %s, KV %s -> %s tokens%s, %d restart%s%s"
            % (result["host"], _text(before.get("mem_fraction_static"), resolution, before.get("text")),
               _text(after.get("mem_fraction_static"), resolution, after.get("text")), _count(before.get("tokens")),
               _count(after.get("tokens")), gain, result["restarts"], "" if result["restarts"] == 1 else "s", note))


def summary_rows(outcomes, pending=()):
    """The fleet summary: one row per host of ``outcomes`` (host -> the kv_tune task's registered result, None when
    the host never got there: unreachable, failed earlier, or in a batch that has not run: ``pending``). An unchanged
    host keeps what its last tune found."""
    rows = []
    for host in sorted(outcomes):
        res = outcomes[host] or {}
        status = res.get("status")
        if res.get("follower_of"):
            rows.append({"host": host, "status": status, "after": res.get("value"), "line": res.get("line"),
                         "follower_of": res["follower_of"]})
        elif not res and host in pending:
            rows.append({"host": host, "status": "not tuned: its batch has not run",
                         "line": "%s: NOT STARTED (a later batch; the run stops at a batch with a failed host)"
                                 % host})
        elif status == "unchanged":
            pin = res.get("pin") or {}
            rows.append({"host": host, "status": "unchanged", "after": pin.get("mem_fraction_static"),
                         "tokens_after": pin.get("tokens"), "restarts": 0, "tuned_at": pin.get("time"),
                         "line": "%s: unchanged, keeps %s (%s KV tokens) pinned %s"
                                 % (host, _text(pin.get("mem_fraction_static"),
                                                (pin.get("settings") or {}).get("resolution"), pin.get("text")),
                                    _count(pin.get("tokens")), pin.get("time", "?"))})
        elif status in ("tuned", "no_stable_value", "failed") and res.get("result"):
            result = res["result"]
            verify = result.get("verify")
            rows.append({"host": host, "status": status, "before": result["before"]["mem_fraction_static"],
                         "after": result["after"]["mem_fraction_static"], "tokens_before": result["before"]["tokens"],
                         "tokens_after": result["after"]["tokens"], "restarts": result["restarts"],
                         "tuned_at": result["time"], "line": result_line(result),
                         "search": "search" if verify is None else "verified" if verify["held"] else "fallback"})
        elif status in ("reset", "would_reset"):
            rows.append({"host": host, "status": status, "line": res.get("line")})
        elif status == "would_tune":
            rows.append({"host": host, "status": "would be tuned (check mode)", "why": res.get("why"),
                         "line": "%s: would be tuned (%s)" % (host, res.get("why"))})
        else:
            why = res.get("msg") if res.get("failed") else None
            rows.append({"host": host, "status": "not tuned: failed or unreachable, left on its last-known-good value",
                         "error": why, "line": "%s: NOT TUNED (%s; left on its last-known-good value)"
                                               % (host, why or "failed or unreachable")})
    return rows


def restarts_line(rows):
    """What the run cost: ``restarts: 7 in all (searches 4 on 2 hosts, verifications 3 on 3 hosts, ...)``."""
    spent = {}
    for row in rows:
        if row.get("restarts") is not None and row["status"] != "unchanged":
            kind = {"search": "searches", "verified": "verifications", "fallback": "failed verifications and "
                    "searches"}[row.get("search", "search")]
            count, hosts = spent.get(kind, (0, 0))
            spent[kind] = (count + row["restarts"], hosts + 1)
    total = sum(count for count, _hosts in spent.values())
    parts = ["%s %d on %d host%s" % (kind, count, hosts, "" if hosts == 1 else "s")
             for kind, (count, hosts) in sorted(spent.items())]
    return "restarts: %d in all%s" % (total, " (%s)" % ", ".join(parts) if parts else "")


# --------------------------------------------------------------------------------------------------------------
# The Markdown report
# --------------------------------------------------------------------------------------------------------------

def report_markdown(result):
    """<host>.md: what was decided, the trials, the fingerprint."""
    res = result["settings"]["resolution"]
    fp = result.get("fingerprint") or {}
    gpu, model, versions = fp.get("gpu") or {}, fp.get("model") or {}, result.get("versions") or {}
    lines = [
        "# KV tuning of %s (%s)" % (result["host"], result["unit"]), "",
        "%s: **%s**, because %s." % (result["time"], result["status"].replace("_", " "), result["why"]), "",
    ]
    if result.get("error"):
        lines += ["Error: %s" % result["error"], ""]
    lines += [
        "| | --mem-fraction-static | KV tokens |", "|---|---:|---:|",
        "| before | %s | %s |" % (_text(result["before"]["mem_fraction_static"], res, result["before"].get("text")),
                                  _count(result["before"]["tokens"])),
        "| after | %s | %s |" % (_text(result["after"]["mem_fraction_static"], res, result["after"].get("text")),
                                 _count(result["after"]["tokens"])),
        "",
        "%d restart(s); the search ended: %s." % (result["restarts"], result["search"].get("reason") or "-"),
        "Settings: cap %s, resolution %s, safety %s GiB, budget %s trials, load %s of the pool for %s s." % tuple(
            result["settings"][k] for k in ("cap", "resolution", "safety_gib", "budget", "stress_fill_ratio",
                                            "stress_duration")),
        "", "## Trials", "",
        "| # | f | restart | outcome | KV tokens | min free under load (GiB) | peak tokens held | requests "
        "| ready after (s) | why |",
        "|---:|---:|:---:|---|---:|---:|---:|---:|---:|---|",
    ]
    for t in result["trials"]:
        why = (t.get("why") or "").replace("|", "/")
        lines.append("| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            t["n"], t["text"], "yes" if t["restart"] else "no", t["outcome"],
            "-" if t["tokens"] is None else _count(t["tokens"]),
            "-" if t["min_free_gib"] is None else "%.2f" % t["min_free_gib"],
            "-" if t.get("peak_tokens_held") is None else _count(t["peak_tokens_held"]),
            t.get("requests_completed", 0), t.get("ready_s") if t.get("ready_s") is not None else "-",
            why[:157] + "..." if len(why) > 160 else why))
    lines += [
        "", "## Fingerprint `%s`" % (result.get("fingerprint_hash") or "")[:16], "",
        "GPUs: %s x %s (%s MiB);" % (gpu.get("count"), gpu.get("name"), gpu.get("memory_total_mib")),
        "driver %s, CUDA %s, SGLang %s;" % (versions.get("driver"), versions.get("cuda"), versions.get("sglang")),
        "model %s (config sha256 %s)." % (model.get("path"), (model.get("config_sha256") or "-")[:16]), "",
    ]
    return "\n".join(lines)

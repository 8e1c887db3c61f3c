# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""One trial, judged: what it was by the phase in which it ended, how much memory an OOM lacked, what follows the pool,
and whether the server ran the value it was given."""
from __future__ import annotations

from typing import Any

from ansible_collections.llmserve.sglang.plugins.module_utils.capacity import kv_search


OOM_KINDS = ("capture_oom", "runtime_oom")


# Failures that no value of f can fix: the search ends on them instead of lowering f.
_FATAL_KINDS = ("unbalanced_memory", "nccl_error", "weights_oom")


def classify_trial(ready: dict[str, Any], stress: dict[str, Any] | None, boot: dict[str, Any] | None,
                   not_memory_gib: float | None = None) -> tuple[str, str | None]:
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
        if kind in OOM_KINDS:
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
    if kind in OOM_KINDS:
        return "startup_oom", failure.get("line")
    if kind is not None:
        return "fatal", "%s: %s" % (kind, failure.get("line"))
    if ready.get("reason") == "timeout":
        return "timeout", "timeout: %s" % ready.get("detail")
    return "crash", "%s: %s" % (ready.get("reason"), ready.get("detail"))


def oom_deficit_gib(boot: dict[str, Any] | None) -> float | None:
    """GiB that were missing when the boot ran out of memory (torch's "Tried to allocate" minus "free"), or None."""
    oom = ((boot or {}).get("failure") or {}).get("oom") or {}
    if oom.get("tried_gib") is None or oom.get("free_gib") is None:
        return None
    return max(0.0, float(oom["tried_gib"]) - float(oom["free_gib"]))


def growth(boot: dict[str, Any] | None) -> float | None:
    """KV-like memory per GiB of KV budget: (target + draft KV) / target KV of the boot (a classic EAGLE draft's own
    pool grows with the target's), or None when the log does not say."""
    kv, draft = (boot or {}).get("kv_size_gib"), (boot or {}).get("draft_kv_size_gib")
    if not kv:
        return None
    return (kv + (draft or 0.0)) / kv


def restarted_after_its_oom(obs: dict[str, Any], start: str | None) -> bool:
    """Whether the trial's start ``start`` answered, died of its own out-of-memory under the load (its own log says
    so: the observation's boot was read from that start, ``source`` ``... invocation=<start>``), and the unit now runs
    another start only because systemd's Restart= started it again before the tuner looked. The verdict is that
    start's; the new start is no measurement of the trial."""
    boot = obs.get("boot") or {}
    ready = (obs.get("ready") or {}).get("invocation_id")
    return bool(start and ready in (None, start) and (obs.get("stress") or {}).get("held") is False
                and ((boot.get("failure") or {}).get("kind") in OOM_KINDS)
                and (boot.get("source") or "").endswith("invocation=%s" % start))


def readback_error(text: str, argv_value: Any, log_value: Any) -> str | None:
    """None when the server ran the trial's value; else why not. ``argv_value`` is the --mem-fraction-static on the
    running server's command line (None: not running, or no flag), ``log_value`` the one its startup log printed
    (None: no server_args line)."""
    wanted = kv_search.parse_value(text)
    seen: list[str] = []
    for where, value in (("its command line", argv_value), ("its startup log", log_value)):
        if value is not None and not kv_search.same_value(value, wanted):
            seen.append("%s says %s" % (where, value))
    if not seen:
        return None
    return ("the server did not run the trial's --mem-fraction-static %s: %s. Something else sets the value "
            "(another drop-in, an edited unit?)" % (text, " and ".join(seen)))


def not_memory_gib(boot: dict[str, Any], running_boot: dict[str, Any], safety_gib: float) -> float | None:
    """Free GiB under load above which a crash is not a lack of memory: a tenth of the memory before the weights (the
    trial's boot's, else the running server's), at least four margins."""
    p = boot.get("pre_load_free_gib") or running_boot.get("pre_load_free_gib")
    return max(4 * safety_gib, 0.1 * p) if p else None


def above_the_class(min_free_gib: float | None, p: float | None, settings: dict[str, Any]) -> bool:
    """Whether the free memory under load at the verified value leaves room for a value above the class's own
    (the verified value plus the margin's steps): whole grid steps of P x resolution beyond the safety margin."""
    if min_free_gib is None or not p:
        return False
    spare_steps = int((min_free_gib - settings["safety_gib"]) / (p * settings["resolution"]) + kv_search.TOLERANCE)
    return spare_steps > settings["class_margin_steps"]


def identity_error(step: dict[str, Any], obs: dict[str, Any], invocation_id: str | None) -> str | None:
    """Why the server that answered and held the load is not the start the trial ``step`` made (a revert by the
    host's timer, a restart by anyone), or None; ``invocation_id``: the running server's start (a trial in place)."""
    wanted = ((obs.get("started") or {}).get("invocation_id") if step["restart"] else invocation_id)
    seen = [(where, (obs.get(key) or {}).get("invocation_id")) for where, key in (
        ("the server that answered is", "ready"), ("the unit now runs", "running"))]
    wrong = ["%s start %s" % (where, value) for where, value in seen if value is not None and value != wanted]
    if not wrong or wanted is None or restarted_after_its_oom(obs, wanted):
        return None
    return ("this trial started %s, but %s: the host reverted it, or something restarted it, so the measurements "
            "are not this value's" % (wanted, " and ".join(wrong)))

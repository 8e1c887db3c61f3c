# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Where a unit's --mem-fraction-static lives on the host, and the text of each place. Pure and stdlib only.

- the pin: ``/etc/systemd/system/<unit>.d/50-kv-tune.conf`` sets ``LLMSERVE_KV_ARGS`` (the unit's ExecStart ends
  with ``$LLMSERVE_KV_ARGS``), and the unit's entry in ``/etc/ansible/facts.d/sglang_kv.fact`` says what proved it;
  with ``kv_tune_pin_tokens`` the entry's ``max_total_tokens`` caps the pool at the verified one, and the pin then
  also sets ``--max-total-tokens`` (:func:`tuner_cap` tells that cap from the operator's own on a command line);
- a trial: ``/run/systemd/system/<unit>.d/90-kv-trial.conf`` (runtime only, gone at reboot, sorts after the pin)
  with ``Restart=no`` (a trial that fails stays down to be classified), guarded by a transient timer
  ``llmserve-kv-revert-<run>-<unit>.timer`` that runs :data:`REVERT_SCRIPT` unless a commit stops it first;
- the lock of a tuning run: ``/run/llmserve/kv-tune-<unit>.lock`` (JSON: the run, its controller, until when), so
  that two runs never tune one unit at once; it lapses by itself after a controller that died.
"""
from __future__ import annotations

import json
import re
import time
from typing import Any, Sequence

from ansible_collections.llmserve.sglang.plugins.module_utils import checks

KV_ARGS_VARIABLE = "LLMSERVE_KV_ARGS"
FACT_PATH = "/etc/ansible/facts.d/sglang_kv.fact"
REVERT_SCRIPT = "/usr/local/sbin/llmserve-kv-revert"
# A file, not an inline `sh -c`: systemd re-escapes a transient unit's command line on daemon-reload, and a ';' in
# it would stop being a separator.
REVERT_SCRIPT_TEXT = """#!/bin/sh
# Installed by llmserve.sglang (module kv_trial). Run by the transient timer armed before each KV trial, when the
# controller never confirmed the trial (killed, network cut): remove the trial's drop-in and restart UNIT on its
# last-known-good value (the pinned drop-in, or the base unit).
#   llmserve-kv-revert UNIT TRIAL_DROPIN
set -eu
unit=$1
dropin=$2
echo "llmserve-kv-revert: the KV trial of $unit was not confirmed; removing $dropin and restarting on the last-known-good value"
rm -f "$dropin"
systemctl daemon-reload
systemctl reset-failed "$unit" 2>/dev/null || true
exec systemctl restart --no-block "$unit"
"""
_UNIT = re.compile(r"^[A-Za-z0-9_.@-]+\.service$")
# What value_text writes: a decimal in (0, 1), nothing a drop-in line could be abused with.
_VALUE = re.compile(r"^0?\.[0-9]{1,17}$")


class PinError(checks.InvalidInput):
    """A unit name, a value or a fact file the tuner will not write; the message says which."""


def check_unit(unit: Any) -> str:
    if not isinstance(unit, str) or not _UNIT.match(unit):
        raise PinError("unit must be a systemd service name such as sglang.service, got %r" % (unit,))
    return unit


def check_value_text(text: Any) -> str:
    """The written --mem-fraction-static: a plain decimal strictly between 0 and 1 (e.g. 0.910)."""
    if not isinstance(text, str) or not _VALUE.match(text) or not 0 < float(text) < 1:
        raise PinError("value must be a decimal strictly between 0 and 1 such as 0.910, got %r" % (text,))
    return text


LOCK_DIR = "/run/llmserve"
REVERT_PREFIX = "llmserve-kv-revert-"
# How long a trial may wait for its confirmation (kv_tune_confirm_timeout, kv_trial's confirm_timeout), as
# run_settings.BOUNDS writes a range: here, where kv_trial reads it without the tuner's settings.
CONFIRM_TIMEOUT_BOUNDS = (3, 86400, "seconds", "a day: longer leaves an unverified value on a host that lost its "
                                               "controller for that long")
_RUN_ID = re.compile(r"^[0-9a-f]{8}$")


def check_run_id(run_id: Any) -> str:
    if not isinstance(run_id, str) or not _RUN_ID.match(run_id):
        raise PinError("run_id must be 8 lower-case hex digits, got %r" % (run_id,))
    return run_id


def unit_stem(unit: str) -> str:
    """``sglang`` of sglang.service, ``sglang-a`` of sglang@a.service: a unit's name in the names of its files and
    helper units (a second '@' would make those template instances)."""
    return unit[:-len(".service")].replace("@", "-")


def paths(unit: str, run_id: str | None = None) -> dict[str, str]:
    """The pin drop-in, the trial drop-in, the lock file and the revert timer's unit name (without suffix) of
    ``unit``, the timer's for the run ``run_id`` (each run its own, so that one run never stops another's)."""
    check_unit(unit)
    stem = unit_stem(unit)
    return {
        "pin": "/etc/systemd/system/%s.d/50-kv-tune.conf" % unit,
        "trial": "/run/systemd/system/%s.d/90-kv-trial.conf" % unit,
        "lock": "%s/kv-tune-%s.lock" % (LOCK_DIR, unit),
        "revert_unit": REVERT_PREFIX + ("%s-%s" % (check_run_id(run_id), stem) if run_id else stem),
    }


def is_revert_timer(name: str, unit: str) -> bool:
    """Whether the systemd unit ``name`` is a revert timer of ``unit``'s trials (any run's, or one armed before
    runs had their own)."""
    stem = unit_stem(check_unit(unit))
    if not name.startswith(REVERT_PREFIX) or not name.endswith(".timer"):
        return False
    rest = name[len(REVERT_PREFIX):-len(".timer")]
    return rest == stem or (len(rest) > 9 and _RUN_ID.match(rest[:8]) is not None and rest[8] == "-"
                            and rest[9:] == stem)


# --------------------------------------------------------------------------------------------------------------
# The lock of a run
# --------------------------------------------------------------------------------------------------------------

def lock_text(run_id: str, controller: Any, now: float, lease_s: float) -> str:
    """The lock file of run ``run_id`` from ``controller`` (who: host and pid), valid ``lease_s`` seconds from
    ``now`` (epoch seconds); each step of the run renews it."""
    return json.dumps({"run_id": check_run_id(run_id), "controller": str(controller), "renewed": int(now),
                       "expires": int(now + lease_s)}, sort_keys=True) + "\n"


def lock_holder(text: str | None, now: float, run_id: str | None = None) -> tuple[str, dict[str, Any] | None]:
    """(state, the lock as data): ``free`` (no lock, or one that lapsed: its controller died), ``ours`` (held by
    ``run_id``) or ``held`` (another live run). A lock file that cannot be read is ``free``: it protects
    nothing."""
    if not text:
        return "free", None
    try:
        lock = json.loads(text)
        expires = float(lock["expires"])
    except (ValueError, KeyError, TypeError):
        return "free", None
    if run_id is not None and lock.get("run_id") == run_id:
        return "ours", lock
    return ("free" if expires <= now else "held"), lock


def lock_message(unit: str, lock: dict[str, Any], path: str) -> str:
    return ("%s is held by run %s from %s (a tune, or rollout.yml; lock %s, renewed at %s, until %s UTC): nothing "
            "was done. If that run is gone, its host reverts any trial by itself; wait until then, or remove the lock."
            % (unit, lock.get("run_id"), lock.get("controller"), path, _utc(lock.get("renewed")),
               _utc(lock.get("expires"))))


def _utc(epoch: Any) -> str:
    try:
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(float(epoch)))
    except (TypeError, ValueError):
        return "?"


def kv_args(text: str, max_total_tokens: int | None = None) -> list[str]:
    """The words LLMSERVE_KV_ARGS holds: ``--mem-fraction-static <text>``, and the pin's cap on the pool when it
    has one."""
    words = ["--mem-fraction-static", check_value_text(text)]
    if max_total_tokens is not None:
        words += ["--max-total-tokens", str(check_cap(max_total_tokens))]
    return words


def check_cap(tokens: Any) -> int:
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
        raise PinError("max_total_tokens must be a positive whole number of tokens, got %r" % (tokens,))
    return tokens


def dropin_text(unit: str, text: str, trial: bool, run_id: str | None = None,
                max_total_tokens: int | None = None) -> str:
    """The drop-in that sets LLMSERVE_KV_ARGS to ``--mem-fraction-static <text>`` (and, for a pin with a cap,
    ``--max-total-tokens <max_total_tokens>``): the pin, or a trial of run ``run_id`` (a trial never caps: it
    measures the pool its value gives)."""
    check_value_text(text)
    if trial and max_total_tokens is not None:
        raise PinError("a trial measures the pool its value gives: it takes no max_total_tokens")
    if trial:
        head = ("# llmserve.sglang.kv_tune: UNCONFIRMED trial of --mem-fraction-static %s. Runtime only: gone at\n"
                "# reboot. Unless the controller confirms it, %s.timer removes this file and\n"
                "# restarts %s on its last-known-good value.\n" % (text, paths(unit, run_id)["revert_unit"], unit))
    else:
        capped = "" if max_total_tokens is None else (
            "# The pool is capped at the one that load verified (kv_tune_pin_tokens).\n")
        head = ("# llmserve.sglang.kv_tune: the pinned --mem-fraction-static of %s, proved stable under a load that\n"
                "# fills the KV pool. Details: %s.\n%s" % (unit, FACT_PATH, capped))
    body = '[Service]\nEnvironment="%s=%s"\n' % (KV_ARGS_VARIABLE, " ".join(kv_args(text, max_total_tokens)))
    if trial:
        body += "# A trial that fails stays down: the tuner classifies it instead of systemd retrying it.\nRestart=no\n"
    return head + body


_DROPIN_VALUE = re.compile(r'^Environment="%s=--mem-fraction-static (0?\.[0-9]{1,17})(?: |")' % KV_ARGS_VARIABLE,
                           re.MULTILINE)


def dropin_value(text: str | None) -> float | None:
    """The --mem-fraction-static a drop-in written by :func:`dropin_text` sets, or None (no such line)."""
    match = _DROPIN_VALUE.search(text or "")
    return float(match.group(1)) if match else None


def read_facts(text: str | None, path: str = FACT_PATH) -> dict[str, Any]:
    """The fact file's JSON (a dict of unit -> entry); {} for no file. Anything else is an error (PinError): the
    caller decides what to do with a broken file (kv_trial moves it aside before it writes a new one)."""
    if text is None or not text.strip():
        return {}
    try:
        facts = json.loads(text)
    except ValueError as exc:
        raise PinError("%s is not JSON (%s): fix or remove it" % (path, exc)) from None
    if not isinstance(facts, dict):
        raise PinError("%s holds a %s, not a dict of units" % (path, type(facts).__name__))
    return facts


def check_entry(entry: Any) -> str | None:
    """What is wrong with a unit's entry in the fact file (hand-edited, truncated) for the tuner to rely on, or
    None."""
    if not isinstance(entry, dict):
        return "its entry is a %s, not a mapping" % type(entry).__name__
    value = entry.get("mem_fraction_static")
    if not checks.is_number(value) or not 0 < value < 1:
        return "its mem_fraction_static %r is not a number in (0, 1)" % (value,)
    digest = entry.get("fingerprint_hash")
    if not isinstance(digest, str) or not re.match(r"^[0-9a-f]{64}$", digest):
        return "its fingerprint_hash %r is not a sha256" % (digest,)
    if entry.get("max_total_tokens") is not None:
        try:
            check_cap(entry["max_total_tokens"])
        except PinError:
            return "its max_total_tokens %r is not a positive whole number" % (entry["max_total_tokens"],)
    return None


def pool_cap(tokens: int | None, split: bool | None,
             class_tokens: int | None = None) -> tuple[int | None, str | None]:
    """(the cap a pin writes with kv_tune_pin_tokens, None) or (None, why it writes none). ``tokens``: the pool the
    value was verified with; ``split``: whether SGLang splits the model's KV memory between pools (None: unknown);
    ``class_tokens``: the pool of the class's canary, for a member (the class then serves one pool where memory
    allows; a member's own smaller pool stays its own)."""
    if split is None:
        return None, "neither the model's config.json nor a startup log tells whether SGLang splits its KV pool"
    if split:
        return None, ("SGLang applies --max-total-tokens to a hybrid model's pool before it splits it, so the cap "
                      "would not give the verified pool back")
    if not tokens:
        return None, "the verified pool's size is unknown (its startup log did not say)"
    return (min(tokens, class_tokens) if class_tokens else tokens), None


def cap_change(entry: dict[str, Any] | None, pin_tokens: Any) -> str | None:
    """What kv_tune_pin_tokens asks of a pin that holds, without a restart: ``cap`` (the pin never decided on a
    cap), ``uncap`` (it has one and the option is off) or None. A pin that decided on no cap (a hybrid model)
    records ``max_total_tokens: null`` and stays as it is."""
    if not entry:
        return None
    if pin_tokens and "max_total_tokens" not in entry:
        return "cap"
    if not pin_tokens and entry.get("max_total_tokens") is not None:
        return "uncap"
    return None


def tuner_cap(argv: Sequence[str], entry: Any) -> tuple[list[str], int | None]:
    """(the command line without the pin's cap, that cap): the pin's ``--max-total-tokens`` is the tuner's output,
    like ``--mem-fraction-static``, and not part of what the server was tuned under. It is the pin's when the
    command line ends with the words the pin writes (:func:`kv_args`), or with them and the unit's
    ``--api-key KEY`` (the sglang_service unit puts it after them), and the unit's fact ``entry`` records that cap;
    an operator's own ``--max-total-tokens`` stays in the command line (it sizes the pool a trial measures).
    (argv, None) otherwise."""
    cap = (entry or {}).get("max_total_tokens") if isinstance(entry, dict) else None
    if cap is None or check_entry(entry) is not None:
        return list(argv), None
    argv = list(argv)
    # The unit's own tail after $LLMSERVE_KV_ARGS: nothing, or the sglang_service role's `--api-key KEY`.
    end = len(argv) - 2 if argv[-2:-1] == ["--api-key"] else len(argv)
    words = argv[end - 4:end] if end >= 4 else []
    if words[:1] != ["--mem-fraction-static"] or words[2:] != ["--max-total-tokens", str(cap)]:
        return argv, None
    return argv[:end - 2] + argv[end:], cap


def facts_text(current_text: str | None, unit: str, entry: dict[str, Any] | None) -> str:
    """The fact file with ``unit``'s entry set to ``entry`` (None: removed; the other units' entries kept), as
    written."""
    facts = read_facts(current_text)
    if entry is None:
        facts.pop(check_unit(unit), None)
    else:
        facts[check_unit(unit)] = entry
    return json.dumps(facts, indent=2, sort_keys=True) + "\n"

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Where a unit's --mem-fraction-static lives on the host, and the text of each place. Pure and stdlib only.

- the pin: ``/etc/systemd/system/<unit>.d/50-kv-tune.conf`` sets ``LLMSERVE_KV_ARGS`` (the unit's ExecStart ends
  with ``$LLMSERVE_KV_ARGS``), and the unit's entry in ``/etc/ansible/facts.d/sglang_kv.fact`` says what proved it;
- a trial: ``/run/systemd/system/<unit>.d/90-kv-trial.conf`` (runtime only, gone at reboot, sorts after the pin)
  with ``Restart=no`` (a trial that fails stays down to be classified), guarded by a transient timer
  ``llmserve-kv-revert-<unit>.timer`` that runs :data:`REVERT_SCRIPT` unless a commit stops it first.
"""
from __future__ import annotations

import json
import re

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


def check_unit(unit):
    if not isinstance(unit, str) or not _UNIT.match(unit):
        raise PinError("unit must be a systemd service name such as sglang.service, got %r" % (unit,))
    return unit


def check_value_text(text):
    """The written --mem-fraction-static: a plain decimal strictly between 0 and 1 (e.g. 0.910)."""
    if not isinstance(text, str) or not _VALUE.match(text) or not 0 < float(text) < 1:
        raise PinError("value must be a decimal strictly between 0 and 1 such as 0.910, got %r" % (text,))
    return text


def paths(unit):
    """The pin drop-in, the trial drop-in and the revert timer's unit name (without suffix) of ``unit``."""
    check_unit(unit)
    stem = unit[:-len(".service")]
    return {
        "pin": "/etc/systemd/system/%s.d/50-kv-tune.conf" % unit,
        "trial": "/run/systemd/system/%s.d/90-kv-trial.conf" % unit,
        "revert_unit": "llmserve-kv-revert-%s" % stem.replace("@", "-"),
    }


def dropin_text(unit, text, trial):
    """The drop-in that sets LLMSERVE_KV_ARGS to ``--mem-fraction-static <text>``: the pin, or a trial."""
    check_value_text(text)
    if trial:
        head = ("# llmserve.sglang.kv_tune: UNCONFIRMED trial of --mem-fraction-static %s. Runtime only: gone at\n"
                "# reboot. Unless the controller confirms it, %s.timer removes this file and\n"
                "# restarts %s on its last-known-good value.\n" % (text, paths(unit)["revert_unit"], unit))
    else:
        head = ("# llmserve.sglang.kv_tune: the pinned --mem-fraction-static of %s, proved stable under a load that\n"
                "# fills the KV pool. Details: %s.\n" % (unit, FACT_PATH))
    body = '[Service]\nEnvironment="%s=--mem-fraction-static %s"\n' % (KV_ARGS_VARIABLE, text)
    if trial:
        body += "# A trial that fails stays down: the tuner classifies it instead of systemd retrying it.\nRestart=no\n"
    return head + body


def read_facts(text):
    """The fact file's JSON (a dict of unit -> entry); {} for no file. Anything else is an error, not a reset."""
    if text is None or not text.strip():
        return {}
    try:
        facts = json.loads(text)
    except ValueError as exc:
        raise PinError("%s is not JSON (%s): fix or remove it" % (FACT_PATH, exc)) from None
    if not isinstance(facts, dict):
        raise PinError("%s holds a %s, not a dict of units" % (FACT_PATH, type(facts).__name__))
    return facts


def facts_text(current_text, unit, entry):
    """The fact file with ``unit``'s entry set to ``entry`` (the other units' entries kept), as written."""
    facts = read_facts(current_text)
    facts[check_unit(unit)] = entry
    return json.dumps(facts, indent=2, sort_keys=True) + "\n"

#!/usr/bin/python
# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

DOCUMENTATION = r"""
module: kv_watch_facts
short_description: What a pinned --mem-fraction-static leaves free under real traffic, and the verdict on it
version_added: 1.0.0
author:
  - llmserve.sglang contributors (@llmserve)
description:
  - Reads the windows that the headroom watch of an SGLang unit wrote (C(llmserve-kv-watch-<unit>.service), installed
    by the role llmserve.sglang.sglang_service with C(sglang_service_kv_watch)) and judges the windows since the
    unit's pin (its entry in O(fact_path), written by the KV tuner) against the margin the pin was verified with.
  - V(near_miss) when the least free memory of a GPU of the server fell under that margin while it served, when an
    out-of-memory line reached the server's journal, or when a window retracted O(storm_retractions) requests or more.
  - V(headroom) when, for O(headroom_hours) at a token usage of O(full_usage) or more, the least free memory stayed
    above the margin by more than O(headroom_steps) steps of the pin's resolution (C(proposed_value) in RV(evidence) is
    the highest value that memory allows, before any verification).
  - V(ok) when the pool was full for long enough and the spare memory is within those steps.
  - V(not_enough_traffic) when the pool was not full for O(headroom_hours), or the watch has no window since the pin.
    No proposal is made on traffic that never tested the pin.
  - Lines of the state file that are not windows of the watch (not JSON, too long, or a field of the wrong type) are
    counted in C(bad_line_count) of RV(watch) and named in C(bad_lines) (the first 20), never read.
    Reads only; changes nothing.
options:
  unit:
    description: The server's systemd unit.
    type: str
    required: true
  state_path:
    description: The watch's state file; the default is the one the role's watch writes for O(unit).
    type: path
  fact_path:
    description: The tuner's fact file, with the unit's pin.
    type: path
    default: /etc/ansible/facts.d/sglang_kv.fact
  full_usage:
    description:
      - The token usage (C(sglang:token_usage)) from which the pool counts as full; one of the bands the watch
        records, V(0.5), V(0.6), V(0.7), V(0.8), V(0.9) or V(0.95).
    type: float
    default: 0.9
  headroom_hours:
    description: Hours at a full pool before the windows are judged for headroom (0.0005 to 8760).
    type: float
    default: 24
  headroom_steps:
    description: Steps of the pin's resolution over the margin that are still V(ok); more is V(headroom) (0 to 100).
    type: int
    default: 2
  storm_retractions:
    description: Requests retracted in one window that make a retraction storm (a V(near_miss)) (1 to 1000000).
    type: int
    default: 20
  recent:
    description: How many of the last windows to return in RV(recent) (0 to 20160).
    type: int
    default: 12
notes:
  - A setting out of its range fails the module, naming it, its range and why.
  - The watch samples every few seconds; an allocation that comes and goes between two samples is not seen.
  - SGLang's gauges are refreshed after a prefill batch, every 40 decode steps, or every 30 s when idle.
extends_documentation_fragment:
  - llmserve.sglang.attributes
  - llmserve.sglang.attributes.read_only
seealso:
  - module: llmserve.sglang.kv_tune
"""

EXAMPLES = r"""
- name: Read the headroom of sglang.service under real traffic
  llmserve.sglang.kv_watch_facts:
    unit: sglang.service
  register: watch

- name: Say what it found
  ansible.builtin.debug:
    msg: "{{ watch.verdict }}: {{ watch.reasons | join('; ') }}"
"""

RETURN = r"""
verdict:
  description: V(near_miss), V(headroom), V(ok) or V(not_enough_traffic); V(null) when the unit has no pin.
  returned: always
  type: str
  sample: headroom
reasons:
  description: Why, in sentences with the numbers.
  returned: always
  type: list
  elements: str
  sample: ["at a token usage of 0.90 or more for 26.10 h, the least free memory was 3.50 GiB on GPU 3: ..."]
evidence:
  description:
    - The numbers of the windows since the pin (V(null) without a pin) - windows, from, to, value, margin_gib,
      full_usage, full_hours, least_free_gib, least_free_full_gib, step_gib, retractions, oom_lines, restarts,
      others_peak_gib, token_usage_peak, unreadable_lines (the state file's lines left out, also named in the last
      of RV(reasons)); spare_steps once the pool was full long enough, and proposed_value with V(headroom).
  returned: always
  type: dict
watch:
  description: The watch itself - unit, active (its ActiveState), path, windows (in the file), first and last (Unix
    times), stale (its last window is older than three windows), bad_line_count (the lines that are not windows),
    bad_lines (the first 20 of them, each C(line N) and why) and last_error (of the last window).
  returned: always
  type: dict
recent:
  description: The last O(recent) windows as the watch wrote them.
  returned: always
  type: list
  elements: dict
pin:
  description:
    - The unit's pin (mem_fraction_static, tokens, time, settings), V(null) when never tuned.
    - C(verified_min_free_gib) is the least free memory the tuner's stress load left at the pinned value when it was
      verified (V(null) when the pin records no such trial).
  returned: always
  type: dict
"""

import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmserve.sglang.plugins.module_utils.service import kv_pin
from ansible_collections.llmserve.sglang.plugins.module_utils.watch import journal, settings, store
from ansible_collections.llmserve.sglang.plugins.module_utils.watch.verdict import verdict as watch_verdict
from ansible_collections.llmserve.sglang.plugins.module_utils.host.host_commands import C_LOCALE, parse_show, unit_journal

PIN_KEYS = ("mem_fraction_static", "tokens", "time", "settings")


def read_pin(module, unit, fact_path):
    try:
        with open(fact_path, encoding="utf-8") as handle:
            text = handle.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        module.fail_json(msg="cannot read %s: %s" % (fact_path, exc.strerror or exc))
    try:
        entry = kv_pin.read_facts(text, fact_path).get(unit)
    except kv_pin.PinError as exc:
        module.fail_json(msg=str(exc))
    if entry is None:
        return None
    pin = {key: entry.get(key) for key in PIN_KEYS}
    # The least free memory the stress load left at the pinned value when it was verified: production's yardstick.
    verified = [trial.get("min_free_gib") for trial in entry.get("trials") or []
                if isinstance(trial, dict) and trial.get("outcome") == "stable" and trial.get("min_free_gib") is not None
                and abs((trial.get("f") or 0) - (entry.get("mem_fraction_static") or 0)) < 1e-6]
    pin["verified_min_free_gib"] = min(verified) if verified else None
    return pin


def watch_state(module, watch_unit):
    systemctl = module.get_bin_path("systemctl")
    if not systemctl:
        return None
    rc, out, _err = module.run_command([systemctl, "show", watch_unit, "--property=ActiveState,LoadState"],
                                       environ_update=C_LOCALE)
    state = parse_show(out) if rc == 0 else {}
    return state.get("ActiveState") if state.get("LoadState") == "loaded" else "not installed"


def judge(pin, records, bad, params):
    if pin is None:
        return None, ["the unit has no pin in %s: nothing to judge the windows against" % params["fact_path"]], None
    result = watch_verdict(pin, records, full_usage=params["full_usage"], headroom_steps=params["headroom_steps"],
                           headroom_hours=params["headroom_hours"], storm_retractions=params["storm_retractions"],
                           unreadable=bad)
    return result["verdict"], result["reasons"], result["evidence"]


def main():
    module = AnsibleModule(
        argument_spec=dict(
            unit=dict(type="str", required=True),
            state_path=dict(type="path"),
            fact_path=dict(type="path", default=kv_pin.FACT_PATH),
            full_usage=dict(type="float", default=settings.FULL_USAGE),
            headroom_hours=dict(type="float", default=24.0),
            headroom_steps=dict(type="int", default=2),
            storm_retractions=dict(type="int", default=20),
            recent=dict(type="int", default=12),
        ),
        supports_check_mode=True,
    )
    params = module.params
    try:
        settings.check_settings({name: params[name] for name in (
            "full_usage", "headroom_hours", "headroom_steps", "storm_retractions", "recent")})
        watch_unit = settings.watch_unit(params["unit"])
        path = params["state_path"] or settings.state_path(params["unit"])
        records, bad = store.read_records(path)
        # The server's OOM and retraction lines: root reads them, the watch cannot (its journal holds the API key).
        text, journal_error = unit_journal(module, params["unit"], records[0]["start"], journal.JOURNAL_GREP,
                                           journal.MAX_JOURNAL_LINES) if records else ("", None)
        records = journal.attach_journal(records, journal.journal_events(text or ""))
        pin = read_pin(module, params["unit"], params["fact_path"])
        verdict, reasons, evidence = judge(pin, records, bad, params)
    except settings.WatchError as exc:
        module.fail_json(msg=str(exc))
    last = records[-1] if records else None
    stale = None
    if last is not None:
        length = max(1.0, last["end"] - last.get("start", last["end"]))
        stale = bool(last["end"] < time.time() - 3 * length - 60)
    watch = {"unit": watch_unit, "active": watch_state(module, watch_unit), "path": path, "windows": len(records),
             "first": records[0].get("start") if records else None, "last": last and last["end"], "stale": stale,
             "bad_lines": bad[:20], "bad_line_count": len(bad), "last_error": last and last.get("last_error"),
             "journal_error": journal_error}
    recent = records[-params["recent"]:] if params["recent"] > 0 else []
    module.exit_json(changed=False, verdict=verdict, reasons=reasons, evidence=evidence, watch=watch, recent=recent,
                     pin=pin)


if __name__ == "__main__":
    main()

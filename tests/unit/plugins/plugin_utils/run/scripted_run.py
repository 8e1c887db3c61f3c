# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the run's tests share: a tiny interpreter (:func:`drive`) that performs a run's steps the way
plugins/action/kv_tune.py does, each call answered from a script; a unit that runs 0.88 and was never tuned."""
from __future__ import annotations

import copy
import json
from pathlib import Path

from ansible_collections.llmserve.sglang.plugins.plugin_utils.run.unit_run import UnitRun
from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner.run_settings import check_settings, with_defaults

CONFIG = json.loads((Path(__file__).resolve().parents[4] / "fixtures" / "configs" / "llama-3.1-70b.json").read_text())
# kv_fingerprint of a unit that runs 0.88 (start I0) and was never tuned: the base every script entry overrides.
FP = {"gpu": {"name": "NVIDIA H100 80GB HBM3", "count": 8, "memory_total_mib": 81559},
      "versions": {"driver": "580.1", "cuda": "13.0", "sglang": "0.5.9"},
      "model": {"path": "/models/llama-3.1-70b"}, "server_args": {"tp_size": 8}}
INFO = {"takes_kv_args": True, "lock": None, "stale": [], "running": True, "trial_pending": False,
        "revert_timers": [], "pin": None, "pin_error": None, "fingerprint": FP, "fingerprint_hash": "H1",
        "mem_fraction_static": 0.88, "gpu_memory": [], "url": "http://127.0.0.1:30000", "invocation_id": "I0",
        "checkpoint_bytes": None, "config": CONFIG, "sglang_version": "0.5.9",
        "server_args": {"tp_size": 8, "mem_fraction_static": 0.88}, "changed": False}
BOOT = {"pre_load_free_gib": 78.5, "post_load_free_gib": 13.9, "max_total_num_tokens": 117440,
        "kv_size_gib": 4.5, "server_args": {"mem_fraction_static": 0.88}}
ARGS = {"unit": "sglang.service", "units": None, "start": None, "cap": 0.98, "resolution": 0.005, "safety_gib": 1.0,
        "budget": 6, "min_tokens": None, "force": False, "reset": False, "model_revision": None,
        "url": "http://127.0.0.1:30000", "api_key": None, "ready_timeout": 1800, "ready_interval": 5,
        "stress_fill_ratio": 0.95, "stress_duration": 120, "confirm_timeout": None, "strategy": "per_host",
        "class_margin_steps": 0, "class_plan": None, "pin_tokens": False, "run_id": None, "watch": None}
PIN = {"mem_fraction_static": 0.92, "text": "0.920", "fingerprint_hash": "H1", "tokens": 131000,
       "time": "2026-11-30T10:00:00Z", "settings": {"resolution": 0.005}}


def drive(steps, script, nodes=False):
    """Perform ``steps`` as the action does: each call answered by the next script entry ``(what, answer)``, which
    must name it (``kv_trial <state> [<value>]`` for kv_trial; ``nodes <kind>`` for a message to the other nodes of a
    server, with ``nodes``); lines said are collected. (result, lines)."""
    script, said, answer = list(script), [], None
    while True:
        try:
            step = steps.send(answer)
        except StopIteration as stop:
            assert not script, "the run ended before %s" % [what for what, _answer in script]
            return stop.value, said
        allowed = {"call", "args", "may_fail", "say"} | ({"nodes", "message", "n", "ranks", "timeout", "what"}
                                                         if nodes else set())
        assert set(step) <= allowed, step
        if "say" in step:
            said.append(step["say"])
        answer = None
        if "nodes" in step:
            expected, answer = script.pop(0)
            assert "nodes " + step["nodes"] == expected, "nodes %s, the script expects %s" % (step["nodes"], expected)
        elif "call" in step:
            what = step["call"]
            if what == "kv_trial":
                what = " ".join(["kv_trial", step["args"]["state"]] + ([step["args"]["value"]]
                                                                       if "value" in step["args"] else []))
            assert script, "unexpected %s %s" % (what, step["args"])
            expected, answer = script.pop(0)
            assert what == expected, "%s, the script expects %s" % (what, expected)
            base = {"kv_fingerprint": INFO, "sglang_startup_facts": BOOT}.get(step["call"], {})
            answer = dict(copy.deepcopy(base), **(answer or {}))


def unit_run(check_mode=False, **args):
    """The run of sglang.service on gpu1 as run r1, with ``args`` over the defaults."""
    return UnitRun("gpu1", "gpu1", with_defaults(dict(ARGS, **args)), check_mode, "r1", "ctl pid 1",
                   lambda: "2026-12-06T00:00:00Z")


def settled_run(check_mode=False, **args):
    """unit_run's run as its phases find it once steps() has checked its settings: for a phase driven alone."""
    run = unit_run(check_mode=check_mode, **args)
    run.state.settings = check_settings(run.ctx.args)
    return run

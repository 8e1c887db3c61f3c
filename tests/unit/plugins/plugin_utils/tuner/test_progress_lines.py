# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The progress lines of a unit's tuning run: a line per phase, a heartbeat while a server loads or is loaded."""
from __future__ import annotations

from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner import progress_lines


class Clock(object):
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_a_trial_from_the_probe_to_the_pin():
    clock = Clock()
    progress = progress_lines.Progress("gpu3", clock)
    lines = [progress.on_call("kv_fingerprint", {"unit": "sglang.service"}),
             progress.on_call("kv_trial", {"state": "locked"}),
             progress.on_call("kv_trial", {"state": "started", "value": "0.910"}),
             progress.on_end("kv_trial", {"changed": True}),
             progress.on_call("sglang_ready", {})]
    for _second in range(4):   # a server that loads for 75 s: a line every 20 s
        clock.now += 5
        lines.append(progress.heartbeat())
    clock.now += 55
    lines += [progress.heartbeat(), progress.on_end("sglang_ready", {"ready": True}),
              progress.on_call("kv_stress", {"duration": 60})]
    clock.now += 21
    lines += [progress.heartbeat(), progress.on_end("kv_stress", {"held": True}),
              progress.on_call("kv_fingerprint", {}),   # the last look after the load: not a probe
              progress.on_call("kv_trial", {"state": "committed", "value": "0.910"})]
    assert [line for line in lines if line] == [
        "[kv_tune] gpu3: probe", "[kv_tune] gpu3: restarting 0.910", "[kv_tune] gpu3: loading 0.910",
        "[kv_tune] gpu3: loading 0.910 (20 s)", "[kv_tune] gpu3: loading 0.910 (75 s)", "[kv_tune] gpu3: ready 0.910",
        "[kv_tune] gpu3: under load 0.910", "[kv_tune] gpu3: under load 0.910 (21/60 s)",
        "[kv_tune] gpu3: verified 0.910", "[kv_tune] gpu3: pinned 0.910"]


def test_a_failed_wait_or_load_says_so_and_stops_the_heartbeat():
    clock = Clock()
    progress = progress_lines.Progress("gpu1 sglang@a", clock)
    progress.on_call("kv_trial", {"state": "started", "value": "0.950"})
    progress.on_call("kv_stress", {"duration": 60})
    assert progress.on_end("kv_stress", {"held": False, "failure_reason": "runtime OOM"}) == \
        "[kv_tune] gpu1 sglang@a: failed 0.950"
    clock.now += 100
    assert progress.heartbeat() is None
    assert progress.on_call("kv_trial", {"state": "reverted"}) == "[kv_tune] gpu1 sglang@a: reverted 0.950"
    assert progress.on_end("sglang_ready", {"ready": False, "failed": True}) == "[kv_tune] gpu1 sglang@a: failed 0.950"


def test_nothing_is_said_before_the_run_has_a_phase_or_for_other_calls():
    progress = progress_lines.Progress("gpu1", Clock())
    assert progress.on_end("kv_stress", {"held": False}) is None and progress.heartbeat() is None
    assert progress.on_call("gpu_info", {}) is None and progress.on_call("sglang_startup_facts", {}) is None


def test_every_line_parses_back():
    for line, expected in [
        ("[kv_tune] gpu3: loading 0.910 (20 s)",
         {"label": "gpu3", "phase": "loading", "value": "0.910", "detail": "20 s"}),
        ("[kv_tune] gpu1 sglang@a: under load 0.950 (21/60 s)",
         {"label": "gpu1 sglang@a", "phase": "under load", "value": "0.950", "detail": "21/60 s"}),
        ("[kv_tune] gpu3: probe", {"label": "gpu3", "phase": "probe", "value": None, "detail": None}),
    ]:
        assert progress_lines.parse_line(line) == expected
    assert progress_lines.parse_line("gpu3: 0.880 -> 0.910, KV 159,282 -> 202,389 tokens (+27%), 1 restart") is None


def test_a_load_measured_in_place_names_the_running_value():
    progress = progress_lines.Progress("gpu1", Clock())
    assert progress.on_call("kv_fingerprint", {}) == "[kv_tune] gpu1: probe"
    progress.on_end("kv_fingerprint", {"mem_fraction_static": 0.91})
    assert progress.on_call("kv_stress", {"duration": 3}) == "[kv_tune] gpu1: under load 0.910"
    shown = [progress_lines.shown_value(v) for v in (0.91, 0.8855, 0.9, 0.87123)]
    assert shown == ["0.910", "0.8855", "0.900", "0.8712"]


def test_a_first_tune_names_each_phase_for_what_happens():
    # issue 32: a first tune read "loading 0.880 / ready 0.880" twice and "pinned 0.880" before the new value's
    # restart, where nothing was loaded or newly pinned
    progress = progress_lines.Progress("gpu1", Clock())
    calls = [("kv_fingerprint", {}, {"mem_fraction_static": 0.88}), ("kv_trial", {"state": "locked"}, {}),
             ("sglang_ready", {}, {"ready": True}),                       # the probe's look at the running server
             ("sglang_ready", {}, {"ready": True}), ("kv_stress", {"duration": 40}, {"held": True}),
             ("kv_trial", {"state": "committed", "value": "0.880"}, {}),  # the running value, measured in place
             ("kv_trial", {"state": "started", "value": "0.910"}, {}), ("sglang_ready", {}, {"ready": True}),
             ("kv_stress", {"duration": 40}, {"held": False}),
             ("kv_trial", {"state": "reverted"}, {}), ("sglang_ready", {}, {"ready": True}),
             ("kv_trial", {"state": "started", "value": "0.900"}, {}), ("sglang_ready", {}, {"ready": True}),
             ("kv_stress", {"duration": 40}, {"held": True}), ("kv_trial", {"state": "committed", "value": "0.900"}, {})]
    lines = []
    for name, args, result in calls:
        lines += [progress.on_call(name, args), progress.on_end(name, result)]
    assert [line.split(": ", 1)[1] for line in lines if line] == [
        "probe", "checking 0.880", "serving 0.880", "checking 0.880", "serving 0.880", "under load 0.880",
        "verified 0.880", "kept 0.880", "restarting 0.910", "loading 0.910", "ready 0.910", "under load 0.910",
        "failed 0.910", "reverted 0.910", "loading 0.880", "ready 0.880", "restarting 0.900", "loading 0.900",
        "ready 0.900", "under load 0.900", "verified 0.900", "pinned 0.900"]

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""llmserve-fleet's rows, from ansible-runner events shaped as the playbooks produce them."""
from __future__ import annotations

import json
import re
import shlex

import pytest

from ansible_collections.llmserve.sglang.plugins.plugin_utils import fleet_view


class Clock(object):
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def start(host, task):
    return {"event": "runner_on_start", "event_data": {"host": host, "task": task}}


def said(*lines):
    return {"event": "verbose", "stdout": "\n".join(lines)}


def ok(host, res):
    return {"event": "runner_on_ok", "event_data": {"host": host, "res": res}}


TUNED = {"status": "tuned", "line": "gpu1: 0.880 -> 0.910",
         "result": {"after": {"mem_fraction_static": 0.91, "tokens": 202389}}}
STATS = {"llmserve_kv_tune": {"hosts": [
    {"host": "gpu1", "status": "tuned", "after": 0.91, "tokens_before": 159282, "tokens_after": 202389, "restarts": 1},
    {"host": "gpu2", "status": "not tuned: failed or unreachable, left on its last-known-good value",
     "error": "unreachable"}], "failed": ["gpu2"], "counts": {}, "restarts": 1, "report_dir": "/r"}}


def run_of_two_hosts(clock):
    view = fleet_view.FleetView(clock)
    for event in [start("gpu1", "Kv tune | Does the unit need tuning (nothing changes)"),
                  start("gpu2", "Kv tune | Does the unit need tuning (nothing changes)"),
                  ok("gpu1", {"ansible_facts": {"kv_tune_class": {"role": "canary", "class": "A"}}}),
                  start("gpu1", "Kv tune | Tune the unit, or keep its pin"),
                  said("[kv_tune] gpu1: probe", "[kv_tune] gpu1: under load 0.880"),
                  said("gpu1: trial 1/6 f=0.880 (running, no restart), 159,282 KV tokens, min free under load 4.27 "
                       "GiB: stable; next 0.910"),
                  said("[kv_tune] gpu1: restarting 0.910", "[kv_tune] gpu1: loading 0.910"),
                  {"event": "runner_on_unreachable", "event_data": {"host": "gpu2", "res": {"msg": "no route"}}}]:
        clock.now += 1
        view.feed(event)
    return view


def test_the_rows_follow_each_host_through_the_run():
    clock = Clock()
    view = run_of_two_hosts(clock)
    gpu1, gpu2 = view.rows["gpu1"], view.rows["gpu2"]
    # the tokens and headroom measured at 0.880 are not shown as 0.910's
    assert (gpu1.phase, gpu1.value, gpu1.tokens, gpu1.free, gpu1.restarts, gpu1.cls) == (
        "loading", "0.910", None, None, 1, "canary A")
    assert (gpu2.phase, gpu2.error) == ("failed", "unreachable: no route")
    assert [row.label for row in view.mid_trial()] == ["gpu1"]
    clock.now += 20
    view.feed(said("[kv_tune] gpu1: loading 0.910 (20 s)"))
    assert view.rows["gpu1"].detail == "20 s"
    view.feed(ok("gpu1", TUNED))
    view.feed({"event": "playbook_on_stats", "event_data": {"artifact_data": STATS}})
    assert (gpu1.phase, gpu1.value, gpu1.tokens, gpu1.restarts) == ("pinned", "0.910", 202389, 1)
    assert view.failed() == ["gpu2"] and view.mid_trial() == []
    # the clock of a host that reached its end stops there
    ended = gpu1.ended
    clock.now += 50
    view.feed({"event": "playbook_on_stats", "event_data": {"artifact_data": STATS}})
    assert gpu1.ended == ended


def test_a_host_with_several_units_gives_a_row_each_and_unchanged_pins_show_their_value():
    view = fleet_view.FleetView(Clock())
    view.feed(start("gpu1", "Kv tune | Tune the unit, or keep its pin"))
    view.feed(ok("gpu1", {"status": "tuned", "units": {
        "sglang@a.service": dict(TUNED, label="gpu1 sglang@a"),
        "sglang@b.service": {"status": "unchanged", "label": "gpu1 sglang@b",
                             "pin": {"mem_fraction_static": 0.85, "tokens": 90000}}}}))
    assert {label: (row.phase, row.value) for label, row in view.rows.items()} == {
        "gpu1 sglang@a": ("pinned", "0.910"), "gpu1 sglang@b": ("unchanged", "0.850")}


def test_a_task_of_another_role_does_not_hide_a_trial_in_progress():
    view = fleet_view.FleetView(Clock())
    view.feed(said("[kv_tune] gpu1: under load 0.910 (20/60 s)"))
    view.feed(start("gpu1", "Sglang service | Look for nvidia-modprobe"))
    assert view.rows["gpu1"].phase == "under load"
    view.feed(start("gpu3", "Nvidia driver | Gather the facts the role needs"))
    assert view.rows["gpu3"].phase == "driver"
    # an ignored failure is no failure
    view.feed({"event": "runner_on_failed", "event_data": {"host": "gpu3", "ignore_errors": True, "res": {}}})
    assert view.rows["gpu3"].phase == "driver"


def test_the_table_the_lines_and_the_report(tmp_path):
    clock = Clock()
    view = run_of_two_hosts(clock)
    view.feed(ok("gpu1", TUNED))
    view.feed({"event": "playbook_on_stats", "event_data": {"artifact_data": STATS}})
    table = fleet_view.render_table(view, "llmserve-fleet tune on prod", clock())
    lines = table.splitlines()
    assert lines[0].startswith("llmserve-fleet tune on prod - 2 host(s), 1 failed, 1 pinned - ")
    assert lines[1].split() == ["host", "class", "phase", "value", "KV", "tokens", "min", "free", "GiB", "restarts",
                                "elapsed"]
    assert lines[2].split()[:7] == ["gpu1", "canary", "A", "pinned", "0.910", "202,389", "-"]
    assert " gpu2: failed, 0 restart(s), 0m0" in fleet_view.plain_line(view.rows["gpu2"], clock())
    assert fleet_view.plain_line(view.rows["gpu2"], clock()).endswith(" - unreachable: no route")
    written = fleet_view.fleet_report(view, "llmserve-fleet tune on prod", str(tmp_path), 2, clock())
    assert [path.rsplit("/", 1)[1] for path in written][:2] == ["fleet.json", "fleet.md"]
    data = json.loads((tmp_path / "fleet.json").read_text())
    assert data["failed"] == ["gpu2"] and data["exit_code"] == 2
    assert data["hosts"][0]["tokens_before"] == 159282 and data["hosts"][0]["tokens"] == 202389
    assert "Failed or left on the last-known-good value: gpu2." in (tmp_path / "fleet.md").read_text()


def test_extra_vars_are_passed_on_as_given_after_the_commands_defaults(tmp_path):
    (tmp_path / "secrets.yml").write_text("sglang_service_api_key: k3y\n")
    given = ["a=1 b='x y'", '{"kv_tune_serial": "100%"}', "{kv_tune_strategy: per_class}", "@secrets.yml"]
    checked = fleet_view.check_extra_vars(given, str(tmp_path))
    assert checked == given[:3] + ["@%s" % (tmp_path / "secrets.yml")]
    words = shlex.split(fleet_view.runner_cmdline({"kv_tune_report_dir": "/r"}, checked, ["--list-hosts"]))
    # ansible-playbook lets a later -e win: the operator's come after the command's own default
    assert words == ["-e", '{"kv_tune_report_dir": "/r"}', "--list-hosts", "-e", given[0], "-e", given[1],
                     "-e", given[2], "-e", checked[3]]


@pytest.mark.parametrize("item, why", [
    ('{"a":', "not valid YAML or JSON"),
    ("[1]", "not a mapping of variables"),
    ("kv_tune_hosts=gpu1 gpu2", "'gpu2' is not key=value; quote a value with spaces"),
    ("@missing.yml", "no readable file"),
    ("./vars.yml", "needs '@' before it"),
    ("  ", "nothing in it"),
])
def test_an_extra_var_ansible_playbook_would_refuse_or_misread_is_refused_first(tmp_path, item, why):
    # issue 32, item 3: these gave a traceback, a variable named "[1]" and two variables
    with pytest.raises(fleet_view.ExtraVarsError, match=re.escape(why)):
        fleet_view.check_extra_vars([item], str(tmp_path))


def test_a_kept_run_directory_loses_the_command_line_and_the_inputs(tmp_path):
    for name in ("env/extravars", "env/cmdline", "artifacts/abc/command", "artifacts/abc/stdout",
                 "artifacts/abc/job_events/1-x.json"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("{}")
    fleet_view.forget_secrets(str(tmp_path))
    assert sorted(str(path.relative_to(tmp_path)) for path in tmp_path.rglob("*") if path.is_file()) == [
        "artifacts/abc/job_events/1-x.json", "artifacts/abc/stdout"]


def test_a_fleet_taller_than_the_terminal_shows_the_hosts_at_work_and_counts_the_rest():
    clock = Clock()
    view = fleet_view.FleetView(clock)
    for number in range(64):
        view.feed(said("[kv_tune] gpu%02d: %s 0.910" % (number, "pinned" if number % 8 else "under load")))
    view.feed({"event": "runner_on_unreachable", "event_data": {"host": "gpu63", "res": {"msg": "no route"}}})
    lines = fleet_view.render_table(view, "t", clock(), max_rows=20).splitlines()
    assert lines[0].startswith("t - 64 host(s), 1 failed, 55 pinned, 8 under load - ")
    assert [line.split()[0] for line in lines[2:11]] == ["gpu%02d" % n for n in range(0, 64, 8)] + ["gpu63"]
    assert len(lines) == 2 + 19 + 1 and lines[-1] == "... and 45 more: 45 pinned"
    # without a height, every host in name order
    assert len(fleet_view.render_table(view, "t", clock()).splitlines()) == 66


def test_control_characters_from_hosts_are_shown_escaped_everywhere(tmp_path):
    # issue 32, item 12: a host's name, a unit's label and an error text carry terminal escapes
    clock = Clock()
    view = fleet_view.FleetView(clock)
    evil = "gpu\x1b]0;owned\x07"
    view.feed(start(evil, "Kv tune | Does the unit need tuning (nothing changes)"))
    view.feed(said("[kv_tune] %s: restarting 0.910" % evil))
    view.feed({"event": "runner_on_failed", "event_data": {"host": evil, "res": {
        "msg": "sglang@x.service\x1b[2J failed\nnext line\x9b31m"}}})
    outputs = [fleet_view.render_table(view, "tune on \x1b[1mprod", clock()),
               fleet_view.render_table(view, "tune", clock(), max_rows=5),
               fleet_view.plain_line(view.rows[evil], clock())]
    fleet_view.fleet_report(view, "tune \x1b[1m", str(tmp_path), 2, clock())
    outputs += [(tmp_path / name).read_text() for name in ("fleet.md", "fleet.json")]
    for text in outputs:
        assert not fleet_view.CONTROL.search(text.replace("\n", "")), repr(text)
    assert "gpu\\x1b]0;owned\\x07" in outputs[0] and "failed\\x1b[2J" not in outputs[2]
    assert "sglang@x.service\\x1b[2J failed next line\\x9b31m" in outputs[2]

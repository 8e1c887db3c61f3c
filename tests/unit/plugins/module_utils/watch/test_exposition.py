# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""exposition: the watch's verdict and numbers as llmserve_kv_* gauges, written for node_exporter's textfile collector
and read back with prometheus_client's own parser (as node_exporter and Prometheus read them)."""
from __future__ import annotations

import json
import os
import stat

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ansible_collections.llmserve.sglang.plugins.module_utils.watch import exposition
from ansible_collections.llmserve.sglang.plugins.module_utils.watch.settings import WatchError
from ansible_collections.llmserve.sglang.tests.unit.plugins.module_utils.watch.watch_standins import (
    PIN,
    _day,
    _window,
)

UNIT = "sglang@a.service"
PINNED = dict(PIN, tokens=150000)


def scraped(path) -> dict:
    """{(name, labels as a sorted tuple): value} of the text file at ``path``."""
    found = {}
    for family in text_string_to_metric_families(path.read_text(encoding="utf-8")):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def values(metrics: dict) -> dict:
    """{name: value} of the unit's one-series gauges, and the current verdict."""
    out = {name: next(iter(series.values())) for name, series in metrics.items() if name != "verdict"}
    out["verdict"] = [dict(labels)["verdict"] for labels, value in metrics["verdict"].items() if value == 1.0]
    return out


def test_a_near_miss_exports_its_verdict_the_least_free_memory_and_the_steps_it_lowers():
    records = _day(2.0)
    records[5] = _window(records[5]["end"], least_full=2.0, least=0.62)
    records[-1].update(pool_tokens=150000, serving_samples=720, samples=720, errors={})
    got = values(exposition.samples(UNIT, PINNED, records, 3600))
    assert got["verdict"] == ["near_miss"]
    assert (got["least_free_gib"], got["margin_gib"]) == (0.62, 1.0)
    # 0.38 GiB missing, in steps of 0.4 GiB: one step down
    assert got["spare_steps"] == -1.0
    assert (got["pinned_mem_fraction_static"], got["verified_pool_tokens"], got["pool_tokens"]) == (0.9, 150000, 150000)
    assert got["watch_last_sample_timestamp_seconds"] == records[-1]["end"] and got["watch_window_seconds"] == 3600
    assert got["watch_up"] == 1.0 and got["full_pool_hours"] == 24.0


def test_headroom_exports_its_spare_steps_and_each_verdict_has_a_series():
    metrics = exposition.samples(UNIT, PINNED, _day(3.5), 300)
    assert values(metrics)["verdict"] == ["headroom"] and values(metrics)["spare_steps"] == 6.0
    assert sorted(dict(labels)["verdict"] for labels in metrics["verdict"]) == sorted(exposition.VERDICTS)
    assert all(dict(labels)["unit"] == UNIT for series in metrics.values() for labels in series)


def test_the_watchs_settings_decide_the_verdict_as_kv_watch_facts_would():
    # A day at a full pool is not enough where the watch is told to wait two.
    assert values(exposition.samples(UNIT, PINNED, _day(3.5), 300, headroom_hours=48))["verdict"] == \
        ["not_enough_traffic"]
    with pytest.raises(WatchError, match="headroom_hours"):
        exposition.samples(UNIT, PINNED, _day(3.5), 300, headroom_hours=0)


def test_without_a_pin_or_windows_only_what_is_known_is_exported():
    got = values(exposition.samples(UNIT, None, [], 300))
    # no 0 that would read as a pool of 0 tokens or a sample at 1970
    assert got == {"verdict": ["no_pin"], "watch_window_seconds": 300.0, "watch_up": 0.0}


def test_a_window_that_never_read_the_server_is_a_watch_that_is_down():
    records = _day(3.5)
    records[-1].update(samples=3, serving_samples=3, errors={"metrics": 3})
    assert values(exposition.samples(UNIT, PINNED, records, 300))["watch_up"] == 0.0
    records[-1].update(errors={"metrics": 1})
    assert values(exposition.samples(UNIT, PINNED, records, 300))["watch_up"] == 1.0


def test_the_pin_comes_from_the_tuners_fact_file_and_a_bad_one_is_an_error():
    facts = json.dumps({UNIT: PINNED})
    assert values(exposition.unit_samples(UNIT, facts, "/x.fact", _day(3.5), 300))["verdict"] == ["headroom"]
    assert values(exposition.unit_samples("sglang@b.service", facts, "/x.fact", _day(3.5), 300))["verdict"] == \
        ["no_pin"]
    with pytest.raises(WatchError):
        exposition.unit_samples(UNIT, "{not json", "/x.fact", _day(3.5), 300)


def test_each_unit_has_a_file_of_its_own_in_the_textfile_directory():
    assert exposition.textfile_name("sglang.service") == "llmserve_kv_sglang.prom"
    assert exposition.textfile_name(UNIT) == "llmserve_kv_sglang-a.prom"
    with pytest.raises(WatchError):
        exposition.textfile_name("../etc/passwd")


def test_the_file_is_replaced_whole_readable_by_node_exporter_and_parses(tmp_path):
    path = tmp_path / exposition.textfile_name(UNIT)
    path.write_text("stale\n")
    exposition.write_textfile(str(path), exposition.samples(UNIT, PINNED, _day(3.5), 300))
    got = scraped(path)
    assert got[("llmserve_kv_verdict", (("unit", UNIT), ("verdict", "headroom")))] == 1.0
    assert got[("llmserve_kv_verdict", (("unit", UNIT), ("verdict", "near_miss")))] == 0.0
    assert got[("llmserve_kv_spare_steps", (("unit", UNIT),))] == 6.0
    assert stat.S_IMODE(os.stat(path).st_mode) & 0o044 == 0o044
    assert [entry.name for entry in tmp_path.iterdir()] == [path.name]   # no temporary file left

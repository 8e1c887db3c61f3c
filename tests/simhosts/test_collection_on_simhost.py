# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The collection's modules and capacity report on a simulated field-case GPU host, over ssh, reading journald.

One nspawn host (prefix simint) of the field profile: 8x RTX PRO 6000 96 GB, Kimi-K2.5 TP8 with EAGLE-3, its
SGLang server (the simulator) started as sglang.service. Nothing here knows it talks to a simulator: the modules
read nvidia-smi, the unit's journal and the model's config.json on the host, as on a real one.
"""
from __future__ import annotations

import pytest

from simhost_lib import REPO, play, simhosts, simulator_wheelhouse

PREFIX = "simint"
HOST = f"{PREFIX}1"
MIB = 2 ** 20


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("simint")
    wheelhouse = simulator_wheelhouse(tmp)
    inventory = tmp / "hosts.yml"
    simhosts("up", "--count", "1", "--prefix", PREFIX, "--profile", "field", "--inventory", str(inventory),
             "--wheelhouse", wheelhouse)
    try:
        simhosts("serve", "--prefix", PREFIX)
        yield inventory
    finally:
        simhosts("down", "--prefix", PREFIX, check=False)


def test_gpu_info_reads_the_simulated_gpus_through_nvidia_smi(host):
    results = play(host, tasks=[
        {"name": "gpus", "llmserve.sglang.gpu_info": {}},
        {"name": "facts", "llmserve.sglang.sglang_startup_facts": {"unit": "sglang.service"}},
    ]).results
    gpus, facts = results["gpus"], results["facts"]
    assert not gpus["failed"], gpus
    assert gpus["source"] == "nvidia-smi" and gpus["gpu_count"] == 8
    assert all(gpu["memory_total_bytes"] == 97887 * MIB for gpu in gpus["gpus"])
    assert gpus["gpus"][0]["name"].startswith("NVIDIA RTX PRO 6000")
    # What nvidia-smi shows free once the server is up is what SGLang logged as available after start.
    assert gpus["min_free_gib"] == pytest.approx(facts["available_gpu_mem_gib"], abs=0.02)


def test_startup_facts_and_formula_match_the_field_case(host):
    results = play(host, tasks=[
        {"name": "facts", "llmserve.sglang.sglang_startup_facts": {"unit": "sglang.service"}, "register": "facts"},
        {"name": "capacity", "llmserve.sglang.kv_capacity": {
            "model_config": "{{ facts.server_args.model_path }}/config.json", "startup_facts": "{{ facts }}",
            "sglang_version": "0.5.9"}},
    ]).results
    facts, capacity = results["facts"], results["capacity"]
    assert facts["ready"] and facts["failure"] is None and facts["tp_size"] == 8
    assert facts["pre_load_free_gib"] == pytest.approx(94.04, abs=0.01)
    assert facts["weights_gib"] == pytest.approx(72.33, abs=0.01)
    assert facts["kv_tokens"] == pytest.approx(159277, rel=0.002)  # the field log's #tokens
    assert not capacity["failed"], capacity
    assert abs(capacity["prediction_error_pct"]) < 0.2  # collection's formula vs the simulator's pool


def test_capacity_report_on_the_host(host, tmp_path):
    report_run = play(host, playbook=REPO / "playbooks" / "capacity_report.yml", extravars={
        "capacity_report_sglang_version": "0.5.9", "capacity_report_output_dir": str(tmp_path)})
    assert report_run.status == "successful", report_run.stdout
    report = (tmp_path / f"{HOST}.md").read_text()
    assert "- GPUs (nvidia-smi): 8 x NVIDIA RTX PRO 6000" in report
    assert "| SGLang's formula | 0.88 | bfloat16 | 70,272 |" in report


def test_init_oom_start_is_classified_from_the_journal(host):
    failed = simhosts("serve", "--prefix", PREFIX, "--mem-fraction-static", "0.75", "--timeout", "30", check=False)
    assert failed.returncode != 0 and "sglang.service exited" in failed.stderr
    facts = play(host, tasks=[
        {"name": "facts", "llmserve.sglang.sglang_startup_facts": {"unit": "sglang.service"}}]).results["facts"]
    assert facts["ready"] is False and facts["failure"]["kind"] == "init_oom", facts["failure"]
    assert "Not enough memory. Please try to increase --mem-fraction-static" in facts["failure"]["line"]
    simhosts("serve", "--prefix", PREFIX)  # back to the field value for any later test

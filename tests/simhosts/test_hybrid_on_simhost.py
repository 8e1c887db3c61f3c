# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A hybrid linear-attention model on one simulated host (prefix simhybrid): 1x H100 with Qwen3.5-9B (24 Gated
DeltaNet + 8 full-attention layers) on SGLang 0.5.17, deployed by site.yml with inventories/sim's variables.

tune_kv.yml pins it within one grid step of the simulator's oracle (whose arithmetic carves the Mamba state pool out
of the budget before the KV pool, as SGLang does), the capacity report shows the state pool, and a re-run changes
nothing. With neither the command line nor the log stating the value (a reset pin, a rotated journal) the
search starts from SGLang's default, inferred. Then the fault: another process allocates 30 GB on the GPU while each start loads its weights (the
simulator's faults.load_contention_mib), so every start's log reports weights far above the checkpoint: the tuner
starts such a trial again, then stops on the last-known-good value and pins nothing from it.
"""
from __future__ import annotations

import re

import pytest

from simhost_lib import (PIN_DROPIN, REPO, RESOLUTION, deployed, fact, invocation, oracle_max, play, report,
                         running_fraction, set_faults, ssh, trial_left, tune)

PREFIX = "simhybrid"
HOST = f"{PREFIX}1"


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    with deployed(tmp_path_factory.mktemp("simhybrid"), PREFIX, ["single-gpu-hybrid"]) as inventory:
        yield inventory


def test_a_hybrid_model_is_tuned_to_the_oracle(host, tmp_path):
    run = tune(host, tmp_path)
    assert run.status == "successful", run.stdout[-8000:]
    result = report(tmp_path, HOST)
    truth = oracle_max(HOST)
    pinned = fact(HOST)["mem_fraction_static"]
    assert result["status"] == "tuned", result
    assert truth - RESOLUTION - 1e-9 <= pinned <= truth + 1e-9, (pinned, truth, result["trials"])
    assert running_fraction(HOST) == pytest.approx(pinned)
    assert f"--mem-fraction-static {pinned:.3f}" in ssh(HOST, f"cat {PIN_DROPIN}")
    assert result["after"]["tokens"] > result["before"]["tokens"]
    assert not trial_left(HOST)
    # the server's own log: the state pool first, then the KV pool of the full-attention layers
    journal = ssh(HOST, "journalctl -u sglang.service -o cat --no-pager | grep -F 'Mamba Cache is allocated.' | tail -n 1")
    assert "max_mamba_cache_size: " in journal, journal


def test_the_capacity_report_shows_the_state_pool_and_a_rerun_changes_nothing(host, tmp_path):
    out = tmp_path / "capacity"
    capacity = play(host, playbook=REPO / "playbooks" / "capacity_report.yml",
                    extravars={"capacity_report_output_dir": str(out)})
    assert capacity.status == "successful", capacity.stdout[-5000:]
    text = (out / f"{HOST}.md").read_text()
    assert "Hybrid linear-attention state pool:" in text, text
    error = re.search(r"\(([+-][\d.]+)% vs log\)", text)
    # P and A are printed to 0.01 GB: enough to move one state slot (1,572 tokens here) between the two pools
    assert error and abs(float(error.group(1))) <= 0.5, text
    started = invocation(HOST)
    again = tune(host, tmp_path)
    assert again.status == "successful", again.stdout[-8000:]
    assert not again.stats["changed"] and invocation(HOST) == started


def test_without_a_value_anywhere_the_search_starts_from_sglangs_default(host, tmp_path):
    reset = tune(host, tmp_path, kv_tune_reset=True)
    assert reset.status == "successful", reset.stdout[-8000:]
    assert running_fraction(HOST) is None  # the base unit has no --mem-fraction-static: SGLang's default
    # the start's log is gone (rotated away), so nothing states the value the server runs
    ssh(HOST, "journalctl --rotate && sleep 2 && journalctl --vacuum-time=1s")
    run = tune(host, tmp_path)
    assert run.status == "successful", run.stdout[-8000:]
    assert "runs SGLang's default --mem-fraction-static, which neither its command line nor its startup log" \
        in run.stdout
    truth, pinned = oracle_max(HOST), fact(HOST)["mem_fraction_static"]
    assert truth - RESOLUTION - 1e-9 <= pinned <= truth + 1e-9, (pinned, truth, report(tmp_path, HOST)["trials"])


def test_untrusted_starts_are_measured_again_and_never_pinned(host, tmp_path):
    pinned = fact(HOST)
    set_faults(HOST, load_contention_mib={"0": 30000})
    try:
        # started below the pin, so the first trial is a restart whose log the neighbour contaminates
        run = tune(host, tmp_path, kv_tune_force=True, kv_tune_start=round(pinned["mem_fraction_static"] - 0.05, 3))
        result = report(tmp_path, HOST)
        assert [t["outcome"] for t in result["trials"]] == ["untrusted", "unverified"], result["trials"]
        assert result["status"] == "failed" and run.status == "failed"
        assert "were taken by something else while SGLang loaded" in result["trials"][0]["why"]
        assert "two starts at" in run.stdout and "another process allocates GPU memory" in run.stdout
        assert running_fraction(HOST) == pytest.approx(pinned["mem_fraction_static"])
        assert fact(HOST)["time"] == pinned["time"] and not trial_left(HOST)
    finally:
        set_faults(HOST)

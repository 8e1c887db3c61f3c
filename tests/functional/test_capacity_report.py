# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""playbooks/capacity_report.yml end to end on localhost, from recorded startup logs (no GPU here)."""
from __future__ import annotations

from conftest import FIXTURES, REPO

PLAYBOOK = REPO / "playbooks" / "capacity_report.yml"
FIELD = {
    "capacity_report_log_path": str(FIXTURES / "logs" / "field_kimi_k25_rtx6000_tp8_eagle3.log"),
    "capacity_report_model_config": str(FIXTURES / "configs" / "kimi-k2.5-int4.json"),
    "capacity_report_sglang_version": "0.5.9",
    "capacity_report_target_tokens": 250000,
}


def test_field_case_report(ansible, tmp_path):
    out = tmp_path / "reports"
    runner = ansible.playbook(PLAYBOOK, extravars=dict(FIELD, capacity_report_output_dir=str(out)))
    assert runner.status == "successful", runner.stdout.read()
    report = (out / "localhost.md").read_text()
    assert "| logged by SGLang | 0.88 | torch.bfloat16 | - | 10.42 | 159,277 |" in report
    assert "| SGLang's formula | 0.88 | bfloat16 | 70,272 | 10.43 | 159,294 (+0.01% vs log) |" in report
    assert "| fp8 KV cache | 0.88 | fp8_e4m3 | 35,136 | 10.43 | 318,589 |" in report
    assert "| for 250,000 tokens | 0.943 |" in report
    assert "free before weights P = 94.04" in report and "free after start = 7.43" in report
    assert "GPUs: not probed: no NVIDIA GPU probe available" in report
    assert "does not enlarge the GPU pool (max_total_num_tokens stays 159,277)" in report
    again = ansible.playbook(PLAYBOOK, extravars=dict(FIELD, capacity_report_output_dir=str(out)))
    assert again.status == "successful" and not again.stats["changed"]  # same log, same report: nothing to do


def test_failed_start_is_reported_with_its_advice(ansible, tmp_path):
    out = tmp_path / "reports"
    runner = ansible.playbook(PLAYBOOK, extravars={
        "capacity_report_log_path": str(FIXTURES / "logs" / "current_init_oom_glm47_flash_rtx5090_excerpt.log"),
        "capacity_report_model_config": str(FIXTURES / "configs" / "qwen3-8b.json"),
        "capacity_report_output_dir": str(out)})
    # A start that never got a KV pool cannot be sized: the play fails and says why, naming the failure.
    assert runner.status == "failed"
    text = runner.stdout.read()
    assert "the last start built no KV pool (init_oom)" in text
    assert "Loaded weights leave no GPU memory for the KV cache" in text and "Raise --mem-fraction-static" in text
    assert not out.exists()


def test_missing_log_fails_before_any_report(ansible, tmp_path):
    runner = ansible.playbook(PLAYBOOK, extravars={"capacity_report_log_path": str(tmp_path / "nope.log")})
    assert runner.status == "failed"
    assert "nope.log" in runner.stdout.read()


def test_report_of_an_untrusted_boot_warns_and_gives_no_token_figure(ansible, tmp_path):
    # a real docs-CI boot on a shared GPU: 59.90 GB "used" for a 14.96 GiB checkpoint
    model_dir = tmp_path / "Meta-Llama-3.1-8B-Instruct"
    model_dir.mkdir()
    (model_dir / "config.json").write_text((FIXTURES / "configs" / "llama-3.1-8b.json").read_text())
    (model_dir / "model.safetensors.index.json").write_text('{"metadata": {"total_size": 16060522496}}')
    out = tmp_path / "reports"
    runner = ansible.playbook(PLAYBOOK, extravars={
        "capacity_report_log_path": str(FIXTURES / "logs" / "shared_gpu_llama31_8b_lora_docs_ci.log"),
        "capacity_report_model_config": str(model_dir), "capacity_report_output_dir": str(out)})
    assert runner.status == "successful", runner.stdout.read()
    report = (out / "localhost.md").read_text()
    assert "**Warning: the memory numbers of this start cannot be trusted**" in report
    assert "the log says the weights took 59.90 GiB per GPU, but the checkpoint is 14.96 GiB" in report
    assert "| logged by SGLang | 0.841 | torch.bfloat16 | - | 1.34 | 10,975 |" in report
    formula = next(line for line in report.splitlines() if line.startswith("| SGLang's formula |"))
    assert formula.endswith("| - | - |"), formula  # no budget, no token figure
    assert "| lowest f that starts | - |" in report


def test_report_of_a_hybrid_model_shows_its_state_pool(ansible, tmp_path):
    out = tmp_path / "reports"
    runner = ansible.playbook(PLAYBOOK, extravars={
        "capacity_report_log_path": str(FIXTURES / "logs" / "hybrid_gdn_qwen35_9b_tp2_rtx4090.log"),
        "capacity_report_model_config": str(FIXTURES / "configs" / "qwen3.5-9b.json"),
        "capacity_report_sglang_version": "0.5.10", "capacity_report_output_dir": str(out)})
    assert runner.status == "successful", runner.stdout.read()
    report = (out / "localhost.md").read_text()
    assert "- mem_fraction_static: not in the log or the options;" in report
    assert "Hybrid linear-attention state pool: 25,755,648 bytes per request per GPU; logged 186 slots (4.48 GiB)" in report

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""llmserve.sglang.kv_capacity through ansible-runner on localhost: the field case from a config path, startup facts,
the ways input goes wrong, check mode; and the kv / sglang_cli_args filters rendered in a play."""
from __future__ import annotations

import json
import shutil

import pytest
import yaml

from conftest import FIXTURES

KIMI = str(FIXTURES / "configs" / "kimi-k2.5-int4.json")


FIELD = {"model_config": KIMI, "tp_size": 8, "mem_fraction_static": 0.88, "pre_load_free_gib": 94.04,
         "post_load_free_gib": 21.71, "sglang_version": "0.5.9", "speculative_algorithm": "EAGLE3"}


def test_field_case_from_a_config_path(ansible):
    """Kimi-K2.5 INT4, TP8, bf16 KV, f=0.88, P=94.04, A=21.71, SGLang 0.5.9 (mixin path: no EAGLE headroom, draft
    outside the budget): 159294 tokens against the logged 159277 (+0.011 %)."""
    result = ansible.module("kv_capacity", dict(FIELD, target_tokens=250000))
    assert not result.get("failed"), result.get("msg")
    assert result["changed"] is False
    assert result["sglang_era"] == "mixin" and result["attention"] == "mla" and result["kv_cache_dtype"] == "bfloat16"
    assert result["cell_size_bytes"] == 70272
    assert result["kv_budget_gib"] == 10.4252 and result["reserved_gib"] == 11.2848
    assert result["max_total_num_tokens"] == 159294
    assert abs(result["max_total_num_tokens"] - 159277) / 159277 < 0.001
    assert result["min_mem_fraction_static"] == 0.769141
    assert 0.943 < result["mem_fraction_for_target"] < 0.9432
    assert result["kv_pool_gib"] == 10.4251 and result["issues"] == []
    assert result["inputs"]["tp_size"] == 8 and result["inputs"]["target_tokens"] == 250000


def test_startup_facts_supply_the_inputs_and_the_observation(ansible, tmp_path):
    model_dir = tmp_path / "Kimi-K2.5"
    model_dir.mkdir()
    shutil.copy(KIMI, model_dir / "config.json")
    facts = {"pre_load_free_gib": 94.04, "post_load_free_gib": 21.71, "kv_tokens": 159277,
             "max_total_num_tokens": 159277, "server_args": {"tp_size": 8, "mem_fraction_static": 0.88,
                                                             "kv_cache_dtype": "auto", "page_size": 1,
                                                             "speculative_algorithm": "EAGLE3"}}
    result = ansible.module("kv_capacity", {"model_config": str(model_dir), "startup_facts": facts,
                                            "sglang_version": "0.5.9"})
    assert not result.get("failed"), result.get("msg")
    assert result["observed_tokens"] == 159277 and result["predicted_tokens"] == 159294
    assert result["prediction_error_pct"] == 0.0107
    assert result["inputs"]["mem_fraction_static"] == 0.88 and result["inputs"]["tp_size"] == 8
    # an explicit option wins over the facts
    result = ansible.module("kv_capacity", {"model_config": str(model_dir), "startup_facts": facts,
                                            "sglang_version": "0.5.9", "mem_fraction_static": 0.9})
    assert result["inputs"]["mem_fraction_static"] == 0.9
    assert result["max_total_num_tokens"] > 159294


def test_capacity_report_call(ansible):
    """The call the capacity_report role makes: startup facts, a target, the idle headroom and the HiCache what-if."""
    facts = {"pre_load_free_gib": 94.04, "post_load_free_gib": 21.71, "kv_tokens": 159277,
             "max_total_num_tokens": 159277, "post_capture_free_gib": 7.43, "available_gpu_mem_gib": 7.43,
             "server_args": {"tp_size": 8, "mem_fraction_static": 0.88, "speculative_algorithm": "EAGLE3"}}
    result = ansible.module("kv_capacity", {"model_config": KIMI, "startup_facts": facts, "sglang_version": "0.5.9",
                                            "target_tokens": 250000, "hicache_ratio": 2.0, "safety_margin_gib": 2.0})
    assert not result.get("failed"), result.get("msg")
    assert result["mem_fraction_static"] == 0.88 and result["max_total_num_tokens"] == 159294
    assert 0.937 < result["headroom_mem_fraction"] < 0.938 and result["headroom_tokens"] > 240000
    assert result["hicache_host_tokens"] == 318589 and result["hicache_host_gib_total"] == round(8 * 318589 * 70272 / 2 ** 30, 4)
    assert result["eagle_headroom_tokens"] == 0 and result["issues"] == []


def test_config_as_a_dict_and_check_mode(ansible):
    config = json.loads((FIXTURES / "configs" / "llama-3.1-8b.json").read_text())
    args = {"model_config": config, "mem_fraction_static": 0.835, "pre_load_free_gib": 78.9,
            "post_load_free_gib": 63.9, "page_size": 16}
    normal = ansible.module("kv_capacity", args)
    checked = ansible.module("kv_capacity", args, check=True)
    assert not normal.get("failed") and not checked.get("failed"), (normal.get("msg"), checked.get("msg"))
    assert checked["changed"] is False
    assert checked["cell_size_bytes"] == normal["cell_size_bytes"] == 131072
    assert checked["max_total_num_tokens"] == normal["max_total_num_tokens"]
    assert normal["max_total_num_tokens"] % 16 == 0 and normal["sglang_era"] == "current"


def _fails_cleanly(result, fragment):
    assert result.get("failed") is True
    assert fragment in result["msg"], result["msg"]
    assert "Traceback" not in result["msg"]
    assert "Traceback (most recent call last)" not in str(result.get("exception", ""))  # 2.19: "(traceback unavailable)"


def test_missing_config_json(ansible, tmp_path):
    result = ansible.module("kv_capacity", dict(FIELD, model_config=str(tmp_path / "nope" / "config.json")))
    _fails_cleanly(result, "config.json not found: %s" % (tmp_path / "nope" / "config.json"))
    result = ansible.module("kv_capacity", dict(FIELD, model_config=str(tmp_path)))
    _fails_cleanly(result, "model directory %s has no config.json" % tmp_path)


def test_malformed_config_json(ansible, tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text('{"num_hidden_layers": 61, "kv_lora_rank": ')
    _fails_cleanly(ansible.module("kv_capacity", dict(FIELD, model_config=str(bad))), "is not valid JSON")
    bad.write_text('["a", "list"]')
    _fails_cleanly(ansible.module("kv_capacity", dict(FIELD, model_config=str(bad))), "holds a JSON array")
    bad.write_text('{"architectures": ["LlamaForCausalLM"], "num_attention_heads": 32}')
    _fails_cleanly(ansible.module("kv_capacity", dict(FIELD, model_config=str(bad))),
                   "config.json has no num_hidden_layers")


def test_unknown_kv_cache_dtype(ansible):
    result = ansible.module("kv_capacity", dict(FIELD, kv_cache_dtype="fp9"))
    assert result.get("failed") is True
    assert "kv_cache_dtype" in result["msg"] and "fp9" in result["msg"]
    # the same value arriving through startup_facts is caught by the KV model
    facts = {"pre_load_free_gib": 94.04, "post_load_free_gib": 21.71,
             "server_args": {"mem_fraction_static": 0.88, "kv_cache_dtype": "fp9"}}
    result = ansible.module("kv_capacity", {"model_config": KIMI, "startup_facts": facts})
    _fails_cleanly(result, "kv_cache_dtype 'fp9' is not one of: auto, bf16, bfloat16")


@pytest.mark.parametrize("fraction", [1.2, 0.0, -0.1])
def test_bad_mem_fraction_static(ansible, fraction):
    result = ansible.module("kv_capacity", dict(FIELD, mem_fraction_static=fraction))
    _fails_cleanly(result, "mem_fraction_static must be in (0, 1), got %r" % fraction)


def test_required_memory_inputs(ansible):
    args = {k: v for k, v in FIELD.items() if k != "post_load_free_gib"}
    _fails_cleanly(ansible.module("kv_capacity", args),
                   "post_load_free_gib is required: give it, or startup_facts that have it")
    _fails_cleanly(ansible.module("kv_capacity", dict(FIELD, post_load_free_gib=95.0)),
                   "post_load_free_gib (95.0) is larger than pre_load_free_gib (94.04)")


def test_filters_in_a_play(ansible, tmp_path):
    play = [{
        "hosts": "localhost", "gather_facts": False,
        "vars": {"cfg": json.loads((FIXTURES / "configs" / "deepseek-v3.json").read_text()),
                 "server_args": {"model_path": "/models/My Model", "tp_size": 8, "trust_remote_code": True,
                                 "cuda_graph_bs": [1, 2, 4], "chat_template": "100% $x"}},
        "tasks": [
            {"name": "cell", "ansible.builtin.debug": {"msg": "{{ cfg | llmserve.sglang.kv_cell_size(tp_size=8) }}"}},
            {"name": "tokens",
             "ansible.builtin.debug": {"msg": "{{ 70272 | llmserve.sglang.kv_tokens(94.04, 21.71, 0.88) }}"}},
            {"name": "fraction", "ansible.builtin.debug": {
                "msg": "{{ 159277 | llmserve.sglang.mem_fraction_for_tokens(70272, 94.04, 21.71, resolution=0.001) }}"}},
            {"name": "argv", "ansible.builtin.debug": {"msg": "{{ server_args | llmserve.sglang.sglang_cli_args }}"}},
            {"name": "execstart", "ansible.builtin.debug": {
                "msg": "{{ server_args | llmserve.sglang.sglang_exec_start(command=['/opt/venv/bin/python', '-m', "
                       "'sglang.launch_server']) }}"}},
            {"name": "bad", "ignore_errors": True,
             "ansible.builtin.debug": {"msg": "{{ 70272 | llmserve.sglang.kv_tokens(94.04, 21.71, 1.2) }}"}},
        ],
    }]
    path = tmp_path / "filters.yml"
    path.write_text(yaml.safe_dump(play, sort_keys=False))
    runner = ansible.playbook(path)
    results, failed = {}, set()
    for event in runner.events:
        if event.get("event") in ("runner_on_ok", "runner_on_failed"):
            results[event["event_data"]["task"]] = event["event_data"]["res"]
            if event["event"] == "runner_on_failed":
                failed.add(event["event_data"]["task"])
    assert str(results["cell"]["msg"]) == "70272"
    assert str(results["tokens"]["msg"]) == "159294"
    assert str(results["fraction"]["msg"]) == "0.88"
    assert results["argv"]["msg"] == ["--model-path", "/models/My Model", "--tp-size", "8", "--trust-remote-code",
                                      "--cuda-graph-bs", "1", "2", "4", "--chat-template", "100% $x"]
    assert results["execstart"]["msg"] == ('/opt/venv/bin/python -m sglang.launch_server --model-path "/models/My '
                                           'Model" --tp-size 8 --trust-remote-code --cuda-graph-bs 1 2 4 '
                                           '--chat-template "100%% $$x"')
    assert "kv_tokens: mem_fraction_static must be in (0, 1), got 1.2" in results["bad"]["msg"]
    assert failed == {"bad"}


# Issue 12: hybrid linear-attention models, the multimodal reduction of f, an inferred default f, untrusted logs.
QWEN35 = str(FIXTURES / "configs" / "qwen3.5-9b.json")


def test_hybrid_model_from_its_real_boot_with_an_inferred_fraction(ansible):
    facts = ansible.module("sglang_startup_facts", {"path": str(FIXTURES / "logs" / "hybrid_gdn_qwen35_9b_tp2_rtx4090.log")})
    assert facts["mamba_cache_size"] == 186 and facts["mem_fraction_static"] is None
    facts = {k: v for k, v in facts.items() if k not in ("failed", "changed", "invocation", "warnings", "source")}
    given = ansible.module("kv_capacity", {"model_config": QWEN35, "startup_facts": facts, "tp_size": 2,
                                           "mem_fraction_static": 0.8, "sglang_version": "0.5.10"})
    assert not given.get("failed"), given.get("msg")
    assert given["mem_fraction_static_source"] == "option" and given["untrusted"] == []
    assert given["mamba_cache_size"] == 187 and given["max_total_num_tokens"] == 328234
    assert given["prediction_error_pct"] == 0.2823
    # without f: SGLang's default for 24 GB GPUs at TP2, inferred from P (no gpu_memory_total_mib), and said so
    inferred = ansible.module("kv_capacity", {"model_config": QWEN35, "startup_facts": facts, "tp_size": 2,
                                              "sglang_version": "0.5.10"})
    assert not inferred.get("failed"), inferred.get("msg")
    assert inferred["mem_fraction_static_source"] == "inferred_default"
    assert any("inferred SGLang's default" in w and "taken as the GPU's size" in w for w in inferred["warnings"])
    assert 0.5 < inferred["mem_fraction_static"] < 0.9
    with_gpu = ansible.module("kv_capacity", {"model_config": QWEN35, "startup_facts": facts, "tp_size": 2,
                                              "sglang_version": "0.5.10", "gpu_memory_total_mib": 24564})
    assert any("24564 MiB GPUs" in w for w in with_gpu["warnings"])


def test_multimodal_reduction_is_the_fraction_used_and_both_are_reported(ansible):
    facts = {"pre_load_free_gib": 94.04, "post_load_free_gib": 21.71, "mem_fraction_static": 0.792,
             "mem_fraction_static_logged": 0.88, "mem_fraction_static_source": "multimodal_reduction",
             "server_args": {"tp_size": 8, "mem_fraction_static": 0.88}}
    result = ansible.module("kv_capacity", {"model_config": KIMI, "startup_facts": facts, "sglang_version": "0.5.9"})
    assert not result.get("failed"), result.get("msg")
    assert result["mem_fraction_static"] == 0.792 and result["mem_fraction_static_logged"] == 0.88
    assert result["mem_fraction_static_source"] == "multimodal_reduction"
    assert result["kv_budget_gib"] == round(21.71 - 94.04 * (1 - 0.792), 4)


def test_untrusted_boot_gives_a_warning_and_no_token_figure(ansible, tmp_path):
    model_dir = tmp_path / "Meta-Llama-3.1-8B-Instruct"
    model_dir.mkdir()
    shutil.copy(FIXTURES / "configs" / "llama-3.1-8b.json", model_dir / "config.json")
    (model_dir / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 16060522496}}))
    log = str(FIXTURES / "logs" / "shared_gpu_llama31_8b_lora_docs_ci.log")
    facts = ansible.module("sglang_startup_facts", {"path": log, "checkpoint_bytes": 16060522496})
    assert len(facts["untrusted"]) == 1 and "59.90 GiB per GPU" in facts["untrusted"][0]
    assert any("cannot be trusted" in w for w in facts["warnings"])
    facts = {k: v for k, v in facts.items() if k not in ("failed", "changed", "invocation", "warnings", "source")}
    facts["untrusted"] = []  # kv_capacity checks again, from the index beside config.json
    result = ansible.module("kv_capacity", {"model_config": str(model_dir), "startup_facts": facts})
    assert not result.get("failed"), result.get("msg")
    assert len(result["untrusted"]) == 1 and "44.94 GiB were taken by something else" in result["untrusted"][0]
    assert result["max_total_num_tokens"] is None and result["kv_budget_gib"] is None
    assert result["min_mem_fraction_static"] is None and result["prediction_error_pct"] is None
    assert result["cell_size_bytes"] == 131072  # what does not depend on P and A stays
    assert any("cannot be trusted" in w for w in result["warnings"])
    # the same numbers given as options are the caller's: trusted
    given = ansible.module("kv_capacity", {"model_config": str(model_dir), "mem_fraction_static": 0.841,
                                           "pre_load_free_gib": 77.83, "post_load_free_gib": 17.93})
    assert given["untrusted"] == [] and given["max_total_num_tokens"] is not None
    mixed = ansible.module("kv_capacity", {"model_config": str(model_dir), "startup_facts": facts,
                                           "pre_load_free_gib": 77.83, "post_load_free_gib": 17.93})
    assert not mixed.get("failed"), mixed.get("msg")
    assert mixed["untrusted"] == [] and mixed["max_total_num_tokens"] == 20480  # the log's --max-total-tokens caps it

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""fingerprint: equal setups hash equal however they are spelled; anything that moves memory changes the hash;
flags that do not (host, port, api key, served name, log level, mem_fraction_static itself) never do."""
from __future__ import annotations

import copy

import pytest

from ansible_collections.llmserve.sglang.plugins.module_utils.service import fingerprint as fpm
from ansible_collections.llmserve.sglang.plugins.module_utils.service.server_args import MEMORY_ARGS

GPUS = [{"index": i, "name": "NVIDIA RTX PRO 6000 Blackwell Server Edition", "memory_total_bytes": 97887 * 2 ** 20}
        for i in range(8)]
CONFIG = '{"architectures": ["KimiK25ForConditionalGeneration"], "num_hidden_layers": 61}\n'
ARGS = {"--tp-size": "8", "--speculative-algorithm": "EAGLE3", "--speculative-draft-model-path": "/models/field/draft",
        "--host": "0.0.0.0", "--port": "30000", "--served-model-name": "kimi-k2.5", "--mem-fraction-static": "0.88"}


def make(**changes):
    kwargs = {"gpus": GPUS, "driver_version": "580.159.04", "cuda_version": "13.0", "sglang_version": "0.5.9",
              "model_path": "/models/field/model", "config_text": CONFIG, "model_revision": None,
              "server_args": ARGS}
    kwargs.update(changes)
    return fpm.fingerprint(**kwargs)


def digest(**changes):
    return fpm.fingerprint_hash(make(**changes))


def test_shape_and_values():
    fp = make()
    assert fp["gpu"] == {"name": "NVIDIA RTX PRO 6000 Blackwell Server Edition", "count": 8, "memory_total_mib": 97887}
    assert fp["versions"] == {"driver": "580.159.04", "cuda": "13.0", "sglang": "0.5.9"}
    assert fp["model"]["config_sha256"] == fpm.config_sha256(CONFIG.encode())
    assert len(fp["model"]["config_sha256"]) == 64
    assert fp["server_args"]["tp_size"] == 8
    assert fp["server_args"]["speculative_algorithm"] == "EAGLE3"
    assert set(fp["server_args"]) == set(MEMORY_ARGS)
    assert "mem_fraction_static" not in fp["server_args"] and "host" not in fp["server_args"]
    assert len(fpm.fingerprint_hash(fp)) == 64


def test_excluded_args_do_not_change_the_hash():
    same = dict(ARGS, **{"--host": "127.0.0.1", "--port": "31000", "--api-key": "secret", "--log-level": "debug",
                         "--served-model-name": "other", "--mem-fraction-static": "0.93"})
    assert digest(server_args=same) == digest()


def test_spellings_and_defaults_hash_equal():
    spelled = {"tp": 8, "speculative_algorithm": "eagle3", "speculative_draft_model_path": "/models/field/draft",
               "page_size": 1, "kv_cache_dtype": "AUTO", "dp_size": None, "enable_dp_attention": "false",
               "cuda_graph_bs": None, "max_prefill_tokens": "16384"}
    assert digest(server_args=spelled) == digest()
    assert digest(sglang_version="v0.5.9", model_path="/models/field/model/") == digest()
    gib_gpus = [{"name": g["name"], "memory_total_mib": 97887} for g in GPUS]
    assert digest(gpus=gib_gpus) == digest()


def test_irrelevant_sub_settings_are_dropped():
    plain = {"--tp-size": "8"}
    assert digest(server_args=dict(plain, speculative_num_steps=3)) == digest(server_args=plain)
    assert digest(server_args=dict(plain, hicache_ratio=2.0)) == digest(server_args=plain)
    hi = dict(plain, enable_hierarchical_cache="")           # a bare flag
    assert digest(server_args=dict(hi, hicache_ratio=2.0)) != digest(server_args=hi)
    assert make(server_args=hi)["server_args"]["enable_hierarchical_cache"] is True


def test_bs_list_is_a_set():
    one = digest(server_args=dict(ARGS, cuda_graph_bs="1 2 4 8"))
    assert digest(server_args=dict(ARGS, cuda_graph_bs=[8, 4, 2, 1, 2])) == one
    assert digest(server_args=dict(ARGS, cuda_graph_bs="1,2,4,8")) == one
    assert digest(server_args=dict(ARGS, cuda_graph_bs=[1, 2, 4])) != one


@pytest.mark.parametrize("changes", [
    {"driver_version": "580.165.02"}, {"cuda_version": "13.1"}, {"sglang_version": "0.5.10"},
    {"config_text": CONFIG.replace("61", "62")}, {"model_revision": "abc123"}, {"model_path": "/models/other"},
    {"gpus": GPUS[:4]}, {"gpus": [dict(g, name="NVIDIA H200", memory_total_bytes=143771 * 2 ** 20) for g in GPUS]},
    {"server_args": dict(ARGS, **{"--tp-size": "4"})}, {"server_args": dict(ARGS, dp=2)},
    {"server_args": dict(ARGS, kv_cache_dtype="fp8_e4m3")}, {"server_args": dict(ARGS, context_length=32768)},
    {"server_args": dict(ARGS, chunked_prefill_size=4096)}, {"server_args": dict(ARGS, cuda_graph_max_bs=64)},
    {"server_args": dict(ARGS, speculative_num_steps=5)}, {"server_args": dict(ARGS, page_size=64)},
    {"server_args": dict(ARGS, max_running_requests=128)}, {"server_args": dict(ARGS, max_total_tokens=100000)},
    {"server_args": dict(ARGS, enable_dp_attention=True)}, {"server_args": dict(ARGS, enable_hierarchical_cache=True)},
])
def test_memory_relevant_changes_change_the_hash(changes):
    assert digest(**changes) != digest()
    assert fpm.fingerprint_diff(make(), make(**changes))


def test_diff_names_the_keys():
    old, new = make(), make(driver_version="580.165.02", server_args=dict(ARGS, page_size=64))
    assert fpm.fingerprint_diff(old, new) == ["server_args.page_size", "versions.driver"]
    assert fpm.fingerprint_diff(old, copy.deepcopy(old)) == []
    assert fpm.fingerprint_diff(None, old) == ["gpu", "model", "server_args", "versions"]


def test_mixed_gpus():
    gpus = GPUS[:1] + [{"name": "NVIDIA H200", "memory_total_mib": 143771}]
    assert make(gpus=gpus)["gpu"] == {"name": ["NVIDIA H200", "NVIDIA RTX PRO 6000 Blackwell Server Edition"],
                                      "count": 2, "memory_total_mib": 97887}


@pytest.mark.parametrize("changes,match", [
    ({"gpus": []}, "gpus"), ({"gpus": [{"memory_total_mib": 1}]}, "name"), ({"gpus": [{"name": "x"}]}, "memory_total"),
    ({"model_path": ""}, "model_path"), ({"server_args": ["--tp", "8"]}, "server_args"),
    ({"server_args": {"tp": "eight"}}, "tp_size"), ({"server_args": {"tp": 1.5}}, "integer"),
    ({"server_args": {"tp": True}}, "tp_size"), ({"server_args": {"hicache_ratio": float("inf")}}, "finite"),
    ({"server_args": {"enable_dp_attention": "maybe"}}, "boolean"), ({"server_args": {"cuda_graph_bs": 8}}, "list"),
    ({"config_text": 12}, "config_text"),
])
def test_bad_inputs(changes, match):
    with pytest.raises(fpm.FingerprintError, match=match):
        make(**changes)
    assert issubclass(fpm.FingerprintError, ValueError)


def test_hash_rejects_non_dict():
    with pytest.raises(fpm.FingerprintError, match="dict"):
        fpm.fingerprint_hash(["x"])

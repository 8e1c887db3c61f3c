# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""model_config: reading config.json from a dict, a file, a model directory or a Hugging Face cache repository, and
a clear error for each way it can fail."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ansible_collections.llmserve.sglang.plugins.module_utils.capacity import model_config as mc
from ansible_collections.llmserve.sglang.plugins.module_utils.capacity.kv_base import KvModelError

CONFIGS = Path(__file__).resolve().parents[4] / "fixtures" / "configs"


def test_dict_is_copied():
    original = {"num_hidden_layers": 32, "text_config": {"a": 1}}
    loaded = mc.load_model_config(original)
    assert loaded == original
    loaded["text_config"]["a"] = 2
    assert original["text_config"]["a"] == 1


def test_file_and_model_directory(tmp_path):
    assert mc.load_model_config(str(CONFIGS / "llama-3.1-8b.json"))["num_hidden_layers"] == 32
    model = tmp_path / "Llama-3.1-8B"
    model.mkdir()
    shutil.copy(CONFIGS / "llama-3.1-8b.json", model / "config.json")
    assert mc.load_model_config(str(model))["num_key_value_heads"] == 8
    assert mc.resolve_config_path(str(model)) == str(model / "config.json")


def test_hugging_face_cache_repository(tmp_path):
    repo = tmp_path / "models--deepseek-ai--DeepSeek-V3"
    snap = repo / "snapshots" / "86518964eaef84e3fdd98e9861759a1384f9c29d"
    snap.mkdir(parents=True)
    shutil.copy(CONFIGS / "deepseek-v3.json", snap / "config.json")
    assert mc.load_model_config(str(repo))["kv_lora_rank"] == 512
    other = repo / "snapshots" / "0000000000000000000000000000000000000000"
    other.mkdir()
    shutil.copy(CONFIGS / "deepseek-v3.json", other / "config.json")
    with pytest.raises(mc.ModelConfigError, match="holds 2 snapshots with a config.json"):
        mc.load_model_config(str(repo))


def test_utf8_bom_is_accepted(tmp_path):
    path = tmp_path / "config.json"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps({"num_hidden_layers": 2}).encode())
    assert mc.load_model_config(str(path)) == {"num_hidden_layers": 2}


@pytest.mark.parametrize("content,message", [
    (b"", "is empty"),
    (b"   \n", "is empty"),
    (b'{"num_hidden_layers": 32,', "is not valid JSON"),
    (b"{'single': 'quotes'}", "is not valid JSON"),
    (b"[1, 2, 3]", "holds a JSON array, not an object"),
    (b'"text"', "holds a JSON string, not an object"),
    (b"\xff\xfe\x00garbage", "is not UTF-8 text"),
])
def test_bad_files(tmp_path, content, message):
    path = tmp_path / "config.json"
    path.write_bytes(content)
    with pytest.raises(mc.ModelConfigError, match=message) as info:
        mc.load_model_config(str(path))
    assert str(path) in str(info.value)


def test_missing(tmp_path):
    with pytest.raises(mc.ModelConfigError, match="config.json not found: .*nowhere.json does not exist"):
        mc.load_model_config(str(tmp_path / "nowhere.json"))
    with pytest.raises(mc.ModelConfigError, match="model directory .* has no config.json"):
        mc.load_model_config(str(tmp_path))


def test_unreadable(tmp_path):
    (tmp_path / "config.json").mkdir()   # a directory where the file should be: open() fails even as root
    with pytest.raises(mc.ModelConfigError, match="cannot read .*config.json"):
        mc.load_model_config(str(tmp_path))


def test_too_large(tmp_path, monkeypatch):
    monkeypatch.setattr(mc, "MAX_CONFIG_BYTES", 10)
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"num_hidden_layers": 32}))
    with pytest.raises(mc.ModelConfigError, match="is larger than 10 bytes"):
        mc.load_model_config(str(path))


@pytest.mark.parametrize("bad", [None, "", "   ", 42])
def test_not_a_path(bad):
    with pytest.raises(mc.ModelConfigError, match="model_config must be a path"):
        mc.load_model_config(bad)


def test_error_class():
    assert issubclass(mc.ModelConfigError, KvModelError)
    assert issubclass(mc.ModelConfigError, ValueError)

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""kv_capacity reads a model's files as the unit's user could, with the tuner's safe reader (issue 18): a config.json
symlinked to a root-only file, a FIFO, an oversize file. Files are made as root under /run (root_dir)."""
from __future__ import annotations

import json
import os
import pwd
import shutil

import pytest

from ansible_collections.llmserve.sglang.plugins.modules import kv_capacity
from ansible_collections.llmserve.sglang.tests.unit.plugins.modules import uthelper

CONFIG = uthelper.FIXTURES / "configs" / "qwen3-8b.json"
ARGS = {"mem_fraction_static": 0.88, "pre_load_free_gib": 94.04, "post_load_free_gib": 21.71}


def _nobody():
    try:
        return pwd.getpwnam("nobody").pw_uid
    except KeyError:
        pytest.skip("no user nobody")


def _show(user, environment=""):
    return [{"command": ["/usr/bin/systemctl", "show", "sglang.service",
                         "--property=User,LoadState,Environment,EnvironmentFiles"],
             "out": "User=%s\nLoadState=loaded\n%s" % (user, environment)}]


def _model(root_dir):
    model = os.path.join(root_dir, "model")
    os.makedirs(model)
    os.chown(model, _nobody(), _nobody())
    return model


def _case(model_config, unit=True, user="nobody", output=None):
    return {"id": "reader", "input": dict(ARGS, model_config=model_config, **({"unit": "sglang.service"} if unit else {})),
            "mocks": {"run_command": _show(user) if unit else []}, "output": output or {}}


def test_a_model_the_user_can_read_is_computed(root_dir):
    model = _model(root_dir)
    shutil.copy(CONFIG, os.path.join(model, "config.json"))
    os.chmod(os.path.join(model, "config.json"), 0o644)
    result = uthelper.run_case(kv_capacity, _case(model))
    assert result["max_total_num_tokens"] > 0


@pytest.mark.parametrize("unit", [True, False])
def test_a_config_symlinked_to_a_root_only_file_is_refused_as_the_user(root_dir, unit):
    secret = os.path.join(root_dir, "secret.json")
    with open(secret, "w", encoding="utf-8") as handle:
        json.dump(json.loads(CONFIG.read_text()), handle)
    os.chmod(secret, 0o600)
    model = _model(root_dir)
    os.symlink(secret, os.path.join(model, "config.json"))
    if unit:
        uthelper.run_case(kv_capacity, _case(model, output={
            "failed": True, "msg": "config.json: uid %d cannot read it" % _nobody()}))
    else:
        # Without a unit there is no user to distrust: the operator's own file, read by root.
        assert uthelper.run_case(kv_capacity, _case(model, unit=False))["max_total_num_tokens"] > 0


@pytest.mark.parametrize("unit", [True, False])
def test_a_fifo_in_place_of_config_json_fails_at_once(root_dir, unit, in_child):
    model = _model(root_dir)
    os.mkfifo(os.path.join(model, "config.json"), 0o644)
    case = _case(model, unit=unit, output={"failed": True, "msg": "config.json is not a regular file"})
    outcome, message = in_child(10, uthelper.run_case, kv_capacity, case)
    assert outcome == "ok", message


def test_an_oversize_config_is_refused(root_dir):
    model = _model(root_dir)
    with open(os.path.join(model, "config.json"), "wb") as handle:
        handle.truncate(16 * 2 ** 20 + 1)
    os.chmod(os.path.join(model, "config.json"), 0o644)
    uthelper.run_case(kv_capacity, _case(model, output={"failed": True, "msg": "is larger than 16777216 bytes"}))


def test_a_unit_that_does_not_exist_is_named(root_dir):
    case = _case(str(CONFIG), output={"failed": True, "msg": "sglang.service does not exist on the host"})
    case["mocks"]["run_command"][0]["out"] = "User=\nLoadState=not-found\n"
    uthelper.run_case(kv_capacity, case)


@pytest.mark.parametrize("env_file, env_property, fails", [
    ("SGLANG_ENABLE_POST_CAPTURE_KV_SIZING=1\nHF_TOKEN=hf_s3cret\n", "", True),
    ("", "SGLANG_ENABLE_POST_CAPTURE_KV_SIZING=true", True),
    ("SGLANG_ENABLE_POST_CAPTURE_KV_SIZING=0\n", "SGLANG_ENABLE_POST_CAPTURE_KV_SIZING=true", False),   # the file wins
    ("", "", False),
])
def test_the_units_environment_decides_post_capture_sizing(root_dir, env_file, env_property, fails):
    model = _model(root_dir)
    shutil.copy(CONFIG, os.path.join(model, "config.json"))
    os.chmod(os.path.join(model, "config.json"), 0o644)
    path = os.path.join(root_dir, "sglang.env")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(env_file)
    os.chmod(path, 0o600)
    environment = "Environment=%s\nEnvironmentFiles=%s (ignore_errors=no)\n" % (env_property, path)
    case = {"id": "environment", "input": dict(ARGS, model_config=model, unit="sglang.service", sglang_version="0.5.23"),
            "mocks": {"run_command": _show("nobody", environment)},
            "output": {"failed": True, "msg": "sizes the KV pool after CUDA-graph capture"} if fails else {}}
    result = uthelper.run_case(kv_capacity, case)
    assert "hf_s3cret" not in json.dumps(result)
    if not fails:
        assert result["max_total_num_tokens"] > 0

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang_service_units as tasks/main.yml of the sglang_service role calls it: the role's variables in, one plain
dict per server out, errors as AnsibleFilterError; its documentation."""
from __future__ import annotations

import json

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible.utils.unsafe_proxy import wrap_var

from ansible_collections.llmserve.sglang.plugins.filter import sglang_service_units

UNITS = sglang_service_units.FilterModule().filters()["sglang_service_units"]
COMMAND = ["/opt/sglang/venv/bin/python", "-m", "sglang.launch_server"]


def role_call(server_args, **variables):
    """The call in roles/sglang_service/tasks/main.yml, with the role's defaults."""
    role = {"instances": [], "name": "sglang", "env_dir": "/etc/sglang", "command": COMMAND,
            "mem_fraction_static": None, "environment": {}, "model_path": "/models/single-gpu/model",
            "host": "127.0.0.1", "port": 30000}
    role.update(variables)
    return UNITS(server_args, **role)


def test_the_molecule_scenarios_unit():
    # molecule/sglang/converge.yml: its tests read this ExecStart from the unit file.
    (unit,) = role_call(wrap_var({"served_model_name": "llama-3.1-8b", "tp_size": 1}), host=wrap_var("0.0.0.0"))
    assert unit["exec_start"] == ("/opt/sglang/venv/bin/python -m sglang.launch_server --model-path "
                                  "/models/single-gpu/model --host 0.0.0.0 --port 30000 --served-model-name "
                                  "llama-3.1-8b --tp-size 1")
    assert unit["kv_args"] == "" and unit["url"] == "http://127.0.0.1:30000" and unit["unit"] == "sglang.service"
    # Plain types only: the fact is printed and kept between tasks.
    assert json.loads(json.dumps(unit)) == unit


def test_the_field_value_reaches_llmserve_kv_args():
    units = role_call({"tp_size": 4}, mem_fraction_static=0.88,
                      instances=[{"name": "a", "server_args": {"port": 30001}},
                                 {"name": "b", "server_args": {"port": 30002}, "mem_fraction_static": 0.9}])
    assert [(u["unit"], u["kv_args"], u["mem_fraction_static_from"]) for u in units] == [
        ("sglang@a.service", "--mem-fraction-static 0.88", "sglang_service_mem_fraction_static"),
        ("sglang@b.service", "--mem-fraction-static 0.9", "instance variable")]


@pytest.mark.parametrize("server_args, variables, message", [
    ({"api-key": "x"}, {}, "must not hold api_key"),
    ({}, {"instances": [{"name": "a"}, {"name": "b"}]}, "both listen on port 30000"),
    ({}, {"mem_fraction_static": 1.5}, r"sglang_service_mem_fraction_static must be in \(0, 1\)"),
    ({}, {"instances": [{"name": "a b"}]}, r"sglang_service_instances\[0\]: name must be"),
])
def test_errors_are_filter_errors_named_after_the_filter(server_args, variables, message):
    with pytest.raises(AnsibleFilterError, match="^sglang_service_units: .*" + message):
        role_call(server_args, **variables)


def test_docs_name_every_option():
    doc = yaml.safe_load(sglang_service_units.DOCUMENTATION)
    assert doc["name"] == "sglang_service_units"
    # Every keyword the filter takes is documented, and nothing else.
    options = set(doc["options"]) - {"_input"}
    assert options == set(UNITS.__code__.co_varnames[1:UNITS.__code__.co_argcount])
    assert "llmserve.sglang.sglang_service_units" in sglang_service_units.EXAMPLES
    assert set(yaml.safe_load(sglang_service_units.RETURN)["_value"]["contains"]) == set(role_call({})[0])

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""su.compose: the sglang_service role's units from its variables, case by case (one server, several
instances, each source of --mem-fraction-static, hosts), and every input it refuses."""
from __future__ import annotations

import copy

import pytest

from ansible_collections.llmserve.sglang.plugins.plugin_utils.unit_files import service_units as su

PYTHON = "/opt/sglang/venv/bin/python"
COMMAND = [PYTHON, "-m", "sglang.launch_server"]
LAUNCH = " ".join(COMMAND)
# What the role passes when only the model is set (defaults/main.yml).
ROLE = {"command": COMMAND, "model_path": "/models/m", "host": "127.0.0.1", "port": 30000}


def compose(server_args=None, **kwargs):
    return su.compose(server_args if server_args is not None else {}, **dict(ROLE, **kwargs))


def test_one_server_with_the_role_defaults():
    assert compose() == [{
        "unit": "sglang.service", "instance": "", "env_file": "/etc/sglang/sglang.env",
        "server_args": {"model_path": "/models/m", "host": "127.0.0.1", "port": 30000, "mem_fraction_static": None},
        "mem_fraction_static": None, "mem_fraction_static_from": "SGLang's default", "kv_args": "",
        "exec_start": LAUNCH + " --model-path /models/m --host 127.0.0.1 --port 30000",
        "port": 30000, "url": "http://127.0.0.1:30000", "follower_node": False, "environment": {},
    }]


def test_a_node_other_than_0_of_a_multinode_server_is_a_follower():
    units = compose({"tp_size": 16, "nnodes": 2, "dist_init_addr": "10.0.0.1:5000", "node_rank": 1})
    assert units[0]["follower_node"] is True and "--node-rank 1" in units[0]["exec_start"]
    assert compose({"nnodes": 2, "node_rank": 0})[0]["follower_node"] is False


def test_two_instances_with_their_own_ports_values_and_environment():
    units = compose({"tp_size": 4}, name="llm", env_dir="/etc/llm", environment={"A": "1", "B": "2"},
                    instances=[{"name": "a", "server_args": {"port": 30001, "base_gpu_id": 0}},
                               {"name": "b", "server_args": {"port": "30002", "base_gpu_id": 4},
                                "mem_fraction_static": 0.86, "environment": {"B": "b", "NCCL_DEBUG": "WARN"}}])
    assert [(u["unit"], u["instance"], u["env_file"], u["port"], u["url"]) for u in units] == [
        ("llm@a.service", "a", "/etc/llm/llm@a.env", 30001, "http://127.0.0.1:30001"),
        ("llm@b.service", "b", "/etc/llm/llm@b.env", 30002, "http://127.0.0.1:30002")]
    assert [u["exec_start"] for u in units] == [
        LAUNCH + " --model-path /models/m --host 127.0.0.1 --port 30001 --tp-size 4 --base-gpu-id 0",
        LAUNCH + " --model-path /models/m --host 127.0.0.1 --port 30002 --tp-size 4 --base-gpu-id 4"]
    assert [(u["mem_fraction_static"], u["mem_fraction_static_from"], u["kv_args"]) for u in units] == [
        (None, "SGLang's default", ""), (0.86, "instance variable", "--mem-fraction-static 0.86")]
    assert [u["environment"] for u in units] == [{"A": "1", "B": "2"}, {"A": "1", "B": "b", "NCCL_DEBUG": "WARN"}]


# (server args, instance, sglang_service_mem_fraction_static) -> (value, from, LLMSERVE_KV_ARGS)
SOURCES = [
    ({}, {}, None, (None, "SGLang's default", "")),
    ({"mem_fraction_static": 0.8}, {}, None, (0.8, "server args", "--mem-fraction-static 0.8")),
    ({}, {"server_args": {"mem_fraction_static": "0.880"}}, None, (0.88, "server args", "--mem-fraction-static 0.88")),
    ({"mem-fraction-static": 0.85}, {}, None, (0.85, "server args", "--mem-fraction-static 0.85")),
    ({"mem_fraction_static": 0.8}, {}, 0.9, (0.9, "sglang_service_mem_fraction_static", "--mem-fraction-static 0.9")),
    ({"mem_fraction_static": 0.8}, {"mem_fraction_static": 0.86}, 0.9,
     (0.86, "instance variable", "--mem-fraction-static 0.86")),
    ({}, {"mem_fraction_static": None}, "0.9",
     (0.9, "sglang_service_mem_fraction_static", "--mem-fraction-static 0.9")),
    # The shortest text that reads back as the same float (kv_search.value_text), as str(float) wrote it before.
    ({}, {"mem_fraction_static": 0.1 + 0.2}, None,
     (0.30000000000000004, "instance variable", "--mem-fraction-static 0.30000000000000004")),
    ({}, {"mem_fraction_static": 1e-05}, None, (1e-05, "instance variable", "--mem-fraction-static 1e-05")),
]


@pytest.mark.parametrize("server_args, instance, variable, expected", SOURCES)
def test_where_mem_fraction_static_comes_from(server_args, instance, variable, expected):
    instances = [dict(instance, name="x")] if instance else []
    (unit,) = compose(server_args, instances=instances, mem_fraction_static=variable)
    assert (unit["mem_fraction_static"], unit["mem_fraction_static_from"], unit["kv_args"]) == expected
    # Never in ExecStart: the tuner's drop-ins override LLMSERVE_KV_ARGS.
    assert "mem-fraction-static" not in unit["exec_start"]
    assert [value for key, value in unit["server_args"].items() if "fraction" in key] == [None]


@pytest.mark.parametrize("host, url", [
    ("127.0.0.1", "http://127.0.0.1:30000"),
    ("0.0.0.0", "http://127.0.0.1:30000"),
    ("::", "http://127.0.0.1:30000"),
    ("", "http://127.0.0.1:30000"),
    (None, "http://127.0.0.1:30000"),
    ("::1", "http://[::1]:30000"),
    ("fd00::5", "http://[fd00::5]:30000"),
    ("10.0.0.5", "http://10.0.0.5:30000"),
    ("gpu1.example", "http://gpu1.example:30000"),
])
def test_probe_url_of_the_host(host, url):
    (unit,) = compose(host=host)
    assert unit["url"] == url


def test_a_host_in_an_instance_beats_the_variable():
    units = compose(host="0.0.0.0", instances=[{"name": "a", "server_args": {"port": 1, "host": "::1"}},
                                               {"name": "b", "server_args": {"port": 2}}])
    assert [u["url"] for u in units] == ["http://[::1]:1", "http://127.0.0.1:2"]
    assert "--host ::1 --port 1" in units[0]["exec_start"] and "--host 0.0.0.0 --port 2" in units[1]["exec_start"]


def test_port_absent_is_sglangs_default():
    (unit,) = compose(port=None)
    assert unit["port"] == 30000 and unit["url"] == "http://127.0.0.1:30000"
    assert "--port" not in unit["exec_start"]


def test_one_argument_in_several_spellings_is_one_flag():
    # model-path in the server args replaces sglang_service_model_path (not a second --model-path), tp replaces
    # tp_size in place.
    (unit,) = compose({"model-path": "/models/x", "tp_size": 4, "dtype": "bfloat16"}, model_path="",
                      instances=[{"name": "a", "server_args": {"tp": 8}}])
    assert unit["exec_start"] == (LAUNCH + " --model-path /models/x --host 127.0.0.1 --port 30000 --tp 8"
                                  " --dtype bfloat16")
    assert list(unit["server_args"]) == ["model-path", "host", "port", "tp", "dtype", "mem_fraction_static"]


def test_inputs_are_not_changed():
    args = {"tp_size": 4, "mem_fraction_static": 0.8}
    instances = [{"name": "a", "server_args": {"port": 1, "tp": 8}, "environment": {"X": "1"}}]
    environment = {"A": "1"}
    before = copy.deepcopy((args, instances, environment))
    compose(args, instances=instances, environment=environment)
    assert (args, instances, environment) == before


def test_exec_start_quotes_for_systemd():
    (unit,) = compose({"served_model_name": '100% "mine" $HOME'}, model_path="/models/My Model")
    assert unit["exec_start"] == (LAUNCH + ' --model-path "/models/My Model" --host 127.0.0.1 --port 30000'
                                  ' --served-model-name "100%% \\"mine\\" $$HOME"')


ERRORS = [
    # ports
    ({"instances": [{"name": "a"}, {"name": "b"}]},
     r"sglang@a.service and sglang@b.service both listen on port 30000"),
    ({"instances": [{"name": "a", "server_args": {"port": 30001}}, {"name": "b", "server_args": {"port": "30001"}}]},
     r"both listen on port 30001"),
    ({"port": "http"}, r"sglang.service: port must be a number, got 'http'"),
    ({"port": 70000}, r"sglang.service: port must be in 1..65535, got 70000"),
    ({"instances": [{"name": "a", "server_args": {"port": 0}}]}, r"sglang@a.service: port must be in 1..65535"),
    # --mem-fraction-static: which server and where from
    ({"mem_fraction_static": 1.5}, r"^sglang_service_mem_fraction_static must be in \(0, 1\), got 1.5"),
    ({"mem_fraction_static": 0}, r"sglang_service_mem_fraction_static must be in \(0, 1\), got 0"),
    ({"mem_fraction_static": "most"}, r"sglang_service_mem_fraction_static must be a number, got 'most'"),
    ({"mem_fraction_static": True}, r"sglang_service_mem_fraction_static must be a number, got True"),
    ({"instances": [{"name": "a", "server_args": {"port": 1}},
                    {"name": "b", "server_args": {"port": 2}, "mem_fraction_static": 1.2}]},
     r"sglang@b.service: --mem-fraction-static from sglang_service_instances\[1\].mem_fraction_static must be in "
     r"\(0, 1\), got 1.2"),
    ({"instances": [{"name": "a", "server_args": {"mem-fraction-static": "1"}}]},
     r"sglang@a.service: --mem-fraction-static from sglang_service_instances\[0\].server_args must be in \(0, 1\)"),
    ({"server_args": {"mem_fraction_static": -0.1}},
     r"sglang.service: --mem-fraction-static from sglang_service_server_args must be in \(0, 1\), got -0.1"),
    # names
    ({"instances": [{"name": "a b"}]}, r"sglang_service_instances\[0\]: name must be letters, digits.*got 'a b'"),
    ({"instances": [{"name": ""}]}, r"sglang_service_instances\[0\]: name must be .*got ''"),
    ({"instances": [{"server_args": {"port": 1}}]}, r"sglang_service_instances\[0\]: name must be .*got None"),
    ({"instances": [{"name": "a/b"}]}, r"got 'a/b'"),
    ({"instances": [{"name": "a", "server_args": {"port": 1}}, {"name": "a", "server_args": {"port": 2}}]},
     r"sglang_service_instances\[1\]: the name 'a' is given twice"),
    ({"name": "sglang service"}, r"sglang_service_name must be a plain unit name .*got 'sglang service'"),
    ({"name": "sglang@x"}, r"sglang_service_name must be a plain unit name"),
    # secrets: only from sglang_service_api_key
    ({"server_args": {"api_key": "x"}}, r"^sglang_service_server_args must not hold api_key: .*sglang_service_api_key"),
    ({"server_args": {"api-key": "x"}}, r"sglang_service_server_args must not hold api_key \(written 'api-key'\)"),
    ({"server_args": {"api_key": None}}, r"must not hold api_key"),
    ({"instances": [{"name": "a", "server_args": {"admin-api-key": "x"}}]},
     r"sglang_service_instances\[0\].server_args must not hold admin_api_key"),
    ({"server_args": {"ssl_keyfile_password": "x"}}, r"must not hold ssl_keyfile_password"),
    # shapes and the command line
    ({"server_args": {"tp": 4, "tp_size": 8}},
     r"sglang_service_server_args: 'tp' and 'tp_size' are the same argument \(tp_size\)"),
    ({"server_args": ["--tp", "8"]}, r"sglang_service_server_args must be a dict, got list"),
    ({"instances": {"name": "a"}}, r"sglang_service_instances must be a list, got dict"),
    ({"instances": ["a"]}, r"sglang_service_instances\[0\] must be a dict, got str"),
    ({"instances": [{"name": "a", "server_args": "tp=8"}]},
     r"sglang_service_instances\[0\].server_args must be a dict, got str"),
    ({"environment": ["A=1"]}, r"sglang_service_environment must be a dict, got list"),
    ({"server_args": {"--tp-size": 8}}, r"sglang.service: sglang_cli_args: '--tp-size' is not a valid SGLang flag"),
    ({"command": ["-python"]}, r"sglang.service: sglang_exec_start: the executable '-python'"),
]


@pytest.mark.parametrize("kwargs, message", ERRORS)
def test_refused_inputs_name_the_variable_and_the_server(kwargs, message):
    kwargs = dict(kwargs)
    server_args = kwargs.pop("server_args", {})
    with pytest.raises(su.ServiceUnitsError, match=message):
        compose(server_args, **kwargs)


def test_errors_are_invalid_input():
    assert issubclass(su.ServiceUnitsError, ValueError)


def test_unit_names_are_those_compose_renders():
    instances = [{"name": "a", "server_args": {"port": 30001}}, {"name": "b", "server_args": {"port": 30002}}]
    assert su.unit_names(instances, "sglang") == ["sglang@a.service", "sglang@b.service"]
    assert su.unit_names([], "llm") == ["llm.service"]
    with pytest.raises(su.ServiceUnitsError, match="given twice"):
        su.unit_names([{"name": "a"}, {"name": "a"}])


# --- the API key on the command line (issue 18) -------------------------------------------------------------------

SYSFS = "sysfs /sys sysfs rw,nosuid,nodev,noexec,relatime 0 0\n"


@pytest.mark.parametrize("mounts, api_key_set, expected", [
    (SYSFS + "proc /proc proc rw,nosuid,nodev,noexec,relatime 0 0\n", True, "mounted without hidepid (no hidepid"),
    ("proc /proc proc rw,relatime,hidepid=0 0 0\n", True, "mounted without hidepid (hidepid=0)"),
    ("proc /proc proc rw,relatime,hidepid=off 0 0\n", True, "mounted without hidepid (hidepid=off)"),
    ("proc /proc proc rw,relatime,hidepid=2 0 0\n", True, ""),
    ("proc /proc proc rw,relatime,hidepid=invisible 0 0\n", True, ""),
    ("proc /proc proc rw,relatime,hidepid=1 0 0\n", True, ""),
    ("proc /proc proc rw,relatime,hidepid=ptraceable 0 0\n", True, ""),
    ("proc /proc proc rw,relatime,hidepid=2,gid=27 0 0\n", True, "except from the members of group 27"),
    # the last proc mount on /proc is what users see; one elsewhere (a container's) does not count
    ("proc /proc proc rw,hidepid=2 0 0\nproc /proc proc rw,relatime 0 0\n", True, "mounted without hidepid"),
    ("proc /proc proc rw 0 0\nproc /proc proc rw,hidepid=2 0 0\n", True, ""),
    ("proc /srv/c/proc proc rw,hidepid=2 0 0\nproc /proc proc rw 0 0\n", True, "mounted without hidepid"),
    (SYSFS, True, "no /proc mount was found to check"),
    ("", True, "no /proc mount was found to check"),
    ("proc /proc proc rw,relatime 0 0\n", False, ""),
])
def test_api_key_exposure(mounts, api_key_set, expected):
    warning = su.api_key_exposure(mounts, api_key_set)
    if expected:
        assert expected in warning and "sglang_service_api_key is set" in warning
    else:
        assert warning == ""


def test_the_warning_names_the_mitigation():
    warning = su.api_key_exposure("proc /proc proc rw 0 0\n", True)
    assert "hidepid=2" in warning and "/proc/<pid>/cmdline" in warning

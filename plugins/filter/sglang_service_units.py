# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filter sglang_service_units: Compose the systemd units of the sglang_service role from its variables."""
from __future__ import annotations

DOCUMENTATION = r"""
name: sglang_service_units
short_description: Compose the systemd units of the sglang_service role from its variables
version_added: 1.0.0
author:
  - llmserve.sglang contributors (@llmserve)
description:
  - Returns one dictionary per server, C(<name>.service) or C(<name>@<instance>.service) per entry of
    O(instances), which the templates of P(llmserve.sglang.sglang_service#role) render into the unit and its
    EnvironmentFile.
  - "Server arguments merge per argument, whatever its spelling (C(tp), C(tp-size), C(tp_size)): {O(model_path),
    O(host), O(port)}, then the input, then the instance's C(server_args); the later spelling wins."
  - "C(--mem-fraction-static), by precedence: the instance's C(mem_fraction_static), then the option
    O(mem_fraction_static), then a C(mem_fraction_static) in the merged server arguments, else none (SGLang's
    default). It is not written into
    C(exec_start) but into C(kv_args) (C(--mem-fraction-static 0.88), the shortest text that reads back as the
    same value), which the unit passes as C(LLMSERVE_KV_ARGS) and the KV tuner's drop-ins override."
  - C(exec_start) is rendered as P(llmserve.sglang.sglang_exec_start#filter) does; C(url) is where the server
    answers on its host (a wildcard address becomes 127.0.0.1, an IPv6 address is bracketed).
  - Fails, naming the variable and the server, on an invalid O(name) or instance name, an instance name given
    twice, a secret (C(api_key), C(admin_api_key), C(ssl_keyfile_password)) in the server arguments, a
    C(--mem-fraction-static) outside (0, 1) (and where it came from), a port outside 1..65535 or one that two
    servers share.
options:
  _input:
    description:
      - The server arguments of every server (I(sglang_service_server_args)), SGLang flag names without C(--).
    type: dict
    required: true
  instances:
    description:
      - Several servers on one host (I(sglang_service_instances)), each C({name, server_args, mem_fraction_static,
        environment}). Empty or not given, one server named O(name).
    type: list
    elements: dict
    default: []
  name:
    description: Base name of the units (I(sglang_service_name)).
    type: str
    default: sglang
  env_dir:
    description: Directory of the EnvironmentFiles (I(sglang_service_env_dir)).
    type: str
    default: /etc/sglang
  command:
    description: The executable and its first arguments, put before the server arguments in C(exec_start).
    type: list
    elements: str
  mem_fraction_static:
    description: C(--mem-fraction-static) of every server without its own (I(sglang_service_mem_fraction_static)).
    type: float
  environment:
    description: Environment of every server (I(sglang_service_environment)), under each instance's own.
    type: dict
    default: {}
  model_path:
    description: C(--model-path) unless the server arguments set it (I(sglang_service_model_path)).
    type: str
  host:
    description: C(--host) unless the server arguments set it (I(sglang_service_host)).
    type: str
  port:
    description: C(--port) unless the server arguments set it (I(sglang_service_port)); absent, 30000.
    type: int
seealso:
  - plugin: llmserve.sglang.sglang_exec_start
    plugin_type: filter
"""

EXAMPLES = r"""
- name: Compose two servers of an 8-GPU host
  ansible.builtin.set_fact:
    units: >-
      {{ {'tp_size': 4} | llmserve.sglang.sglang_service_units(
           instances=[{'name': 'a', 'server_args': {'port': 30001, 'base_gpu_id': 0}},
                      {'name': 'b', 'server_args': {'port': 30002, 'base_gpu_id': 4}, 'mem_fraction_static': 0.86}],
           command=['/opt/sglang/venv/bin/python', '-m', 'sglang.launch_server'],
           model_path='/models/m', host='127.0.0.1', port=30000) }}
  # units[1].unit: sglang@b.service, units[1].kv_args: --mem-fraction-static 0.86,
  # units[1].url: http://127.0.0.1:30002
"""

RETURN = r"""
_value:
  description: One dictionary per server.
  type: list
  elements: dict
  contains:
    unit:
      description: The unit's file name, C(sglang.service) or C(sglang@a.service).
      type: str
    instance:
      description: The instance name, empty without instances.
      type: str
    env_file:
      description: The EnvironmentFile, C(<env_dir>/<unit without .service>.env).
      type: str
    server_args:
      description: The merged server arguments, C(mem_fraction_static) set to null.
      type: dict
    mem_fraction_static:
      description: The value of C(--mem-fraction-static), null for SGLang's default.
      type: float
    mem_fraction_static_from:
      description: >-
        Where it came from: C(instance variable), C(sglang_service_mem_fraction_static), C(server args) or
        C(SGLang's default).
      type: str
    kv_args:
      description: C(--mem-fraction-static <value>), or empty.
      type: str
    exec_start:
      description: The C(ExecStart=) value (without C($LLMSERVE_KV_ARGS)).
      type: str
    port:
      description: The server's port.
      type: int
    url:
      description: Where the server answers on its host, e.g. C(http://127.0.0.1:30001).
      type: str
    follower_node:
      description: True for a node other than 0 of a server that spans hosts (C(node_rank) above 0), which serves
        no API, only SGLang's health check.
      type: bool
    environment:
      description: The server's environment, O(environment) under the instance's own.
      type: dict
"""

from ansible.errors import AnsibleFilterError

from ansible_collections.llmserve.sglang.plugins.plugin_utils.plain import plain
from ansible_collections.llmserve.sglang.plugins.plugin_utils.unit_files.service_units import ServiceUnitsError, compose


def sglang_service_units(server_args, instances=None, name="sglang", env_dir="/etc/sglang", command=None,
                         mem_fraction_static=None, environment=None, model_path=None, host=None, port=None):
    """One dict per server (unit, env_file, server_args, exec_start, kv_args, port, url, ...); see compose()."""
    try:
        return compose(plain(server_args), instances=plain(instances), name=plain(name), env_dir=plain(env_dir),
                       command=plain(command), mem_fraction_static=plain(mem_fraction_static),
                       environment=plain(environment), model_path=plain(model_path), host=plain(host),
                       port=plain(port))
    except ServiceUnitsError as exc:
        raise AnsibleFilterError("sglang_service_units: %s" % exc) from exc


class FilterModule:
    def filters(self):
        return {"sglang_service_units": sglang_service_units}

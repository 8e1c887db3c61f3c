# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang_service_units: the sglang_service role's systemd units composed from its variables
(module_utils/service_units.py). Documentation: sglang_service_units.yml beside this file."""
from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.llmserve.sglang.plugins.plugin_utils.plain import plain
from ansible_collections.llmserve.sglang.plugins.module_utils.service_units import (
    ServiceUnitsError,
    api_key_exposure,
    compose,
    unit_names,
)


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


def sglang_service_unit_names(instances, name="sglang"):
    """The unit names of the role's servers (``sglang@a.service``, ..., or ``sglang.service``)."""
    try:
        return unit_names(plain(instances), name=plain(name))
    except ServiceUnitsError as exc:
        raise AnsibleFilterError("sglang_service_unit_names: %s" % exc) from exc


def sglang_service_api_key_exposure(mounts, api_key_set):
    """The warning when local users can read the API key from the server's command line, else ""."""
    return api_key_exposure(plain(mounts), bool(api_key_set))


class FilterModule:
    def filters(self):
        return {"sglang_service_units": sglang_service_units, "sglang_service_unit_names": sglang_service_unit_names,
                "sglang_service_api_key_exposure": sglang_service_api_key_exposure}

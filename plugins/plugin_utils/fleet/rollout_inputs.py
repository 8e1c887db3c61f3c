# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The rollout's inputs (playbooks/rollout.yml), checked on every host before any host is touched: versions, batches,
timeouts, hooks, the units to upgrade, and the topologies the rollout does not handle. Pure: the
rollout_check_inputs filter observes which hook files exist and calls check_inputs."""
from __future__ import annotations

import posixpath
import re
from typing import Any, Collection

from ansible_collections.llmserve.sglang.plugins.module_utils import checks
from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner import run_settings
from ansible_collections.llmserve.sglang.plugins.plugin_utils.unit_files import service_units


class RolloutInputError(ValueError):
    """A rollout input that is not valid on some host; the message names each one and its hosts."""


# PEP 440 versions in their normal form (what pip prints and installs with ==): 0.5.10, 0.4.6.post5, 0.5.0rc2,
# 1!2.0.dev1, 0.5.9+cu128. Anything else (an empty string, a specifier, "0.5.9 && reboot") is not a version.
_PEP440 = re.compile(r"([0-9]+!)?[0-9]+(\.[0-9]+)*((a|b|rc)[0-9]+)?(\.post[0-9]+)?(\.dev[0-9]+)?"
                     r"(\+[a-z0-9]+(\.[a-z0-9]+)*)?")
_UNIT = re.compile(r"^[A-Za-z0-9_.@-]+\.service$")
_SERIAL_PERCENT = re.compile(r"^([0-9]+(\.[0-9]+)?)%$")
# Seconds the gates and the roll-back's restart may wait: the tuner's own bound for a server's start.
MAX_WAIT_S = run_settings.BOUNDS["ready_timeout"][1]
MAX_INTERVAL_S = run_settings.BOUNDS["ready_interval"][1]
HOOKS = ("rollout_drain_tasks", "rollout_undrain_tasks")
# The inputs of playbooks/rollout.yml that check_inputs reads from each host's variables; an input a host does not
# set takes its role's default, which is valid (the unit tests check the defaults).
INPUTS = ("sglang_version", "nvidia_driver_branch", "nvidia_driver_version", "rollout_serial",
          "rollout_max_fail_percentage", "rollout_gate_timeout", "rollout_ready_timeout", "rollout_ready_interval",
          "rollout_units", "rollout_retune", "rollout_lock_lease", "rollout_hook_timeout") + HOOKS
# The sglang_service role's inputs that say which servers the upgrade's roles would restart on a host.
TOPOLOGY = ("sglang_service_name", "sglang_service_instances", "sglang_service_server_args")
# Seconds the rollout's lock on a unit lasts unless it is released (a controller that dies leaves it until then):
# at least ten minutes, at most a day (the tuner's own bound for a trial's revert).
LOCK_LEASE_S = (600, run_settings.BOUNDS["confirm_timeout"][1])


def hook_path(path: str, playbook_dir: str) -> str:
    """Where a hook's task file is on the controller: absolute, or relative to the playbook (the role's defaults)."""
    return posixpath.normpath(posixpath.join(playbook_dir, path))


def _serial_problem(serial: Any) -> str | None:
    """Why ``serial`` (Ansible's play keyword: a batch size, a percentage, or a list of them) is not a rollout's
    batches, or None. Ansible reads 0 as "all hosts at once": no canary."""
    batches = serial if isinstance(serial, list) else [serial]
    if not batches:
        return "must name at least one batch"
    for batch in batches:
        text = str(batch).strip()
        percent = _SERIAL_PERCENT.fullmatch(text)
        if percent:
            if not 0 < float(percent.group(1)) <= 100:
                return "a percentage must lie in (0, 100]%% (got %r)" % (batch,)
        elif isinstance(batch, bool) or not text.isdigit() or int(text) < 1:
            return "each batch must be a host count >= 1 or a percentage such as '25%%' (got %r)" % (batch,)
    return None


def _number_problem(value: Any, kind: type, low: float, high: float) -> str | None:
    try:
        number = checks.parse_number("", value, kind, RolloutInputError)
    except RolloutInputError:
        return "must be %s (got %r)" % ("a whole number" if kind is int else "a number", value)
    return None if low <= number <= high else "must lie in [%s, %s] (got %r)" % (low, high, value)


def input_problems(values: dict[str, Any], regular_files: Collection[str] = frozenset(),
                   playbook_dir: str = ".") -> list[str]:
    """What is wrong with one host's rollout inputs: a list of "name: why" (empty when all are valid). ``values``:
    the inputs of INPUTS that the host sets; ``regular_files``: the hook paths (hook_path) that are regular files on
    the controller, observed by the caller."""
    problems: list[str] = []

    def bad(name: str, why: str) -> None:
        problems.append("%s %s" % (name, why))

    if "sglang_version" in values and not _PEP440.fullmatch(str(values["sglang_version"])):
        bad("sglang_version", "must be an exact PEP 440 version such as 0.5.10 or 0.4.6.post5 (got %r)"
            % (values["sglang_version"],))
    branch = str(values.get("nvidia_driver_branch", ""))
    if "nvidia_driver_branch" in values and not re.fullmatch(r"[0-9]{3}", branch):
        bad("nvidia_driver_branch", "must be a driver branch such as '580' (got %r)" % (values["nvidia_driver_branch"],))
    version = str(values.get("nvidia_driver_version") or "")
    if version and not (re.fullmatch(r"[0-9]+\.[0-9]+(\.[0-9]+)?", version)
                        and (not branch or version.split(".", maxsplit=1)[0] == branch)):
        bad("nvidia_driver_version", "must be empty or an upstream version of the driver branch such as 580.105.08 "
            "(got %r)" % (version,))
    if "rollout_serial" in values:
        why = _serial_problem(values["rollout_serial"])
        if why:
            bad("rollout_serial", why)
    for name, kind, low, high in (("rollout_max_fail_percentage", float, 0, 100),
                                  ("rollout_gate_timeout", int, 1, MAX_WAIT_S),
                                  ("rollout_ready_timeout", int, 1, MAX_WAIT_S),
                                  ("rollout_ready_interval", int, 1, MAX_INTERVAL_S),
                                  ("rollout_lock_lease", int) + LOCK_LEASE_S,
                                  ("rollout_hook_timeout", int, 10, MAX_WAIT_S)):
        if name in values:
            why = _number_problem(values[name], kind, low, high)
            if why:
                bad(name, why)
    units = values.get("rollout_units")
    if "rollout_units" in values and (not isinstance(units, list) or not units
                                      or not all(_UNIT.fullmatch(str(unit)) for unit in units)):
        bad("rollout_units", "must be a list of systemd service names such as [sglang.service] (got %r)" % (units,))
    if "rollout_retune" in values:
        try:
            checks.parse_bool("rollout_retune", values["rollout_retune"], RolloutInputError)
        except RolloutInputError:
            bad("rollout_retune", "must be true or false (got %r)" % (values["rollout_retune"],))
    hooks = {name: str(values.get(name) or "") for name in HOOKS}
    for name, path in hooks.items():
        if path and hook_path(path, playbook_dir) not in regular_files:
            bad(name, "must be empty or a task file on the controller, absolute or relative to the playbook: %s is not "
                "a regular file" % hook_path(path, playbook_dir))
    if hooks["rollout_drain_tasks"] and not hooks["rollout_undrain_tasks"]:
        bad("rollout_drain_tasks", "is set without rollout_undrain_tasks: every upgraded host would stay drained")
    problems += topology_problems(values)
    return problems


def topology_problems(values: dict[str, Any]) -> list[str]:
    """What rollout.yml does not handle on a host, from the sglang_service role's inputs it sets: a server of the host
    left out of rollout_units (the upgrade's roles restart every server of the host, and the rollout would lock,
    gate, re-tune and roll back only the others). A server that spans hosts is batched by rollout_batches.py, which
    refuses one whose nodes are not all in the play. A list of "name why", like input_problems."""
    name = values.get("sglang_service_name", "sglang")
    instances = values.get("sglang_service_instances") or []
    try:
        servers = service_units.unit_names(instances, name)
    except service_units.ServiceUnitsError as exc:
        return ["sglang_service_instances %s" % exc]
    problems: list[str] = []
    units = values.get("rollout_units")
    if isinstance(units, list) and units and all(_UNIT.fullmatch(str(unit)) for unit in units):
        left_out = [unit for unit in servers if unit not in units]
        if left_out:
            problems.append("rollout_units leaves out %s, which the upgrade restarts on the new release with the "
                            "host's other servers: list every server of the host (the default does)"
                            % ", ".join(left_out))
    return problems


def check_inputs(host_values: dict[str, dict[str, Any]], regular_files: Collection[str] = frozenset(),
                 playbook_dir: str = ".") -> dict[str, Any]:
    """Every host's rollout inputs (``host_values``: {host: the inputs it sets}) checked before any host is touched.
    Returns {hosts, sglang_versions}; raises RolloutInputError naming each bad input and the hosts that have it."""
    hosts_of: dict[str, list[str]] = {}
    for host in sorted(host_values):
        for problem in input_problems(host_values[host], regular_files, playbook_dir):
            hosts_of.setdefault(problem, []).append(host)
    if hosts_of:
        raise RolloutInputError("Invalid input for playbooks/rollout.yml, nothing was done: " + "; ".join(
            "%s (%s)" % (problem, ", ".join(hosts)) for problem, hosts in sorted(hosts_of.items())))
    versions = sorted({str(values["sglang_version"]) for values in host_values.values() if "sglang_version" in values})
    return {"hosts": len(host_values), "sglang_versions": versions}

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The systemd units of the sglang_service role, composed from its variables: one entry per server (``<name>.service``,
or ``<name>@<instance>.service`` per instance) with its EnvironmentFile, merged server arguments, ExecStart, the
``--mem-fraction-static`` it starts with and where that came from, its port and the URL that probes it.

Pure and stdlib only. The filter llmserve.sglang.sglang_service_units (plugins/filter/sglang_service_units.py) hands it the
role's variables; the role's templates (sglang.service.j2, sglang.env.j2) render each entry. Argument names are
SGLang's fields (server_args.canonical), so ``tp``, ``tp-size`` and ``tp_size`` are one argument when layers merge.

    units = compose({"tp_size": 4}, instances=[{"name": "a", "server_args": {"port": 30001}}],
                    command=["/opt/sglang/venv/bin/python", "-m", "sglang.launch_server"], model_path="/models/m")
"""
from __future__ import annotations

import re
from typing import Any, Iterable, Sequence

from ansible_collections.llmserve.sglang.plugins.module_utils import checks
from ansible_collections.llmserve.sglang.plugins.plugin_utils.unit_files import command_line
from ansible_collections.llmserve.sglang.plugins.module_utils.service import server_args as sa
from ansible_collections.llmserve.sglang.plugins.module_utils.capacity.kv_search import value_text

UNIT_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")

# Where --mem-fraction-static comes from, by precedence. The unit file quotes these words in a comment.
FROM_INSTANCE = "instance variable"
FROM_VARIABLE = "sglang_service_mem_fraction_static"
FROM_SERVER_ARGS = "server args"
FROM_DEFAULT = "SGLang's default"

_MFS = "mem_fraction_static"


class ServiceUnitsError(checks.InvalidInput):
    """Role variables that make no valid set of units; the message names the variable and the server."""


def _dict(label: str, value: Any) -> dict[Any, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ServiceUnitsError("%s must be a dict, got %s" % (label, type(value).__name__))
    return value


def _no_secrets(label: str, layer: Iterable[Any]) -> None:
    # The unit file is world-readable and the composed units are printed with -v: no secret may reach either.
    for key in layer:
        name = sa.canonical(key)
        if name in sa.SECRET_ARGS:
            written = "" if key == name else " (written %r)" % (key,)
            raise ServiceUnitsError(
                "%s must not hold %s%s: secrets stay out of the unit file (world-readable) and out of Ansible's "
                "output; the API key comes only from sglang_service_api_key, which is kept out of both"
                % (label, name, written))


def _merge(layers: Iterable[tuple[str, dict[Any, Any]]]) -> tuple[dict[Any, Any], dict[str, Any], dict[str, str]]:
    """The server args of ``layers`` ((label, dict), later ones win per argument) and, per SGLang field name, the
    key that holds it and the label of the layer that set it. One argument in two spellings would otherwise reach
    the command line twice (dict.update keeps both)."""
    args: dict[Any, Any] = {}
    keys: dict[str, Any] = {}
    origin: dict[str, str] = {}
    for label, layer in layers:
        seen: dict[str, Any] = {}
        for key, value in layer.items():
            name = sa.canonical(key)
            if name in seen:
                raise ServiceUnitsError("%s: %r and %r are the same argument (%s); give it once"
                                        % (label, seen[name], key, name))
            seen[name] = key
            old = keys.get(name)
            if old is not None and old != key:
                # Same place in the command line as before, in the later layer's spelling.
                args = {(key if k == old else k): (value if k == old else v) for k, v in args.items()}
            else:
                args[key] = value
            keys[name], origin[name] = key, label
    return args, keys, origin


def _fraction(label: str, value: Any) -> float:
    value = checks.parse_number(label, value, float, ServiceUnitsError)
    return checks.fraction(label, value, ServiceUnitsError)


def _instances(name: Any, instances: Any) -> list[tuple[str, dict[Any, Any], Any]]:
    """(instance name, instance dict, its variable's label) per server; one unnamed server without instances."""
    if not isinstance(name, str) or not UNIT_NAME.match(name):
        raise ServiceUnitsError("sglang_service_name must be a plain unit name of letters, digits, '_', '.', '-' "
                                "(got %r)" % (name,))
    if instances is None:
        instances = []
    if not isinstance(instances, (list, tuple)):
        raise ServiceUnitsError("sglang_service_instances must be a list, got %s" % type(instances).__name__)
    if not instances:
        return [("", {}, None)]
    out: list[tuple[str, dict[Any, Any], Any]] = []
    names: set[str] = set()
    for i, inst in enumerate(instances):
        label = "sglang_service_instances[%d]" % i
        inst = _dict(label, inst)
        inst_name = inst.get("name")
        if not isinstance(inst_name, str) or not UNIT_NAME.match(inst_name):
            raise ServiceUnitsError("%s: name must be letters, digits, '_', '.', '-' (it names the unit "
                                    "%s@<name>.service), got %r" % (label, name, inst_name))
        if inst_name in names:
            raise ServiceUnitsError("%s: the name %r is given twice; each server needs its own unit"
                                    % (label, inst_name))
        names.add(inst_name)
        out.append((inst_name, inst, label))
    return out


def _unit_name(name: str, inst_name: str) -> str:
    return "%s%s.service" % (name, "@" + inst_name if inst_name else "")


def unit_names(instances: Sequence[Any] | None = None, name: str = "sglang") -> list[str]:
    """The units the role renders: ``<name>@<instance>.service`` per instance, else ``<name>.service``."""
    return [_unit_name(name, inst_name) for inst_name, _inst, _label in _instances(name, instances)]


def _node_rank(unit: str, value: Any) -> int:
    return 0 if value is None else checks.parse_number("%s: node_rank" % unit, value, int, ServiceUnitsError)


def _port(unit: str, value: Any) -> int:
    if value is None:
        return sa.DEFAULT_PORT  # no --port: SGLang's default
    port = checks.parse_number("%s: port" % unit, value, int, ServiceUnitsError)
    if not 0 < port < 65536:
        raise ServiceUnitsError("%s: port must be in 1..65535, got %r" % (unit, value))
    return port


def compose(server_args: dict[str, Any] | None = None, instances: Sequence[Any] | None = None, name: str = "sglang",
            env_dir: str = "/etc/sglang", command: Any = None, mem_fraction_static: Any = None,
            environment: dict[str, Any] | None = None, model_path: str | None = None, host: str | None = None,
            port: Any = None) -> list[dict[str, Any]]:
    """One dict per server: unit, instance, env_file, server_args (``mem_fraction_static`` set to None: the value
    travels in LLMSERVE_KV_ARGS, which the KV tuner's drop-ins override), mem_fraction_static (a float or None),
    mem_fraction_static_from, kv_args, exec_start, port, url, environment.

    ``server_args`` merge over ``{model_path, host, port}``, an instance's ``server_args`` over them. The value of
    --mem-fraction-static: the instance's ``mem_fraction_static``, else ``mem_fraction_static``
    (sglang_service_mem_fraction_static), else a ``mem_fraction_static`` in the merged server args, else none
    (SGLang's default). Raises :class:`ServiceUnitsError` for an invalid unit or instance name, a secret in the server
    args, a value outside (0, 1), a port that is not one or that two servers share."""
    server_args = _dict("sglang_service_server_args", server_args)
    environment = _dict("sglang_service_environment", environment)
    _no_secrets("sglang_service_server_args", server_args)
    if mem_fraction_static is not None:  # checked even when every instance sets its own: a typo stays visible
        mem_fraction_static = _fraction(FROM_VARIABLE, mem_fraction_static)
    base = [("sglang_service_model_path/_host/_port", {"model_path": model_path, "host": host, "port": port}),
            ("sglang_service_server_args", server_args)]
    units: list[dict[str, Any]] = []
    ports: dict[int, str] = {}
    for inst_name, inst, label in _instances(name, instances):
        unit = _unit_name(name, inst_name)
        layers = list(base)
        if inst_name:
            inst_args = _dict(label + ".server_args", inst.get("server_args"))
            _no_secrets(label + ".server_args", inst_args)
            layers.append((label + ".server_args", inst_args))
        args, keys, origin = _merge(layers)

        if inst.get(_MFS) is not None:
            value, source, where = inst[_MFS], FROM_INSTANCE, label + "." + _MFS
        elif mem_fraction_static is not None:
            value, source, where = mem_fraction_static, FROM_VARIABLE, FROM_VARIABLE
        elif args.get(keys.get(_MFS)) is not None:
            value, source, where = args[keys[_MFS]], FROM_SERVER_ARGS, origin[_MFS]
        else:
            value, source, where = None, FROM_DEFAULT, None
        if value is not None:
            value = _fraction("%s: --mem-fraction-static from %s" % (unit, where), value)
        # Not in ExecStart: in LLMSERVE_KV_ARGS, which ExecStart ends with and the tuner's drop-ins override.
        args[keys.get(_MFS, _MFS)] = None

        server_port = _port(unit, args.get(keys.get("port")))
        if server_port in ports:
            raise ServiceUnitsError("sglang_service_instances: %s and %s both listen on port %d; give each server "
                                    "its own port in its server_args" % (ports[server_port], unit, server_port))
        ports[server_port] = unit
        try:
            exec_start = command_line.exec_start(args, command=command)
        except command_line.CommandLineError as exc:
            raise ServiceUnitsError("%s: %s" % (unit, exc)) from exc
        env = dict(environment)
        if inst_name:
            env.update(_dict(label + ".environment", inst.get("environment")))
        units.append({
            "unit": unit, "instance": inst_name,
            "env_file": "%s/%s.env" % (env_dir, unit[:-len(".service")]),
            "server_args": args, "mem_fraction_static": value, "mem_fraction_static_from": source,
            "kv_args": "--mem-fraction-static " + value_text(value) if value is not None else "",
            "exec_start": exec_start,
            "port": server_port,
            "url": sa.probe_url({"host": args.get(keys.get("host")), "port": server_port}),
            # A node other than 0 of a multi-node server runs no API, only SGLang's health check.
            "follower_node": _node_rank(unit, args.get(keys.get("node_rank"))) > 0,
            "environment": env,
        })
    return units


# hidepid values (numeric and, since Linux 5.8, named) under which other users cannot read /proc/<pid>/cmdline.
_HIDING = ("1", "2", "4", "noaccess", "invisible", "ptraceable")


def api_key_exposure(mounts: str | None, api_key_set: Any) -> str:
    """The warning for the operator when the API key (on the server's command line: SGLang reads it from no
    environment variable) can be read by every local user from /proc/<pid>/cmdline, else "". ``mounts`` is the text
    of /proc/self/mounts on the host; the last proc mount on /proc is the one users see."""
    if not api_key_set:
        return ""
    options = None
    for line in (mounts or "").splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[1] == "/proc" and fields[2] == "proc":
            options = dict((item.split("=", 1) + [""])[:2] for item in fields[3].split(","))
    fix = ("mount /proc with hidepid=invisible (hidepid=2; fstab: 'proc /proc proc defaults,hidepid=2 0 0', then "
           "'mount -o remount /proc'); README.md, Security")
    if options is None:
        return ("sglang_service_api_key is set and no /proc mount was found to check: the key is on the server's "
                "command line, readable by every local user unless /proc hides other users' processes; " + fix)
    if options.get("hidepid") not in _HIDING:
        return ("sglang_service_api_key is set and /proc is mounted without hidepid (%s): every local user can read "
                "the key from the server's command line (/proc/<pid>/cmdline, ps); %s"
                % ("hidepid=" + options["hidepid"] if "hidepid" in options else "no hidepid option", fix))
    if options.get("gid"):
        return ("sglang_service_api_key is set: /proc hides other users' processes (hidepid=%s), except from the "
                "members of group %s, who can read the key from the server's command line"
                % (options["hidepid"], options["gid"]))
    return ""

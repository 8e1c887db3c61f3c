# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Regenerate ``src/sglang_sim/data/server_args.json`` from an SGLang release's ``server_args.py``.

The simulator must accept exactly the flags ``python -m sglang.launch_server`` accepts (an unknown flag is an
argparse error, exit 2) and print ``server_args=ServerArgs(...)`` with every dataclass field, so both are read
from SGLang's own source instead of being typed by hand. The source is parsed with ``ast`` (never imported: it
needs torch). Run it by hand when moving the simulator to another SGLang release::

    pip download --no-deps sglang==0.5.9 -d /tmp/sgl && unzip -q /tmp/sgl/sglang-0.5.9-*.whl -d /tmp/sgl/w
    python3 tools/sglang_sim/gen_server_args.py /tmp/sgl/w/sglang/srt/server_args.py 0.5.9 \\
        > tools/sglang_sim/src/sglang_sim/data/server_args.json

Flags whose ``choices`` are not a literal list in that file (built from registries at import time) accept any
value; defaults that are not literals are resolved through ServerArgs' fields or module constants, else None.
"""
from __future__ import annotations

import ast
import json
import sys

_TYPES = {"str": "str", "int": "int", "float": "float", "json.loads": "json", "json_list_type": "json_list",
          "nullable_str": "nullable_str"}


class _Unresolved(Exception):
    """A value in the source is computed at import time and cannot be read statically."""


def _module_constants(tree):
    constants = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                constants[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                continue
    return constants


def _value(node, constants, fields):
    """A literal, ServerArgs.<field>, a module constant, list(<constant>) or a product of literals."""
    try:
        return ast.literal_eval(node)
    except ValueError:
        pass
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "ServerArgs":
        if node.attr in fields:
            return fields[node.attr]
    if isinstance(node, ast.Name) and node.id in constants:
        return constants[node.id]
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id in constants:
        return constants[node.value.id][ast.literal_eval(node.slice)]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "list":
        return list(_value(node.args[0], constants, fields)) if node.args else []
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        return _value(node.left, constants, fields) * _value(node.right, constants, fields)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "field":
        for keyword in node.keywords:
            if keyword.arg == "default_factory":
                factory = keyword.value
                if isinstance(factory, ast.Lambda):
                    return _value(factory.body, constants, fields)
                if isinstance(factory, ast.Name) and factory.id in ("list", "dict"):
                    return [] if factory.id == "list" else {}
    raise _Unresolved(ast.unparse(node))


def _fields(cls, constants):
    fields = {}
    for node in cls.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if node.value is None:
                fields[node.target.id] = None
                continue
            try:
                fields[node.target.id] = _value(node.value, constants, fields)
            except _Unresolved:
                fields[node.target.id] = None
    return fields


def _option(call, constants, fields):
    flags = [arg.value for arg in call.args]
    keywords = {keyword.arg: keyword.value for keyword in call.keywords}
    long_flag = next((flag for flag in flags if flag.startswith("--")), flags[0])
    dest = keywords["dest"].value if "dest" in keywords else long_flag.lstrip("-").replace("-", "_")
    action = ast.unparse(keywords["action"]).strip("'\"") if "action" in keywords else "store"
    option = {"flags": flags, "dest": dest, "action": {"store_true": "store_true", "DeprecatedAction": "deprecated"}
              .get(action, "store")}
    if action == "LoRAPathAction":
        option["nargs"] = "*"
    if "type" in keywords:
        option["type"] = _TYPES[ast.unparse(keywords["type"])]
    if "nargs" in keywords:
        option["nargs"] = ast.literal_eval(keywords["nargs"])
    if "required" in keywords:
        option["required"] = ast.literal_eval(keywords["required"])
    if "const" in keywords:
        option["const"] = _value(keywords["const"], constants, fields)
    if "choices" in keywords:
        try:
            option["choices"] = list(_value(keywords["choices"], constants, fields))
        except _Unresolved:
            option["choices"] = None
    if "default" in keywords:
        try:
            option["default"] = _value(keywords["default"], constants, fields)
        except _Unresolved:
            option["default"] = None
    elif option["action"] == "store_true":
        option["default"] = False
    else:
        option["default"] = None
    return option


def extract(source, version):
    """The flag table and the ServerArgs field defaults of one server_args.py, as a JSON-able dict."""
    tree = ast.parse(source)
    constants = _module_constants(tree)
    cls = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "ServerArgs")
    fields = _fields(cls, constants)
    add_cli_args = next(node for node in cls.body if isinstance(node, ast.FunctionDef) and node.name == "add_cli_args")
    calls = sorted((node for node in ast.walk(add_cli_args) if isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument"),
                   key=lambda node: node.lineno)
    options = [_option(node, constants, fields) for node in calls]
    return {"sglang_version": version, "source": "python/sglang/srt/server_args.py",
            "fields": [[name, value] for name, value in fields.items()], "options": options}


def main(argv):
    """gen_server_args.py SERVER_ARGS_PY VERSION > server_args.json"""
    if len(argv) != 2:
        sys.stderr.write("usage: gen_server_args.py path/to/server_args.py VERSION\n")
        return 2
    with open(argv[0], encoding="utf-8") as handle:
        data = extract(handle.read(), argv[1])
    sys.stdout.write(json.dumps(data, indent=0, sort_keys=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

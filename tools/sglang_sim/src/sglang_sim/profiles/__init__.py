# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Host profiles shipped with the simulator, and ``sglang-sim-profile`` to put one on a host.

A profile is a directory here: ``host.json`` (the hardware, versions, memory behaviour and the default launch
flags, where ``{model}`` and ``{draft}`` stand for the model directories) plus ``model/`` and optionally
``draft/`` (Hugging Face config.json + model.safetensors.index.json). Sources of the files: SOURCES.md.

    sglang-sim-profile list
    sglang-sim-profile install field --root / [--models-dir /models] [--time-scale realistic]
    sglang-sim-profile args field [--models-dir /models]      # the default launch flags, one per line

``install`` writes ``<root>/etc/sglang-sim/host.json`` and ``<root><models-dir>/<name>/{model,draft}/`` and prints
JSON with ``changed`` (false when everything was already in place: safe to run again).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from sglang_sim.hostspec import DEFAULT_HOST_PATH, TIME_SCALES, Host

PROFILES_DIR = os.path.dirname(os.path.abspath(__file__))


def names() -> list:
    """The shipped profiles."""
    return sorted(entry for entry in os.listdir(PROFILES_DIR)
                  if os.path.isfile(os.path.join(PROFILES_DIR, entry, "host.json")))


def load(name: str) -> dict:
    """A profile's host.json as shipped (placeholders unresolved)."""
    if name not in names():
        raise SystemExit("sglang-sim-profile: unknown profile %r (known: %s)" % (name, ", ".join(names())))
    with open(os.path.join(PROFILES_DIR, name, "host.json"), encoding="utf-8") as handle:
        return json.load(handle)


def model_dirs(name: str, models_dir: str) -> dict:
    """{'model': path, 'draft': path} of a profile's model directories on the host."""
    found = {}
    for part in ("model", "draft"):
        if os.path.isdir(os.path.join(PROFILES_DIR, name, part)):
            found[part] = os.path.join(models_dir, name, part)
    return found


def launch_args(name: str, models_dir: str) -> list:
    """The profile's default launch_server flags with the model paths filled in."""
    dirs = model_dirs(name, models_dir)
    return [arg.format(**dirs) for arg in load(name).get("default_launch_args", [])]


def host_json(name: str, models_dir: str, time_scale: str | None = None) -> dict:
    """The host.json a host gets: the profile's, with default_launch_args resolved."""
    data = load(name)
    data["default_launch_args"] = launch_args(name, models_dir)
    if time_scale:
        data["time_scale"] = time_scale
    Host(data, "profile " + name)   # validate
    return data


def _write(path: str, content: bytes) -> bool:
    try:
        with open(path, "rb") as handle:
            if handle.read() == content:
                return False
    except OSError:
        pass
    os.makedirs(os.path.dirname(path), exist_ok=True)
    temporary = path + ".tmp"
    with open(temporary, "wb") as handle:
        handle.write(content)
    os.replace(temporary, path)
    return True


def install(name: str, root: str, models_dir: str, time_scale: str | None = None) -> dict:
    """Write host.json and the model directories under ``root``; report what changed."""
    written = []
    host_path = os.path.join(root, DEFAULT_HOST_PATH.lstrip("/"))
    content = (json.dumps(host_json(name, models_dir, time_scale), indent=2) + "\n").encode()
    if _write(host_path, content):
        written.append(host_path)
    for part, target in model_dirs(name, models_dir).items():
        source = os.path.join(PROFILES_DIR, name, part)
        for filename in sorted(os.listdir(source)):
            with open(os.path.join(source, filename), "rb") as handle:
                data = handle.read()
            path = os.path.join(root, target.lstrip("/"), filename)
            if _write(path, data):
                written.append(path)
    return {"changed": bool(written), "profile": name, "host_json": host_path, "written": written,
            "launch_args": launch_args(name, models_dir)}


def main(argv=None) -> int:
    """sglang-sim-profile {list,show,args,install} ..."""
    parser = argparse.ArgumentParser(prog="sglang-sim-profile", description=__doc__.split("\n", maxsplit=1)[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("list", help="the shipped profiles")
    for command in ("show", "args", "install"):
        sub = commands.add_parser(command)
        sub.add_argument("name")
        sub.add_argument("--models-dir", default="/models", help="where the model directories go (default /models)")
        if command in ("show", "install"):
            sub.add_argument("--time-scale", choices=TIME_SCALES, default=None)
        if command == "install":
            sub.add_argument("--root", default="/", help="filesystem root to install into (default /)")
    options = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if options.command == "list":
        for name in names():
            print("%-20s %s" % (name, load(name).get("description", "")))
    elif options.command == "show":
        print(json.dumps(host_json(options.name, options.models_dir, options.time_scale), indent=2))
    elif options.command == "args":
        print("\n".join(launch_args(options.name, options.models_dir)))
    else:
        print(json.dumps(install(options.name, options.root, options.models_dir, options.time_scale), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

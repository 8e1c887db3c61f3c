# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""SGLang's own sizing code, executed from its released wheels without torch or a GPU.

A wheel is downloaded once from PyPI (``pip download sglang==X --no-deps``) into .tmp/sglang-wheels. One module of
it is executed without its imports: every name it imports from sglang, torch or another third-party package is a
``Stub`` (calling it or reading an attribute gives another Stub, false in a test, an error in arithmetic), so a
value that SGLang computes from something not stubbed on purpose fails loudly instead of passing unnoticed.
"""
from __future__ import annotations

import ast
import fcntl
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

WHEELS = Path(__file__).resolve().parents[2] / ".tmp" / "sglang-wheels"
_STDLIB = {"logging", "dataclasses", "typing", "math", "bisect", "enum", "functools", "os", "collections",
           "itertools", "abc", "__future__", "contextlib", "time", "re", "warnings", "inspect"}


class Stub(object):
    """What an import SGLang's module makes stands for: anything, but no number."""

    def __init__(self, name):
        self._name = name

    def __call__(self, *args, **kwargs):
        return Stub(self._name + "()")

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return Stub(self._name + "." + attr)

    def __bool__(self):
        return False

    def __iter__(self):
        return iter(())

    def __repr__(self):
        return "Stub(%s)" % self._name


def wheel(version):
    """The wheel of sglang==version, downloaded once; the test is skipped, saying why, when it cannot be. One
    process at a time (make functional runs two workers): another's download in progress is a partial file."""
    WHEELS.mkdir(parents=True, exist_ok=True)
    with open(WHEELS / ".lock", "w", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _wheel(version)


def _wheel(version):
    found = sorted(WHEELS.glob("sglang-%s-*.whl" % version))
    if found:
        return found[0]
    try:
        # Python code only is read: the CPython 3.11 x86-64 build of a release is fetched whatever runs the test
        run = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--disable-pip-version-check",
                              "--only-binary=:all:", "--python-version", "3.11", "--platform", "manylinux_2_34_x86_64",
                              "sglang==%s" % version, "-d", str(WHEELS)], capture_output=True, text=True,
                             timeout=300, check=False)
    except subprocess.TimeoutExpired:
        pytest.skip("sglang==%s could not be downloaded from PyPI in 300 s (offline?)" % version)
    found = sorted(WHEELS.glob("sglang-%s-*.whl" % version))
    if not found:
        pytest.skip("sglang==%s could not be downloaded from PyPI (offline?): %s"
                    % (version, (run.stderr or run.stdout).strip()[-300:]))
    return found[0]


def source(version, path):
    with zipfile.ZipFile(wheel(version)) as whl:
        return whl.read(path).decode()


def load(version, path, **names):
    """Execute sglang/<path> of the release without its third-party imports; `names` are bound over the Stubs.
    Returns the module's namespace."""
    tree = ast.parse(source(version, path))
    namespace = {"__name__": "sglang_%s_%s" % (version.replace(".", "_"), Path(path).stem)}
    body = []
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            module = node.module if isinstance(node, ast.ImportFrom) else node.names[0].name
            if (module or "").split(".")[0] in _STDLIB and not getattr(node, "level", 0):
                body.append(node)
                continue
            for alias in node.names:
                bound = alias.asname or alias.name.split(".")[0]
                namespace[bound] = Stub(bound)
            continue
        body.append(node)
    namespace.update(names)
    module = ast.Module(body=body, type_ignores=[])
    # the dataclasses it defines look their module up in sys.modules
    sys.modules[namespace["__name__"]] = type(sys)(namespace["__name__"])
    exec(compile(module, "sglang-%s/%s" % (version, path), "exec"), namespace)   # noqa: S102 - SGLang's own code
    namespace.update(names)
    return namespace


class Obj(object):
    """An attribute bag standing for SGLang's ModelRunner, ServerArgs, ModelConfig."""

    def __init__(self, **kw):
        self.__dict__.update(kw)


def element_size_torch(elem):
    """A torch stub whose _utils._element_size gives `elem` bytes (the KV cache dtype's element size)."""
    return Obj(_utils=Obj(_element_size=lambda _dtype: elem), float8_e4m3fn="fp8", float8_e5m2="fp8e5",
               bfloat16="bf16", float16="fp16", float32="fp32", int64="int64", tensor=Stub("torch.tensor"))


def functions(version, path, *wanted):
    """Only the named top-level functions of sglang/<path> (a module too big to execute whole), as a dict."""
    tree = ast.parse(source(version, path))
    body = [node for node in tree.body if isinstance(node, ast.FunctionDef) and node.name in wanted]
    namespace = {}
    exec(compile(ast.Module(body=body, type_ignores=[]), "sglang-%s/%s" % (version, path), "exec"),  # noqa: S102
         namespace)
    missing = set(wanted) - set(namespace)
    assert not missing, "sglang %s %s has no %s" % (version, path, ", ".join(sorted(missing)))
    return {name: namespace[name] for name in wanted}

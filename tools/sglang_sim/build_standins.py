# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Build the stand-in ``sglang`` wheels: one per simulated SGLang version, from the template in ``standin/``.

A simulated host installs SGLang as a real one does, with pip, as the distribution ``sglang`` at a real version:
the wheel holds only the ``sglang`` package of ``standin/sglang`` (``python -m sglang.launch_server`` hands over to
sglang-sim) and ``sglang-<version>.dist-info/{METADATA,WHEEL,RECORD}`` with ``Requires-Dist: sglang-sim``. The
versions are every ``sglang_version`` of a shipped profile's host.json plus EXTRA_VERSIONS (or those given with
``--version``). The wheel zip is written directly (no build backend, no index): the same sources give the same
bytes::

    python3 tools/sglang_sim/build_standins.py OUTDIR [--version 0.5.9 ...]

prints the path of each wheel it wrote.
"""
from __future__ import annotations

import argparse
import base64
import glob
import hashlib
import json
import os
import re
import sys
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATE = os.path.join(HERE, "standin")
PROFILES = os.path.join(HERE, "src", "sglang_sim", "profiles")
# Versions no shipped profile uses, built for the tests that upgrade a host's SGLang with pip.
EXTRA_VERSIONS = ("0.5.10",)
# PEP 440 public versions in canonical form, so that the version is also the wheel file name's.
_VERSION = re.compile(r"^\d+(\.\d+)*((a|b|rc)\d+)?(\.post\d+)?(\.dev\d+)?$")
# Zip entries get a fixed time (the earliest a zip can hold) and mode: the same sources give the same wheel.
_DATE_TIME = (1980, 1, 1, 0, 0, 0)

METADATA = """Metadata-Version: 2.1
Name: sglang
Version: {version}
Summary: Stand-in for SGLang {version} on simulated GPU hosts: python -m sglang.launch_server runs sglang-sim
License: GPL-3.0-or-later
Requires-Python: >=3.9
Requires-Dist: sglang-sim
"""

WHEEL = """Wheel-Version: 1.0
Generator: llmserve.sglang tools/sglang_sim/build_standins.py
Root-Is-Purelib: true
Tag: py3-none-any
"""


def profile_versions() -> list:
    """Every ``sglang_version`` a shipped profile's host.json names."""
    versions = set()
    for path in glob.glob(os.path.join(PROFILES, "*", "host.json")):
        with open(path, encoding="utf-8") as handle:
            version = json.load(handle).get("sglang_version")
        if version:
            versions.add(str(version))
    return sorted(versions)


def template_files() -> list:
    """(path in the wheel, content) of the template's package, sorted."""
    files = []
    for directory, subdirs, names in os.walk(TEMPLATE):
        subdirs[:] = sorted(d for d in subdirs if d != "__pycache__")
        for name in sorted(names):
            if name.endswith(".py"):
                path = os.path.join(directory, name)
                with open(path, "rb") as handle:
                    files.append((os.path.relpath(path, TEMPLATE).replace(os.sep, "/"), handle.read()))
    if "sglang/__init__.py" not in [path for path, content in files]:
        raise SystemExit("build_standins: %s holds no sglang/__init__.py" % TEMPLATE)
    return sorted(files)


def _record_line(path: str, content: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(content).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (path, digest, len(content))


def build(version: str, outdir: str) -> str:
    """Write ``sglang-<version>-py3-none-any.whl`` into outdir; return its path."""
    if not _VERSION.match(version):
        raise SystemExit("build_standins: %r is not a canonical PEP 440 version (e.g. 0.5.9, 0.5.5.post3)" % version)
    dist_info = "sglang-%s.dist-info" % version
    files = template_files() + [(dist_info + "/METADATA", METADATA.format(version=version).encode()),
                                (dist_info + "/WHEEL", WHEEL.encode())]
    record_path = dist_info + "/RECORD"
    record = "".join(_record_line(path, content) + "\n" for path, content in files) + record_path + ",,\n"
    files.append((record_path, record.encode()))
    wheel = os.path.join(outdir, "sglang-%s-py3-none-any.whl" % version)
    tmp = wheel + ".tmp"
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for path, content in files:
            info = zipfile.ZipInfo(path, date_time=_DATE_TIME)
            info.external_attr = 0o100644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, content)
    os.replace(tmp, wheel)
    return wheel


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="build_standins.py", description=__doc__.split("\n", 1)[0])
    parser.add_argument("outdir", help="the wheelhouse to write into (created when missing)")
    parser.add_argument("--version", action="append", dest="versions",
                        help="a version to build (repeatable; default: the profiles' versions and %s)"
                        % ", ".join(EXTRA_VERSIONS))
    options = parser.parse_args(argv)
    versions = options.versions or sorted(set(profile_versions()) | set(EXTRA_VERSIONS))
    os.makedirs(options.outdir, exist_ok=True)
    for version in versions:
        print(build(version, options.outdir))
    return 0


if __name__ == "__main__":
    sys.exit(main())

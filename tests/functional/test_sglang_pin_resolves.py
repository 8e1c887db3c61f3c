# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The real `sglang` version pinned by the sglang role's defaults resolves from PyPI (molecule installs the simulator
in its place, so this is the only proof that a fleet following the defaults can install it).

`pip download --no-deps` of exactly that version from https://pypi.org/simple, with pip's configuration files,
find-links and extra indexes of this machine switched off, for the oldest target the role supports (CPython 3.11,
x86_64, glibc 2.34: the wheel tags SGLang publishes). Skipped only when PyPI cannot be reached."""
from __future__ import annotations

import os
import subprocess
import sys
import urllib.error
import urllib.request
import zipfile

import pytest
import yaml

from conftest import REPO

PYPI = "https://pypi.org/simple"


@pytest.fixture(name="pin", scope="module")
def fixture_pin() -> tuple[str, str]:
    defaults = yaml.safe_load((REPO / "roles" / "sglang" / "defaults" / "main.yml").read_text())
    return defaults["sglang_pip_package"], str(defaults["sglang_version"])


@pytest.fixture(name="pypi", scope="module")
def fixture_pypi() -> None:
    try:
        with urllib.request.urlopen(f"{PYPI}/sglang/", timeout=20) as response:
            response.read(1)
    except (urllib.error.URLError, OSError) as exc:
        pytest.skip(f"PyPI is unreachable from here ({PYPI}/sglang/: {exc}); the pin cannot be checked")


def test_default_package_is_the_real_sglang(pin):
    package, version = pin
    assert package == "sglang"
    assert version.count(".") >= 2 and not version.startswith("0.0"), version


def test_pinned_sglang_downloads_from_pypi(pin, pypi, tmp_path):
    package, version = pin
    env = {key: value for key, value in os.environ.items()
           if not key.startswith("PIP_") or key in ("PIP_CERT", "PIP_DEFAULT_TIMEOUT")}
    env["PIP_CONFIG_FILE"] = os.devnull  # no pip.conf: no local find-links or mirrors can answer instead of PyPI
    run = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--no-cache-dir", "--disable-pip-version-check",
         "--index-url", PYPI, "--only-binary=:all:", "--implementation", "cp", "--python-version", "3.11",
         "--abi", "cp311", "--platform", "manylinux_2_34_x86_64", "-d", str(tmp_path),
         f"{package}=={version}"],
        env=env, capture_output=True, text=True, timeout=900, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    wheels = sorted(tmp_path.glob("sglang-*.whl"))
    assert [w.name.split("-")[1] for w in wheels] == [version], run.stdout
    with zipfile.ZipFile(wheels[0]) as wheel:
        metadata = wheel.read(f"sglang-{version}.dist-info/METADATA").decode()
    assert f"\nVersion: {version}\n" in metadata
    assert "\nName: sglang\n" in metadata

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The stand-in ``sglang`` distribution (tools/sglang_sim/build_standins.py, template tools/sglang_sim/standin/).

One wheel per simulated SGLang version, as pip installs SGLang: ``Name: sglang``, ``Version: <that version>``,
``Requires-Dist: sglang-sim``, only the ``sglang`` package. The installed distribution's version is the one
``sglang.__version__`` reports and the one the simulated server runs (KV arithmetic, errors, /get_server_info);
host.json's ``sglang_version`` only counts where no ``sglang`` distribution is installed.
"""
from __future__ import annotations

import base64
import glob
import hashlib
import json
import os
import re
import subprocess
import sys
import zipfile

import pytest

import simlib

BUILDER = os.path.join(simlib.REPO, "tools", "sglang_sim", "build_standins.py")
CODE = "import sglang; print(sglang.__version__); print(sglang.__file__)"


def build(outdir, *versions) -> list:
    """Run the builder as make does; return the wheels it printed."""
    argv = [sys.executable, BUILDER, str(outdir)] + [arg for version in versions for arg in ("--version", version)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True)
    return done.stdout.split()


def install(wheel: str, site) -> str:
    """Unpack a wheel into ``site`` (what pip's install does with a pure-Python wheel, less INSTALLER)."""
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(str(site))
    return str(site)


def profile_versions() -> set:
    versions = set()
    for path in glob.glob(os.path.join(simlib.PROFILES, "*", "host.json")):
        with open(path, encoding="utf-8") as handle:
            versions.add(json.load(handle)["sglang_version"])
    return versions


def metadata_fields(text: str) -> dict:
    fields = {}
    for line in text.splitlines():
        if ": " in line:
            key, value = line.split(": ", 1)
            fields.setdefault(key, []).append(value)
    return fields


def test_one_wheel_per_profile_version_and_the_upgrade_target(tmp_path):
    wheels = build(tmp_path / "a")
    assert profile_versions() == {"0.5.9", "0.5.5.post3", "0.5.17"}   # what the shipped profiles say today
    expected = sorted("sglang-%s-py3-none-any.whl" % v for v in profile_versions() | {"0.5.10"})
    assert sorted(os.path.basename(w) for w in wheels) == expected
    assert sorted(os.listdir(str(tmp_path / "a"))) == expected
    # Reproducible: the same sources give the same bytes.
    again = build(tmp_path / "b")
    for first, second in zip(sorted(wheels), sorted(again)):
        with open(first, "rb") as one, open(second, "rb") as two:
            assert one.read() == two.read(), first


@pytest.mark.parametrize("version", ["0.5.9", "0.5.5.post3", "0.5.10"])
def test_wheel_metadata_record_and_content(tmp_path, version):
    (wheel,) = build(tmp_path, version)
    dist_info = "sglang-%s.dist-info" % version
    with zipfile.ZipFile(wheel) as archive:
        names = sorted(archive.namelist())
        assert names == sorted(["sglang/__init__.py", "sglang/launch_server.py", dist_info + "/METADATA",
                                dist_info + "/WHEEL", dist_info + "/RECORD"])
        meta = metadata_fields(archive.read(dist_info + "/METADATA").decode())
        assert meta["Name"] == ["sglang"] and meta["Version"] == [version]
        assert meta["Requires-Dist"] == ["sglang-sim"] and meta["Metadata-Version"] == ["2.1"]
        wheel_meta = metadata_fields(archive.read(dist_info + "/WHEEL").decode())
        assert wheel_meta["Tag"] == ["py3-none-any"] and wheel_meta["Root-Is-Purelib"] == ["true"]
        record = [line.split(",") for line in archive.read(dist_info + "/RECORD").decode().splitlines()]
        assert sorted(row[0] for row in record) == names
        for path, digest, size in record:
            if path == dist_info + "/RECORD":
                assert digest == size == ""
                continue
            content = archive.read(path)
            expected = base64.urlsafe_b64encode(hashlib.sha256(content).digest()).rstrip(b"=").decode()
            assert digest == "sha256=" + expected and int(size) == len(content), path
        for name in ("__init__.py", "launch_server.py"):
            with open(os.path.join(simlib.STANDIN_SRC, "sglang", name), "rb") as handle:
                assert archive.read("sglang/" + name) == handle.read()


def test_builder_refuses_a_version_that_is_not_canonical(tmp_path):
    done = subprocess.run([sys.executable, BUILDER, str(tmp_path), "--version", "0.5.9-beta"], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode != 0 and "canonical PEP 440" in done.stderr
    assert not os.listdir(str(tmp_path))


def test_simulator_distribution_does_not_ship_the_sglang_package():
    with open(os.path.join(simlib.REPO, "tools", "sglang_sim", "pyproject.toml"), encoding="utf-8") as handle:
        text = handle.read()
    assert re.search(r'^name = "sglang-sim"$', text, re.M)
    (packages,) = re.findall(r"^packages = \[(.*)\]$", text, re.M)
    assert sorted(p.strip().strip('"') for p in packages.split(",")) == ["sglang_sim", "sglang_sim.profiles"]
    assert not os.path.exists(os.path.join(simlib.SIM_SRC, "sglang"))


def run_code(sim, env=None) -> list:
    return subprocess.run([sys.executable, "-c", CODE], env=env or sim.env, capture_output=True, text=True,
                          timeout=30, check=True).stdout.split()


def test_version_is_the_installed_distributions(make_sim, tmp_path):
    site = install(build(tmp_path / "wheels", "0.5.10")[0], tmp_path / "site")
    host = simlib.profile_host("single-gpu")
    assert host["sglang_version"] == "0.5.5.post3"
    installed = simlib.Sim(str(tmp_path / "installed"), host, site=site)
    version, path = run_code(installed)
    assert version == "0.5.10" and path == os.path.join(site, "sglang", "__init__.py")
    # Installed, the version needs no host file.
    missing = dict(installed.env, SGLANG_SIM_HOST=str(tmp_path / "missing.json"))
    assert run_code(installed, missing)[0] == "0.5.10"
    # From the source tree (no distribution): host.json's.
    assert run_code(make_sim("single-gpu"))[0] == "0.5.5.post3"


def test_server_runs_the_installed_version(make_sim, tmp_path):
    """The field host says 0.5.5.post3 (classic KV arithmetic: 159,718 tokens at 0.88); with the 0.5.10 stand-in
    installed the server runs 0.5.10 (mixin: 159,282, as 0.5.9), reports it, and the oracle agrees."""
    site = install(build(tmp_path / "wheels", "0.5.10")[0], tmp_path / "site")
    host = simlib.profile_host("field", sglang_version="0.5.5.post3")
    seen = {}
    for label, sim in (("source tree", make_sim("field", sglang_version="0.5.5.post3")),
                       ("installed", simlib.Sim(str(tmp_path / "installed"), host, site=site))):
        server = sim.start(simlib.launch_args("field"))
        try:
            assert server.wait_ready(), server.log
            status, info = simlib.request(server.url + "/get_server_info")
            assert status == 200
            seen[label] = (info["version"], info["internal_states"][0]["memory_usage"]["token_capacity"])
        finally:
            server.stop()
        oracle = json.loads(sim.run("sglang_sim.oracle", simlib.launch_args("field") + ["--safety-gib", "1"]).stdout)
        assert (oracle["sglang_version"], oracle["given"]["kv_tokens"]) == seen[label]
    assert seen == {"source tree": ("0.5.5.post3", 159718), "installed": ("0.5.10", 159282)}


def test_oracle_sglang_version_option(make_sim):
    sim = make_sim("field")
    args = simlib.launch_args("field") + ["--safety-gib", "1"]
    default = json.loads(sim.run("sglang_sim.oracle", args).stdout)
    assert default["sglang_version"] == "0.5.9" and default["sglang_version_from"] == "host.json"
    given = json.loads(sim.run("sglang_sim.oracle", args + ["--sglang-version", "0.5.5.post3"]).stdout)
    assert given["sglang_version"] == "0.5.5.post3" and given["sglang_version_from"] == "given"
    assert (default["given"]["kv_tokens"], given["given"]["kv_tokens"]) == (159282, 159718)
    bad = sim.run("sglang_sim.oracle", args + ["--sglang-version", "latest"])
    assert bad.returncode == 2 and "--sglang-version must be a version" in bad.stderr


def test_sim_inventory_installs_each_profiles_version():
    """inventories/sim installs, per profile, the SGLang version its host.json names (and so its stand-in)."""
    yaml = pytest.importorskip("yaml")
    with open(os.path.join(simlib.REPO, "inventories", "sim", "group_vars", "sim.yml"), encoding="utf-8") as handle:
        group_vars = yaml.safe_load(handle)
    assert group_vars["sglang_pip_package"] == "sglang"
    assert group_vars["sglang_version"] == "{{ sim_profiles[sim_profile].sglang_version }}"
    profiles = sorted(os.listdir(simlib.PROFILES))
    profiles = [name for name in profiles if os.path.isfile(os.path.join(simlib.PROFILES, name, "host.json"))]
    assert sorted(group_vars["sim_profiles"]) == profiles
    for name in profiles:
        assert group_vars["sim_profiles"][name]["sglang_version"] == simlib.profile_host(name)["sglang_version"], name

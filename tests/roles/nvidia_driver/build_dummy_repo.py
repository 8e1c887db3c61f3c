# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Build, at test time, a signed local apt repository of DUMMY NVIDIA packages for the nvidia_driver role's tests.

    python3 tests/roles/nvidia_driver/build_dummy_repo.py --out DIR [--distro debian12] [--arch x86_64] [--prereqs]

DIR/repo (also packed as DIR/repo.tar.gz) is laid out like NVIDIA's CUDA network repository for Debian 12 (a flat repository: `deb URL /`), with
the same package names and version strings, so that apt really resolves, installs, pins and holds them:

- the driver branch 580 at two versions (580.105.08 and the newer 580.126.20) and branch 590 (590.48.01), under
  NVIDIA's unversioned Debian names (nvidia-kernel-open-dkms, nvidia-kernel-dkms, nvidia-driver-cuda, libcuda1,
  libnvidia-ml1, nvidia-smi, nvidia-persistenced) with exact-version dependencies as in NVIDIA's packages;
- nvidia-fabricmanager-580 and -590 (branch in the name, as in the CUDA repository), which do NOT depend on the
  driver: the role itself must install the fabric manager at exactly the driver's version;
- cuda-keyring 1.1-1, which, like the real one, installs /usr/share/keyrings/cuda-archive-keyring.gpg and
  /etc/apt/sources.list.d/cuda-<distro>-<arch>.list pointing at developer.download.nvidia.com. Its key is a
  throw-away key made here, and the repository's InRelease is signed with it, so apt verifies signatures for real;
- linux-headers-<the running kernel> (the host shares the controller's kernel), for the role's DKMS prerequisite.

Nothing here is a driver: package scripts only write text markers (e.g. the dkms package's postinst writes
/lib/modules/$(uname -r)/updates/dkms/nvidia.ko.dummy holding its version), and the daemons are shell scripts.
The nvidia-smi package's /usr/bin/nvidia-smi answers as the real one does while no nvidia kernel module is loaded
("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver", exit 9): installing a driver does
not load it, and the tests never reboot. (On a simulated host whose driver is "loaded", the simulator's nvidia-smi
in /usr/local/bin comes first on PATH; these packages are only installed where it has been removed.)

With --prereqs, DIR/prereqs receives python3-apt and distro-info-data downloaded with `apt-get download` from the
controller's own Debian archive: the test hosts have no python3-apt (which Ansible's apt module needs) and cannot
reach any archive.

Needs dpkg-deb and gpg (installed with apt-get when missing). Python standard library only. Prints DIR/repo.
"""
from __future__ import annotations

import argparse
import gzip
import hashlib
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from email.utils import formatdate
from pathlib import Path

# Versions as NVIDIA publishes them for debian12 (upstream version, Debian revision).
DRIVERS = (("580.105.08", "1"), ("580.126.20", "1"), ("590.48.01", "1"))
KEYRING_VERSION = "1.1-1"
KEYRING_PATH = "/usr/share/keyrings/cuda-archive-keyring.gpg"
NVIDIA_URL = "https://developer.download.nvidia.com/compute/cuda/repos/{distro}/{arch}/"
DEB_ARCH = {"x86_64": "amd64", "sbsa": "arm64"}
MARKER_DIR = "/usr/share/nvidia-dummy"
MAINTAINER = "llmserve.sglang tests <tests@invalid>"


class BuildError(Exception):
    """A failure meant for the person running the tests."""


def run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, check=False, text=True, capture_output=True, **kwargs)
    if proc.returncode != 0:
        raise BuildError(f"{' '.join(cmd)} failed (rc={proc.returncode}):\n{proc.stdout}{proc.stderr}")
    return proc


def ensure_tools() -> None:
    missing = [pkg for tool, pkg in (("dpkg-deb", "dpkg"), ("gpg", "gnupg")) if shutil.which(tool) is None]
    if missing:
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        run(["apt-get", "update", "-qq"], env=env)
        run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing], env=env)


# --- the packages ----------------------------------------------------------------------------------------

def script(body: str) -> str:
    return "#!/bin/sh\nset -e\n" + body.strip() + "\n"


def dkms_package(name: str, flavor: str, version: str, conflicts: str) -> dict:
    marker = "/lib/modules/$(uname -r)/updates/dkms/nvidia.ko.dummy"
    return {
        "control": {"Package": name, "Version": version, "Architecture": "{arch}", "Section": "non-free/kernel",
                    "Depends": "dkms", "Conflicts": conflicts, "Provides": "nvidia-kernel-dkms-any",
                    "Description": f"NVIDIA kernel module DKMS source, {flavor} flavor (TEST DUMMY: no module)"},
        "files": {f"/usr/src/nvidia-{version.split('-')[0]}/dkms.conf":
                  f'PACKAGE_NAME="nvidia"\nPACKAGE_VERSION="{version.split("-")[0]}"\n# {flavor} flavor, test dummy\n'},
        "postinst": script(f"""
if [ "$1" = configure ]; then
  mkdir -p "/lib/modules/$(uname -r)/updates/dkms"
  printf '%s %s\\n' '{version.split('-')[0]}' '{flavor}' > "{marker}"
fi"""),
        "postrm": script(f"""
if [ "$1" = remove ] || [ "$1" = purge ]; then rm -f "{marker}"; fi"""),
    }


def simple_package(name: str, version: str, description: str, depends: str = "", files: dict | None = None,
                   postinst: str = "") -> dict:
    control = {"Package": name, "Version": version, "Architecture": "{arch}", "Section": "non-free/libs",
               "Description": f"{description} (TEST DUMMY)"}
    if depends:
        control["Depends"] = depends
    pkg_files = {f"{MARKER_DIR}/{name}.version": version.split("-")[0] + "\n"}
    pkg_files.update(files or {})
    pkg = {"control": control, "files": pkg_files}
    if postinst:
        pkg["postinst"] = postinst
    return pkg


def packages_for(upstream: str, revision: str) -> list[dict]:
    version = f"{upstream}-{revision}"
    branch = upstream.split(".")[0]
    persistenced_unit = (
        "[Unit]\nDescription=NVIDIA Persistence Daemon\nWants=syslog.target\n\n"
        "[Service]\nType=forking\nExecStart=/usr/bin/nvidia-persistenced --user nvidia-persistenced "
        "--no-persistence-mode --verbose\nExecStopPost=/bin/rm -rf /var/run/nvidia-persistenced\n\n"
        "[Install]\nWantedBy=multi-user.target\n")
    fabricmanager_unit = (
        "[Unit]\nDescription=NVIDIA fabric manager service\n\n"
        "[Service]\nUser=root\nPrivateTmp=false\nType=forking\n"
        "ExecStart=/usr/bin/nv-fabricmanager -c /usr/share/nvidia/nvswitch/fabricmanager.cfg\nLimitCORE=infinity\n\n"
        "[Install]\nWantedBy=multi-user.target\n")
    no_driver = script('echo "test dummy: there is no NVIDIA driver on this host" >&2\nexit 1')
    # What the real nvidia-smi answers while no nvidia kernel module is loaded, which is the truth on the test
    # hosts after an install: the module would be loaded by the reboot that the tests never do.
    smi_no_module = script("""
echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running."
echo
exit 9""")
    exact = f"(= {version})"
    return [
        dkms_package("nvidia-kernel-open-dkms", "open", version, "nvidia-kernel-dkms"),
        dkms_package("nvidia-kernel-dkms", "proprietary", version, "nvidia-kernel-open-dkms"),
        simple_package("libcuda1", version, "NVIDIA CUDA Driver Library"),
        simple_package("libnvidia-ml1", version, "NVIDIA Management Library (NVML) runtime library"),
        simple_package("nvidia-smi", version, "NVIDIA System Management Interface", depends=f"libnvidia-ml1 {exact}",
                       files={"/usr/bin/nvidia-smi": smi_no_module}),
        simple_package(
            "nvidia-persistenced", version, "daemon to maintain persistent software state in the NVIDIA driver",
            files={"/usr/bin/nvidia-persistenced": no_driver,
                   "/lib/systemd/system/nvidia-persistenced.service": persistenced_unit},
            postinst=script("""
if [ "$1" = configure ] && ! getent passwd nvidia-persistenced >/dev/null; then
  useradd --system --home-dir /var/run/nvidia-persistenced --no-create-home --shell /usr/sbin/nologin nvidia-persistenced
fi""")),
        simple_package(
            "nvidia-driver-cuda", version, "NVIDIA driver CUDA integration components",
            depends=", ".join(f"{dep} {exact}" for dep in ("libcuda1", "libnvidia-ml1", "nvidia-smi",
                                                           "nvidia-persistenced")) + ", nvidia-kernel-dkms-any"),
        simple_package(
            f"nvidia-fabricmanager-{branch}", version, "Fabric Manager for NVSwitch based systems",
            files={"/usr/bin/nv-fabricmanager": no_driver,
                   "/usr/share/nvidia/nvswitch/fabricmanager.cfg": "LOG_LEVEL=4\n# test dummy\n",
                   "/lib/systemd/system/nvidia-fabricmanager.service": fabricmanager_unit}),
    ]


def keyring_package(distro: str, arch: str, key: bytes) -> dict:
    url = NVIDIA_URL.format(distro=distro, arch=arch)
    return {
        "control": {"Package": "cuda-keyring", "Version": KEYRING_VERSION, "Architecture": "all", "Section": "misc",
                    "Description": "GPG keyring for the CUDA repository (TEST DUMMY: throw-away test key)"},
        "files": {KEYRING_PATH: key,
                  f"/etc/apt/sources.list.d/cuda-{distro}-{arch}.list": f"deb [signed-by={KEYRING_PATH}] {url} /\n"},
        "conffiles": [f"/etc/apt/sources.list.d/cuda-{distro}-{arch}.list"],
    }


def headers_package(kernel: str) -> dict | None:
    name = f"linux-headers-{kernel}"
    if not re.fullmatch(r"[a-z0-9][a-z0-9.+-]+", name):
        return None
    return {"control": {"Package": name, "Version": "1.0-1", "Architecture": "{arch}", "Section": "kernel",
                        "Description": f"Header files for Linux {kernel} (TEST DUMMY: empty)"},
            "files": {f"{MARKER_DIR}/{name}.version": "1.0\n"}}


def free_package(name: str) -> dict:
    """A tiny stand-in for a dependency that lives in Debian's archive (here: dkms)."""
    return {"control": {"Package": name, "Version": "1.0-1", "Architecture": "all", "Section": "misc",
                        "Description": "stands in for dkms from the distribution's archive (TEST DUMMY)"},
            "files": {f"{MARKER_DIR}/{name}.version": "1.0\n"}}


def build_deb(pkg: dict, deb_arch: str, workdir: Path, outdir: Path) -> dict:
    control = {k: (v.replace("{arch}", deb_arch) if isinstance(v, str) else v) for k, v in pkg["control"].items()}
    tree = workdir / f"{control['Package']}_{control['Version']}"
    (tree / "DEBIAN").mkdir(parents=True)
    size = 0
    for path, content in pkg.get("files", {}).items():
        target = tree / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        data = content if isinstance(content, bytes) else content.encode()
        target.write_bytes(data)
        target.chmod(0o755 if path.startswith(("/usr/bin/", "/usr/sbin/")) else 0o644)
        size += len(data)
    control.setdefault("Priority", "optional")
    control["Maintainer"] = MAINTAINER
    control["Installed-Size"] = str(max(1, size // 1024))
    order = ("Package", "Version", "Architecture", "Maintainer", "Installed-Size", "Depends", "Conflicts",
             "Provides", "Section", "Priority", "Description")
    text = "".join(f"{key}: {control[key]}\n" for key in order if control.get(key))
    (tree / "DEBIAN/control").write_text(text, encoding="utf-8")
    for name in ("postinst", "postrm"):
        if pkg.get(name):
            (tree / "DEBIAN" / name).write_text(pkg[name], encoding="utf-8")
            (tree / "DEBIAN" / name).chmod(0o755)
    if pkg.get("conffiles"):
        (tree / "DEBIAN/conffiles").write_text("\n".join(pkg["conffiles"]) + "\n", encoding="utf-8")
    deb = outdir / f"{control['Package']}_{control['Version']}_{control['Architecture']}.deb"
    run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(tree), str(deb)])
    blob = deb.read_bytes()
    control.update(Filename=f"./{deb.name}", Size=str(len(blob)), MD5sum=hashlib.md5(blob).hexdigest(),  # noqa: S324
                   SHA256=hashlib.sha256(blob).hexdigest())
    return control


def packages_index(stanzas: list[dict]) -> str:
    order = ("Package", "Version", "Architecture", "Maintainer", "Installed-Size", "Depends", "Conflicts",
             "Provides", "Filename", "Size", "MD5sum", "SHA256", "Section", "Priority", "Description")
    return "\n".join("".join(f"{key}: {st[key]}\n" for key in order if st.get(key)) for st in stanzas)


def release_file(repo: Path, deb_arch: str) -> str:
    lines = ["Origin: NVIDIA (llmserve.sglang test dummy)", "Label: NVIDIA CUDA (test dummy)",
             f"Architectures: {deb_arch} all", f"Date: {formatdate(time.time(), usegmt=True)}", "SHA256:"]
    md5 = ["MD5Sum:"]
    for name in ("Packages", "Packages.gz"):
        blob = (repo / name).read_bytes()
        lines.append(f" {hashlib.sha256(blob).hexdigest()} {len(blob):>8} {name}")
        md5.append(f" {hashlib.md5(blob).hexdigest()} {len(blob):>8} {name}")  # noqa: S324
    return "\n".join(lines + md5) + "\n"


def gpg(home: Path, *args: str, **kwargs) -> subprocess.CompletedProcess:
    return run(["gpg", "--homedir", str(home), "--batch", "--quiet", "--pinentry-mode", "loopback",
                "--passphrase", "", *args], **kwargs)


def make_key(home: Path) -> bytes:
    home.mkdir(mode=0o700)
    gpg(home, "--quick-generate-key", "llmserve.sglang dummy CUDA repository <tests@invalid>", "ed25519", "sign",
        "never")
    out = subprocess.run(["gpg", "--homedir", str(home), "--batch", "--export"], check=True, capture_output=True)
    if not out.stdout:
        raise BuildError("gpg exported no key")
    return out.stdout


def download_prereqs(dest: Path) -> None:
    """python3-apt (with python-apt-common and distro-info-data) from the controller's Debian archive (same release as the hosts)."""
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o755)  # apt's _apt user writes the download here
        cmd = ["apt-get", "download", "-q", "python3-apt", "python-apt-common", "distro-info-data"]
        proc = subprocess.run(cmd, cwd=tmp, check=False, text=True, capture_output=True)
        if proc.returncode != 0:  # stale lists: refresh once
            run(["apt-get", "update", "-qq"])
            run(cmd, cwd=tmp)
        for deb in Path(tmp).glob("*.deb"):
            shutil.move(str(deb), dest / deb.name)


def build(out: Path, distro: str, arch: str, kernel: str, prereqs: bool) -> Path:
    ensure_tools()
    deb_arch = DEB_ARCH.get(arch, arch)
    repo = out / "repo"
    shutil.rmtree(repo, ignore_errors=True)
    repo.mkdir(parents=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        key = make_key(work / "gnupg")
        pkgs = [keyring_package(distro, arch, key), free_package("dkms")]
        headers = headers_package(kernel)
        if headers:
            pkgs.append(headers)
        for upstream, revision in DRIVERS:
            pkgs.extend(packages_for(upstream, revision))
        stanzas = [build_deb(pkg, deb_arch, work / "trees", repo) for pkg in pkgs]
        index = packages_index(sorted(stanzas, key=lambda s: (s["Package"], s["Version"])))
        (repo / "Packages").write_text(index, encoding="utf-8")
        with gzip.open(repo / "Packages.gz", "wt", encoding="utf-8") as handle:
            handle.write(index)
        (repo / "Release").write_text(release_file(repo, deb_arch), encoding="utf-8")
        gpg(work / "gnupg", "--clearsign", "--digest-algo", "SHA256", "-o", str(repo / "InRelease"),
            str(repo / "Release"))
        gpg(work / "gnupg", "--detach-sign", "--armor", "-o", str(repo / "Release.gpg"), str(repo / "Release"))
    with tarfile.open(out / "repo.tar.gz", "w:gz") as tar:  # one file to copy to each host
        tar.add(repo, arcname=".")
    if prereqs:
        download_prereqs(out / "prereqs")
    return repo


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, type=Path, help="output directory (DIR/repo, DIR/prereqs)")
    parser.add_argument("--distro", default="debian12", help="NVIDIA repository name of the host's release")
    parser.add_argument("--arch", default="x86_64" if platform.machine() == "x86_64" else "sbsa",
                        help="NVIDIA repository architecture (x86_64 or sbsa)")
    parser.add_argument("--kernel", default=platform.release(), help="kernel release of the test hosts")
    parser.add_argument("--prereqs", action="store_true", help="also download python3-apt into DIR/prereqs")
    args = parser.parse_args(argv)
    try:
        repo = build(args.out.resolve(), args.distro, args.arch, args.kernel, args.prereqs)
    except BuildError as exc:
        print(f"build_dummy_repo: {exc}", file=sys.stderr)
        return 1
    print(repo)
    return 0


if __name__ == "__main__":
    sys.exit(main())

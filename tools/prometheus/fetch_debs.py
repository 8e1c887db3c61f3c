# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Debian's Prometheus and node_exporter packages, pinned by version and SHA-256, into a directory (``make
monitoring``): prometheus unpacked there (promtool tests the alerting rules; prometheus scrapes a simulated host in
tests/simhosts), prometheus-node-exporter kept as a .deb for a simulated host's apt to install.

    python3 tools/prometheus/fetch_debs.py .tmp/prometheus

Static Go binaries: the same packages serve a Debian or an Ubuntu controller. $DEBIAN_POOL_MIRROR replaces
deb.debian.org. A file already there with the right digest is not fetched again.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

MIRROR = os.environ.get("DEBIAN_POOL_MIRROR", "http://deb.debian.org/debian")
PACKAGES = {
    "prometheus": ("pool/main/p/prometheus/prometheus_2.42.0+ds-5+deb12u1_amd64.deb",
                   "81d59a24fce84f7fbe97a45a4f2914b6a5881b5cd1db2a6a0e129e515e1a5f55"),
    "prometheus-node-exporter": ("pool/main/p/prometheus-node-exporter/prometheus-node-exporter_1.5.0-1+b6_amd64.deb",
                                 "8cb5b39627595ea2cf3cd27be593e0e9af87023d29e1c5b8487e2f9510097e09"),
}


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else ""


def fetch(into: Path, name: str) -> Path:
    """The package's .deb in ``into``, downloaded unless there with its digest; SystemExit on a wrong digest."""
    pool_path, sha256 = PACKAGES[name]
    deb = into / (name + ".deb")
    if digest(deb) != sha256:
        url = "%s/%s" % (MIRROR, pool_path)
        print("fetching %s" % url, flush=True)
        part = deb.with_suffix(".part")
        with urllib.request.urlopen(url, timeout=120) as response, part.open("wb") as out:
            out.write(response.read())
        if digest(part) != sha256:
            part.unlink()
            raise SystemExit("%s: SHA-256 %s, expected %s (pinned in %s)" % (url, digest(part), sha256, __file__))
        part.replace(deb)
    return deb


def main(argv: list[str]) -> int:
    into = Path(argv[1] if len(argv) > 1 else ".tmp/prometheus").resolve()
    into.mkdir(parents=True, exist_ok=True)
    prometheus = fetch(into, "prometheus")
    fetch(into, "prometheus-node-exporter")
    stamp = into / "root" / ".unpacked"
    if not stamp.exists() or stamp.read_text() != digest(prometheus):
        subprocess.run(["dpkg-deb", "-x", str(prometheus), str(into / "root")], check=True)
        stamp.write_text(digest(prometheus))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

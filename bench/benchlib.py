# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the benchmarks share: simulated hosts (tools/simhosts), timed Ansible runs against them, the simulator's
oracle on a host, and the results (Markdown, JSON and a PNG under bench/results/)."""
from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
RESULTS = REPO / "bench" / "results"
SIMHOSTS = [sys.executable, str(REPO / "tools" / "simhosts" / "simhosts.py")]
HOST_JSON = "/etc/sglang-sim/host.json"
ENV = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), PATH=f"{BIN}:{os.environ['PATH']}",
           ANSIBLE_FORCE_COLOR="0")


def log(message: str) -> None:
    """A progress line on stderr (the results go to files)."""
    print("[bench %s] %s" % (time.strftime("%H:%M:%S"), message), file=sys.stderr, flush=True)


def machine() -> str:
    return "%s, %d cores, Python %s" % (platform.machine(), os.cpu_count(), platform.python_version())


def run(argv, **kwargs):
    return subprocess.run(argv, capture_output=True, text=True, check=True, **kwargs)


def ssh(host: str, command: str, stdin: str | None = None) -> str:
    return run(SIMHOSTS + ["ssh", host, "--", command], input=stdin).stdout


def read_host_json(host: str) -> dict:
    return json.loads(ssh(host, f"cat {HOST_JSON}"))


def write_host_json(host: str, data: dict) -> None:
    """Whole or not at all: the simulator reads host.json at any time."""
    ssh(host, f"cat > {HOST_JSON}.new && mv -f {HOST_JSON}.new {HOST_JSON}", stdin=json.dumps(data, indent=2) + "\n")


def server_args(host: str, unit: str = "sglang.service") -> list:
    """The launch flags of the running server (after ``-m sglang.launch_server``), less --mem-fraction-static."""
    pid = ssh(host, f"systemctl show --property=MainPID --value {unit}").strip()
    argv = [word for word in ssh(host, f"cat /proc/{pid}/cmdline").split("\0") if word]
    args = argv[argv.index("-m") + 2:]
    if "--mem-fraction-static" in args:
        index = args.index("--mem-fraction-static")
        del args[index:index + 2]
    return args


def oracle(host: str, args: list, safety_gib: float, resolution: float) -> dict:
    """The simulator's ground truth on ``host`` for these launch flags (SGLang's default f as ``given``)."""
    out = ssh(host, " ".join(["/opt/sglang-sim/bin/sglang-sim-oracle", "--host", HOST_JSON, *args,
                              "--safety-gib", str(safety_gib), "--resolution", str(resolution)]))
    return json.loads(out)


class Timed:
    """A finished command: seconds, rc, stdout."""

    def __init__(self, seconds, rc, stdout):
        self.seconds, self.rc, self.stdout = seconds, rc, stdout


def timed(argv, check=True, env=None) -> Timed:
    started = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, env=dict(ENV, **(env or {})), check=False)
    done = Timed(time.monotonic() - started, proc.returncode, proc.stdout + proc.stderr)
    if check and proc.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed (rc {proc.returncode}):\n{done.stdout[-6000:]}")
    return done


def playbook(inventory: Path, path: str, *args: str, check=True) -> Timed:
    """ansible-playbook on ``inventory``; ``path`` relative to the repository."""
    return timed([str(BIN / "ansible-playbook"), "-i", str(inventory), str(REPO / path), *args], check=check)


def ping(inventory: Path, forks: int = 5) -> Timed:
    return timed([str(BIN / "ansible"), "all", "-i", str(inventory), "-f", str(forks), "-m", "ansible.builtin.ping"])


@contextlib.contextmanager
def sim_hosts(prefix: str, profiles: list):
    """``len(profiles)`` simulated hosts (host i runs profile i) and their inventory directory, removed after."""
    tmp = Path(tempfile.mkdtemp(prefix=f"bench-{prefix}-"))
    inventory = tmp / "inventory"   # a directory of its own: Ansible reads every file in it as inventory
    shutil.copytree(REPO / "inventories" / "sim" / "group_vars", inventory / "group_vars")
    (inventory / "host_vars").mkdir()
    wheelhouse = os.environ.get("SIM_WHEELHOUSE", str(REPO / ".tmp" / "wheelhouse"))
    log("starting %d simulated hosts (%s*)" % (len(profiles), prefix))
    try:
        run(SIMHOSTS + ["up", "--count", str(len(profiles)), "--prefix", prefix, "--profile", ",".join(profiles),
                        "--inventory", str(inventory / "hosts.yml"), "--wheelhouse", wheelhouse])
        yield tmp, inventory, [f"{prefix}{index}" for index in range(1, len(profiles) + 1)]
    finally:
        subprocess.run(SIMHOSTS + ["down", "--prefix", prefix], capture_output=True, check=False)
        shutil.rmtree(tmp, ignore_errors=True)


class RunDirs:
    """Numbered directories, one per Ansible run of a benchmark (its reports and results), under one temporary one."""

    def __init__(self, prefix: str):
        self.root, self.count = Path(tempfile.mkdtemp(prefix=prefix)), 0

    def new(self, name: str) -> Path:
        self.count += 1
        path = self.root / ("%02d-%s" % (self.count, name))
        path.mkdir()
        return path


def reset(inventory: Path, hosts: list, out: Path, forks: int) -> None:
    """bench/playbooks/reset.yml on ``hosts``: unpinned, on the start value of their host_vars, restarted; each
    host's readiness in ``out``/<host>.json."""
    playbook(inventory, "bench/playbooks/reset.yml", "-f", str(forks), "-l", ",".join(hosts),
             "--tags", "bench,sglang_service", "-e", "sglang_service_ready_check=none", "-e", f"bench_out={out}")


def write_host_vars(inventory: Path, host: str, variables: dict) -> None:
    (inventory / "host_vars" / f"{host}.yml").write_text(json.dumps(variables, indent=2) + "\n")


def save(name: str, markdown: str, data: dict, figure=None) -> list:
    """bench/results/<name>.md, .json and (with a matplotlib figure) .png; the paths written."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    paths = [RESULTS / f"{name}.md", RESULTS / f"{name}.json"]
    paths[0].write_text(markdown)
    paths[1].write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    if figure is not None:
        paths.append(RESULTS / f"{name}.png")
        figure.savefig(paths[-1], dpi=110, bbox_inches="tight")
    for path in paths:
        log("wrote %s" % path.relative_to(REPO))
    return paths


def table(header: list, rows: list, align: str = "") -> str:
    """A Markdown table; ``align``: one of l/r per column (default: left)."""
    align = align or "l" * len(header)
    lines = ["| " + " | ".join(header) + " |",
             "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"

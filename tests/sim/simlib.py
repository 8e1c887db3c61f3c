# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Run the simulator (tools/sglang_sim) as a local subprocess for the tests: a server, nvidia-smi, the oracle.

The simulator is not installed into the test venv: it runs from its source tree with PYTHONPATH (sglang_sim and the
stand-in sglang package: no sglang distribution, so the SGLang version is host.json's), on 127.0.0.1, on a free
port, with a host.json and a GPU state directory of the test's own (fast time scale), so tests never touch /etc or /run
and can run in parallel. Every wait is bounded.
"""
from __future__ import annotations

import glob
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SIM_SRC = os.path.join(REPO, "tools", "sglang_sim", "src")
# The stand-in sglang package (python -m sglang.launch_server), a distribution of its own when installed.
STANDIN_SRC = os.path.join(REPO, "tools", "sglang_sim", "standin")
PROFILES = os.path.join(SIM_SRC, "sglang_sim", "profiles")
GIB = 2 ** 30
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def profile_host(name: str, **overrides) -> dict:
    """A shipped profile's host.json (fast time scale) with top-level keys replaced."""
    with open(os.path.join(PROFILES, name, "host.json"), encoding="utf-8") as handle:
        data = json.load(handle)
    data["time_scale"] = "fast"
    data.update(overrides)
    return data


def launch_args(name: str, **replace) -> list:
    """A profile's default launch flags with its model directories, and --flag values replaced."""
    dirs = {part: os.path.join(PROFILES, name, part) for part in ("model", "draft")}
    args = [arg.format(**dirs) for arg in profile_host(name)["default_launch_args"]]
    for flag, value in replace.items():
        flag = "--" + flag.replace("_", "-")
        if flag in args:
            position = args.index(flag)
            if value is None:
                del args[position:position + 2]
            else:
                args[position + 1] = str(value)
        elif value is not None:
            args += [flag, str(value)]
    return args


def free_port() -> int:
    """A TCP port nobody listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Sim:
    """A host.json, a GPU state directory and the environment to run the simulator's commands against them.

    ``site``: a directory where the stand-in sglang wheel is installed (unpacked), put before the source tree so
    that its ``sglang`` package and distribution are the ones found, as on a host where pip installed it."""

    def __init__(self, directory: str, host: dict, site: str | None = None):
        os.makedirs(directory, exist_ok=True)
        self.directory = directory
        self.servers = []
        self.host_path = os.path.join(directory, "host.json")
        self.state_dir = os.path.join(directory, "state")
        with open(self.host_path, "w", encoding="utf-8") as handle:
            json.dump(host, handle)
        path = [site, SIM_SRC] if site else [SIM_SRC, STANDIN_SRC]
        self.env = dict(os.environ, PYTHONPATH=os.pathsep.join(path), SGLANG_SIM_HOST=self.host_path,
                        SGLANG_SIM_STATE=self.state_dir, PYTHONUNBUFFERED="1")

    def state_files(self) -> list:
        """The live GPU state files the servers wrote (one per process)."""
        return sorted(glob.glob(os.path.join(self.state_dir, "gpus-*.json")))

    def run(self, module: str, args: list, timeout: float = 60) -> subprocess.CompletedProcess:
        """``python -m <module> <args>``, waited for."""
        return subprocess.run([sys.executable, "-m", module] + list(args), env=self.env, capture_output=True,
                              text=True, timeout=timeout, check=False)

    def smi_runner(self):
        """A gpu_probe run_command that runs sglang-sim-smi for ``nvidia-smi``."""
        def run_command(argv):
            done = self.run("sglang_sim.smi", argv[1:], timeout=30)
            return done.returncode, done.stdout, done.stderr
        return run_command

    def start(self, args: list) -> "Server":
        """Start ``python -m sglang.launch_server <args> --host 127.0.0.1 --port <free>``."""
        server = Server(self, args)
        self.servers.append(server)
        return server


class Server:
    """A running simulated server; its combined output goes to a log file."""

    def __init__(self, sim: Sim, args: list):
        self.sim = sim
        self.port = free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        self.log_path = os.path.join(sim.directory, "server-%d.log" % self.port)
        self.args = list(args) + ["--host", "127.0.0.1", "--port", str(self.port)]
        with open(self.log_path, "w", encoding="utf-8") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "sglang.launch_server"] + self.args, env=sim.env,
                                         stdout=log, stderr=subprocess.STDOUT)

    @property
    def log(self) -> str:
        """Everything the server printed so far."""
        with open(self.log_path, encoding="utf-8") as handle:
            return handle.read()

    def wait_ready(self, timeout: float = 30) -> bool:
        """Poll /health until 200 (True) or until the process exits or the time is up (False)."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                return False
            status, _body = request(self.url + "/health", timeout=5)
            if status == 200:
                return True
            time.sleep(0.1)
        return False

    def wait_exit(self, timeout: float = 30):
        """The exit code, or None if still running after ``timeout``."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self):
        """SIGTERM, then SIGKILL if it lingers."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            if self.wait_exit(10) is None:
                self.proc.kill()
                self.proc.wait(10)


def request(url: str, body=None, headers=None, timeout: float = 60) -> tuple:
    """(status, parsed JSON or text) of a GET (body None) or POST; status 0 when the connection fails or the server
    dies before its answer is whole (IncompleteRead)."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers=dict({"Content-Type": "application/json"}, **(headers or {})))
    try:
        with _OPENER.open(req, timeout=timeout) as response:
            status, raw = response.status, response.read()
    except urllib.error.HTTPError as exc:
        status, raw = exc.code, exc.read()
    except (OSError, ValueError, http.client.HTTPException):
        return 0, None
    try:
        return status, json.loads(raw.decode() or "null")
    except ValueError:
        return status, raw.decode(errors="replace")


def flood(url: str, count: int, input_len: int, max_new_tokens: int, timeout: float = 60) -> list:
    """``count`` concurrent /generate requests of ``input_len`` tokens each; their HTTP statuses (0: no answer)."""
    statuses = [None] * count

    def one(index):
        body = {"input_ids": [7] * input_len, "sampling_params": {"max_new_tokens": max_new_tokens}}
        statuses[index] = request(url + "/generate", body, timeout=timeout)[0]

    threads = [threading.Thread(target=one, args=(index,), daemon=True) for index in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout + 5)
    return statuses


def oracle(sim: Sim, args: list, safety_gib: float) -> dict:
    """sglang-sim-oracle's JSON for this host and launch flags."""
    done = sim.run("sglang_sim.oracle", ["--host", sim.host_path, "--safety-gib", str(safety_gib)] + args)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)

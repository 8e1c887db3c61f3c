# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the simulated-host tests share: hosts up and deployed, playbooks through ansible-runner, and what they read
back from a host over the tool's ssh (the server's argv, its InvocationID, the pin, the oracle's value).

Imported by the test files of this directory (pytest puts it on sys.path); no test file imports another. Each file
keeps its own host prefix, so files never touch each other's hosts (`make simhosts` runs two files at a time).
"""
from __future__ import annotations

import atexit
import contextlib
import fcntl
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import ansible_runner
import pexpect
import yaml

REPO = Path(__file__).resolve().parents[2]
TOOL = REPO / "tools" / "simhosts" / "simhosts.py"
STATE_DIR = Path(os.environ.get("SIM_STATE_DIR", "/var/lib/llmserve-sim"))
SITE = REPO / "playbooks" / "site.yml"
TUNE_KV = REPO / "playbooks" / "tune_kv.yml"
# Each <host>.png costs the controller about 1.3 s of CPU (matplotlib on Python 3.13), a minute of the suite in all:
# tune() and controller() draw none unless a test asks. test_tune_kv_on_simhost.py checks the plots of the tune it runs
# through llmserve-fleet, which draws them as the role's default says.
PLOT_OFF = {"kv_tune_plot": False}

# The tuner's defaults (roles/kv_tune) that the tests judge its pins by.
RESOLUTION = 0.005
SAFETY_GIB = 1.0
PIN_DROPIN = "/etc/systemd/system/sglang.service.d/50-kv-tune.conf"
TRIAL_DROPIN = "/run/systemd/system/sglang.service.d/90-kv-trial.conf"
HOST_JSON = "/etc/sglang-sim/host.json"
FACT_FILE = "/etc/ansible/facts.d/sglang_kv.fact"

# ansible-runner starts ansible from PATH: use the one beside this interpreter (the venv's).
os.environ["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])


# --- can this machine run them at all ------------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def cannot_run_nspawn() -> str | None:
    """Why containers cannot run here at all, or None. A missing systemd-nspawn is not a reason: the tool installs it."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, veths and systemd-nspawn)"
    if shutil.which("unshare") is None:
        return "util-linux unshare is missing, cannot probe for namespaces"
    probe = subprocess.run(["unshare", "--mount", "--net", "--pid", "--uts", "--ipc", "--fork", "true"],
                           capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        return f"this machine cannot create the namespaces systemd-nspawn needs: {probe.stderr.strip()}"
    return None


def in_ci() -> bool:
    """CI=true (GitHub Actions, GitLab CI and most others set it): a test that cannot run fails instead of skipping."""
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


# --- hosts up, and deployed by site.yml ------------------------------------------------------------------------------

def simulator_wheelhouse(tmp: Path) -> str:
    """$SIM_WHEELHOUSE (`make simhosts` sets it), else the simulator's real wheels (sglang-sim and the stand-in
    sglang wheels) built into tmp, as make would."""
    wheelhouse = os.environ.get("SIM_WHEELHOUSE")
    if wheelhouse:
        return wheelhouse
    # One build at a time: pytest-xdist's workers would otherwise share the source tree's build directory.
    (REPO / ".tmp").mkdir(exist_ok=True)
    with open(REPO / ".tmp" / "simulator-wheel.lock", "w", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(REPO / "tools" / "sglang_sim"),
                        "-w", str(tmp / "wheelhouse")], check=True, capture_output=True, timeout=600)
    subprocess.run([sys.executable, str(REPO / "tools" / "sglang_sim" / "build_standins.py"), str(tmp / "wheelhouse")],
                   check=True, capture_output=True, timeout=600)
    return str(tmp / "wheelhouse")


def simhosts(*args: str, timeout: float = 900, check: bool = True) -> subprocess.CompletedProcess:
    """Run tools/simhosts; with check, a failure fails the test with the tool's output."""
    proc = subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True, timeout=timeout, check=False)
    if check:
        assert proc.returncode == 0, f"simhosts {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc


@contextlib.contextmanager
def sim_inventory(tmp: Path, prefix: str, profiles: list[str]):
    """An inventory directory (``tmp``/inventory) with inventories/sim's group_vars (what `make demo` uses) and one
    simulated host of ``prefix`` per profile, up while the block runs and removed after it. Nothing else goes into
    that directory: Ansible reads every file in it as inventory."""
    wheelhouse = simulator_wheelhouse(tmp)
    inventory = tmp / "inventory"
    shutil.copytree(REPO / "inventories" / "sim" / "group_vars", inventory / "group_vars")
    simhosts("up", "--count", str(len(profiles)), "--prefix", prefix, "--profile", ",".join(profiles),
             "--inventory", str(inventory / "hosts.yml"), "--wheelhouse", wheelhouse)
    try:
        yield inventory
    finally:
        simhosts("down", "--prefix", prefix, check=False)


@contextlib.contextmanager
def deployed(tmp: Path, prefix: str, profiles: list[str], prepare=None, extravars: dict | None = None):
    """sim_inventory's hosts, deployed by playbooks/site.yml (which must succeed) before the block runs.
    ``prepare(inventory)`` runs between `up` and site.yml (host_vars, faults the deployment must see)."""
    with sim_inventory(tmp, prefix, profiles) as inventory:
        if prepare is not None:
            prepare(inventory)
        site = play(inventory, playbook=SITE, extravars=extravars)
        assert site.status == "successful", site.stdout[-6000:]
        yield inventory


def write_host_vars(inventory: Path, host_vars: dict[str, dict]) -> None:
    """inventory/host_vars/<host>.yml for each host."""
    (inventory / "host_vars").mkdir(exist_ok=True)
    for host, variables in host_vars.items():
        (inventory / "host_vars" / f"{host}.yml").write_text(yaml.safe_dump(variables))


# --- Ansible on the hosts --------------------------------------------------------------------------------------------

def _envvars() -> dict:
    return {"ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_COLLECTIONS_PATH": str(Path(sys.prefix) / "collections")}


class Played:
    """What one ansible-runner run reported, read before its private data directory is removed."""

    def __init__(self, runner: ansible_runner.Runner):
        self.status, self.ident = runner.status, runner.config.ident
        self.stats = runner.stats or {}
        self.stdout = runner.stdout.read()
        self.results, self.artifact_data = {}, {}
        for event in runner.events:
            if event.get("event") in ("runner_on_ok", "runner_on_failed"):
                data = event["event_data"]
                self.results[data["task"]] = dict(data["res"], failed=event["event"] == "runner_on_failed")
            elif event.get("event") == "playbook_on_stats":
                # What the run's set_stats handed on (ansible-runner's artifact_data).
                self.artifact_data = event["event_data"].get("artifact_data") or {}
        # The files the playbook wrote into the job's artifacts directory (not ansible-runner's own).
        artifacts = Path(runner.config.artifact_dir)
        own = {"job_events", "fact_cache", "command", "status", "rc", "stdout", "stderr", "env.list", "callback"}
        self.artifact_files = {str(path.relative_to(artifacts)): path.read_bytes() for path in artifacts.rglob("*")
                               if path.is_file() and path.relative_to(artifacts).parts[0] not in own}


def play(inventory: Path, tasks: list | None = None, playbook: Path | None = None,
         extravars: dict | None = None, cmdline: str | None = None) -> Played:
    """Run tasks (or a playbook) on the hosts through ansible-runner; ``cmdline``: more ansible-playbook options."""
    private = Path(tempfile.mkdtemp(prefix="simhosts-runner-"))
    try:
        return Played(ansible_runner.run(
            private_data_dir=str(private), inventory=str(inventory), quiet=True, timeout=600,
            playbook=str(playbook) if playbook else [{"hosts": "all", "gather_facts": False, "tasks": tasks}],
            project_dir=str(REPO), extravars=extravars or {}, cmdline=cmdline, envvars=_envvars()))
    finally:
        shutil.rmtree(private, ignore_errors=True)


def ansible(inventory: Path, module: str, module_args: str | None = None) -> dict[str, dict]:
    """Run one ad-hoc module on every host through ansible-runner; return each host's result."""
    private = Path(tempfile.mkdtemp(prefix="simhosts-runner-"))
    try:
        runner = ansible_runner.run(
            private_data_dir=str(private), inventory=str(inventory), host_pattern="all", module=module,
            module_args=module_args or "", quiet=True, timeout=300,
            envvars={"ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"})
        results = {}
        for event in runner.events:
            if event.get("event") in ("runner_on_ok", "runner_on_failed", "runner_on_unreachable"):
                data = event["event_data"]
                results[data["host"]] = dict(data["res"], event=event["event"])
        return results
    finally:
        shutil.rmtree(private, ignore_errors=True)


class Watched:
    """What llmserve-fleet showed: its exit status, every screen it drew on a terminal (or its lines), the rest."""

    def __init__(self, status: int | None, output: str, tty: bool):
        self.status, self.output = status, output
        self.screens = [screen.strip("\r\n") for screen in output.split(CLEAR_SCREEN)[1:]] if tty else []
        self.last = self.screens[-1] if self.screens else output


CLEAR_SCREEN = "\x1b[H\x1b[2J"


def watch(inventory: Path, reports: Path, command: str = "tune", tty: bool = True, interrupt_at: str | None = None,
          **extravars) -> Watched:
    """llmserve-fleet <command> on the hosts, in a pseudo-terminal as an operator runs it (``tty``; else its output
    is a pipe), reports into ``reports``; ``interrupt_at``: Ctrl-C once that text has been shown."""
    env = dict(os.environ, **_envvars(), TERM="xterm")
    argv = [command, "-i", str(inventory), "--report-dir", str(reports)]
    argv += ["-e", json.dumps(extravars)] if extravars else []
    if not tty:
        argv.append("--plain")
    child = pexpect.spawn(str(Path(sys.executable).parent / "llmserve-fleet"), argv, env=env, cwd=str(reports),
                          encoding="utf-8", timeout=900, dimensions=(50, 200))
    shown = ""
    if interrupt_at:
        child.expect_exact(interrupt_at, timeout=600)
        shown = child.before + child.after
        child.sendintr()
    child.expect(pexpect.EOF, timeout=900)
    child.close()
    return Watched(child.exitstatus, shown + (child.before or ""), tty)


class Streamed:
    """What ``process`` unpacked of a job run as AWX's execution nodes run it (:func:`streamed`)."""

    def __init__(self, rc: int, unpacked: Path, output: str):
        self.rc, self.output = rc, output
        # The job's artifacts: what the worker ran in artifacts/<ident>, unpacked by process into artifacts/.
        self.artifacts = unpacked / "artifacts"
        self.events = [json.loads(path.read_text()) for path in sorted(
            (self.artifacts / "job_events").glob("*.json"), key=lambda path: int(path.name.split("-", 1)[0]))]
        stats = [event for event in self.events if event.get("event") == "playbook_on_stats"]
        self.artifact_data = (stats[-1]["event_data"].get("artifact_data") or {}) if stats else {}


def streamed(inventory: Path, job: Path, playbook: str, extravars: dict | None = None) -> Streamed:
    """``playbook`` of the installed collection (``llmserve.sglang.tune_kv``) run through ansible-runner's streaming
    mode, as AWX's execution nodes (receptor) run a job: ``transmit`` packs the job's private data directory (a
    project whose playbook imports the collection's, the inventory, extra variables), ``worker`` runs it in a
    directory of its own and streams the events and, at the end, the artifacts back, and ``process`` unpacks them
    into ``job``/unpacked. Three processes, one pipe between each, as receptor's work units."""
    source, work, unpacked = job / "source", job / "worker", job / "unpacked"
    (source / "project").mkdir(parents=True)
    (source / "env").mkdir()
    shutil.copytree(inventory, source / "inventory")
    (source / "project" / "job.yml").write_text(
        "---\n- name: The collection's playbook, as an AWX project runs it\n"
        "  ansible.builtin.import_playbook: %s\n" % playbook)
    (source / "env" / "extravars").write_text(json.dumps(extravars or {}))
    (source / "env" / "envvars").write_text(json.dumps({key: value for key, value in _envvars().items()
                                                        if key != "ANSIBLE_CONFIG"}))
    runner = os.path.join(os.path.dirname(sys.executable), "ansible-runner")
    with open(job / "worker.log", "w", encoding="utf-8") as log:
        transmit = subprocess.Popen([runner, "transmit", str(source), "-p", "job.yml"], stdout=subprocess.PIPE)
        worker = subprocess.Popen([runner, "worker", "--private-data-dir", str(work)], stdin=transmit.stdout,
                                  stdout=subprocess.PIPE, stderr=log)
        transmit.stdout.close()
        process = subprocess.run([runner, "process", str(unpacked)], stdin=worker.stdout, capture_output=True,
                                 text=True, timeout=900, check=False)
        worker.stdout.close()
        worker.wait(60)
        transmit.wait(60)
    return Streamed(process.returncode, unpacked, process.stdout + process.stderr)


def tune(inventory: Path, reports: Path, limit: str | None = None, serial: str | None = None,
         cmdline: str | None = None, **extravars) -> Played:
    """playbooks/tune_kv.yml, its reports into ``reports``; ``limit``: kv_tune_hosts, ``serial``: kv_tune_serial
    (None: the playbook's default batches, a canary first). No <host>.png (PLOT_OFF) unless a test asks."""
    extravars = {"kv_tune_report_dir": str(reports), **PLOT_OFF, **extravars}
    if serial:
        extravars = {"kv_tune_serial": serial, **extravars}
    if limit:
        extravars["kv_tune_hosts"] = limit
    return play(inventory, playbook=TUNE_KV, extravars=extravars, cmdline=cmdline)


def controller(inventory: Path, reports: Path, log: bool = True, playbook: Path = TUNE_KV,
               **extravars) -> subprocess.Popen:
    """ansible-playbook ``playbook`` (tune_kv.yml) in the background, in ``reports`` and a session of its own
    (os.killpg kills it and its children); its output to reports/controller.log (``log``), else nowhere."""
    env = dict(os.environ, **{key: value for key, value in _envvars().items() if key != "ANSIBLE_NOCOLOR"})
    extravars = {"kv_tune_report_dir": str(reports), **PLOT_OFF, **extravars}
    # pylint: disable-next=consider-using-with
    out = open(reports / "controller.log", "w", encoding="utf-8") if log else subprocess.DEVNULL
    return subprocess.Popen([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory),
                             str(playbook), "-e", json.dumps(extravars)], env=env, cwd=str(reports), stdout=out,
                            stderr=subprocess.STDOUT if log else subprocess.DEVNULL, start_new_session=True)


def wait_for(condition, timeout: float, step: float = 0.5) -> bool:
    """Poll ``condition`` until it holds or ``timeout`` seconds passed; its last value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(step)
    return condition()


# --- what a host says, over the tool's ssh ---------------------------------------------------------------------------

_MUX_DIR: list[str] = []


def _host_entry(host: str) -> dict:
    """The host's entry in the tool's state file (its address, its boot's pid)."""
    entry = json.loads((STATE_DIR / "state.json").read_text(encoding="utf-8"))["hosts"].get(host)
    assert entry and entry.get("address"), f"no simulated host {host!r} in {STATE_DIR / 'state.json'}"
    return entry


def _ssh_argv(host: str) -> list[str]:
    """ssh to a simulated host as `simhosts.py ssh HOST` does (its key and options, its address from the state file),
    through one master connection per host and boot (OpenSSH ControlMaster): a test's many probes of a host cost
    one ssh handshake instead of one Python start and handshake each (and the polling loops no CPU to speak of)."""
    entry = _host_entry(host)
    if not _MUX_DIR:
        _MUX_DIR.append(tempfile.mkdtemp(prefix="simhosts-ssh-"))
    control = Path(_MUX_DIR[0]) / f"{host}-{entry.get('pid')}"      # a host made again gets a master of its own
    return ["ssh", "-i", str(STATE_DIR / "ssh" / "id_ed25519"), "-o", "StrictHostKeyChecking=no",
            "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", "-o", "BatchMode=yes",
            "-o", "ConnectTimeout=3", "-o", "ControlMaster=auto", "-o", f"ControlPath={control}",
            "-o", "ControlPersist=120", f"root@{entry['address']}"]


@atexit.register
def _close_ssh_masters() -> None:
    for directory in _MUX_DIR:
        for control in Path(directory).iterdir():
            subprocess.run(["ssh", "-o", f"ControlPath={control}", "-O", "exit", "simhost"], capture_output=True,
                           timeout=10, check=False)
        shutil.rmtree(directory, ignore_errors=True)


def ssh(host: str, command: str, stdin: str | None = None, check: bool = True) -> str:
    """stdout of a shell command line on a host (``command`` is one shell line)."""
    proc = subprocess.run([*_ssh_argv(host), command], input=stdin, capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 0 or not check, f"{host}: {command}: {proc.stdout}{proc.stderr}"
    return proc.stdout


def address(host: str) -> str:
    """The host's address (the tool's state file)."""
    return _host_entry(host)["address"]


def generates(host: str, port: int = 30000, timeout: float = 60, unit: str = "sglang.service") -> bool:
    """Whether the host's server runs and answers a real generation (POST /generate, one new token) within
    ``timeout`` seconds: straight from the test process, where a play of sglang_ready costs a few seconds of the
    controller's CPU (the tests' checks; the role and the tuner prove readiness with sglang_ready themselves)."""
    body = json.dumps({"text": "ready?", "sampling_params": {"max_new_tokens": 1}}).encode()

    def answers() -> bool:
        if ssh(host, f"systemctl is-active {unit}", check=False).strip() != "active":
            return False
        request = urllib.request.Request(f"http://{address(host)}:{port}/generate", data=body,
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                return answer.status == 200
        except OSError:
            return False
    return wait_for(answers, timeout, step=1)


def ansible_journal(host: str) -> str:
    """What Ansible's modules logged to the host's journal (their invocations, no_log arguments masked)."""
    return ssh(host, "journalctl --no-pager -o json | python3 -c \"import json, sys; [print(e.get('MESSAGE')) "
                     "for e in map(json.loads, sys.stdin) if str(e.get('SYSLOG_IDENTIFIER', '')).startswith('ansible')]\"")


def invocation(host: str, unit: str = "sglang.service") -> str:
    return ssh(host, f"systemctl show --property=InvocationID --value {unit}").strip()


def server_argv(host: str, unit: str = "sglang.service") -> list[str]:
    pid = ssh(host, f"systemctl show --property=MainPID --value {unit}").strip()
    return [word for word in ssh(host, f"cat /proc/{pid}/cmdline").split("\0") if word]


def running_fraction(host: str, unit: str = "sglang.service") -> float | None:
    argv = server_argv(host, unit)
    return float(argv[argv.index("--mem-fraction-static") + 1]) if "--mem-fraction-static" in argv else None


def facts(host: str) -> dict:
    """The host's local fact file: each tuned unit's pin."""
    return json.loads(ssh(host, f"cat {FACT_FILE}"))


def fact(host: str, unit: str = "sglang.service") -> dict:
    return facts(host)[unit]


def trial_left(host: str) -> bool:
    return ssh(host, f"test -e {TRIAL_DROPIN} && echo yes || echo no").strip() == "yes"


def oracle_max(host: str) -> float:
    """The simulator's ground truth for the server's own launch arguments, at the tuner's margin and grid."""
    return oracle_max_at(host, RESOLUTION)


def oracle_max_at(host: str, resolution: float, unit: str = "sglang.service") -> float:
    """The simulator's ground truth for the unit's own launch arguments, at the tuner's margin on a grid."""
    argv = server_argv(host, unit)
    args = argv[argv.index("-m") + 2:]
    if "--mem-fraction-static" in args:
        index = args.index("--mem-fraction-static")
        del args[index:index + 2]
    out = ssh(host, " ".join(["/opt/sglang-sim/bin/sglang-sim-oracle", "--host", HOST_JSON, *args,
                              "--safety-gib", str(SAFETY_GIB), "--resolution", str(resolution)]))
    return json.loads(out)["max_mem_fraction_static"]


def set_faults(host: str, **faults) -> None:
    """Rewrite the simulated host's faults (and other host.json keys given as _key=value)."""
    data = json.loads(ssh(host, f"cat {HOST_JSON}"))
    data["faults"] = {key: value for key, value in faults.items() if not key.startswith("_")}
    data.update({key[1:]: value for key, value in faults.items() if key.startswith("_")})
    # Whole or not at all: the simulator's nvidia-smi and servers read host.json at any time, and a file rewritten in
    # place can be read half-written (SimConfigError: not valid JSON), failing a reading that is no fault of the test.
    ssh(host, f"cat > {HOST_JSON}.new && mv -f {HOST_JSON}.new {HOST_JSON}", stdin=json.dumps(data, indent=2) + "\n")


def report(reports: Path, host: str) -> dict:
    """The tuner's JSON report of one host (``host`` may be host_unit for a unit other than sglang.service)."""
    return json.loads((reports / f"{host}.json").read_text())

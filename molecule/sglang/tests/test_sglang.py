# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What llmserve.sglang.sglang and llmserve.sglang.sglang_service left on the nspawn host of molecule/sglang.

The tests run in file order; the last one re-runs converge (it restarts the server)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest

UNIT = "sglang.service"
UNIT_FILE = f"/etc/systemd/system/{UNIT}"
ENV_FILE = "/etc/sglang/sglang.env"
SCENARIO = Path(__file__).resolve().parents[1]
GIB = 1 << 30
# `systemd-analyze security sglang.service` on the molecule host (Debian 12, systemd 252): 7.3 before the hardening
# of the unit, 3.1 after (tests/simhosts/test_site_on_simhost.py holds the same bound for site.yml's unit).
EXPOSURE_MAX = 3.1


@pytest.fixture(name="hostvars", scope="module")
def fixture_hostvars(host):
    return host.ansible.get_variables()


@pytest.fixture(name="secrets", scope="module")
def fixture_secrets(hostvars):
    return {"hf_token": hostvars["molsg_hf_token"], "api_key": hostvars["molsg_api_key"]}


def unit_props(host, *names: str) -> dict[str, str]:
    out = host.check_output(f"systemctl show {UNIT} " + " ".join(f"--property={n}" for n in names))
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def playbook(path: Path, *extra: str) -> str:
    """ansible-playbook with molecule's inventory and configuration (the verifier's environment); its output."""
    inventory = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "inventory"
    run = subprocess.run(["ansible-playbook", "-i", str(inventory), str(path), *extra],
                         env={**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0"},
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600, check=False)
    return f"{run.stdout}\nrc={run.returncode}"


def recap(output: str) -> dict[str, int]:
    """ok/changed/failed/... of the host in the PLAY RECAP."""
    return {key: int(value) for key, value in re.findall(r"(\w+)=(\d+)", output.split("PLAY RECAP")[-1])}


def generate(hostvars, api_key: str | None) -> tuple[int, dict]:
    """POST /generate from the controller to the server's port, with or without the API key."""
    request = urllib.request.Request(
        f"http://{hostvars['ansible_host']}:30000/generate", method="POST",
        data=json.dumps({"text": "Hello", "sampling_params": {"max_new_tokens": 4, "temperature": 0}}).encode(),
        headers={"Content-Type": "application/json",
                 **({"Authorization": f"Bearer {api_key}"} if api_key else {})})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, {}


# --- sglang role ---------------------------------------------------------------------------------------------

def test_the_host_runs_the_debian_release_of_the_run(host):
    # make molecule runs this scenario on Debian 12 and again on Debian 13 (SIM_SUITE=trixie: the simulated host's
    # root filesystem); a host of another release would make the second run prove nothing new.
    assert host.system_info.distribution == "debian"
    assert host.system_info.codename == os.environ.get("SIM_SUITE", "bookworm")


def test_service_user_is_a_system_account_without_login(host):
    user = host.user("sglang")
    assert user.exists and user.uid < 1000
    assert user.group == "sglang"
    assert user.shell == "/usr/sbin/nologin"
    assert user.home == "/var/lib/sglang"
    home = host.file("/var/lib/sglang")
    assert home.is_directory and home.user == "sglang" and home.mode == 0o750


def test_virtualenv_is_root_owned_with_the_pinned_package(host):
    venv = host.file("/opt/sglang/venv")
    assert venv.is_directory and venv.user == "root" and venv.mode == 0o755
    freeze = host.check_output("/opt/sglang/venv/bin/pip freeze --disable-pip-version-check").splitlines()
    # sglang at the pinned version (the simulator's stand-in) and what it requires, from the same wheelhouse.
    assert "sglang==0.5.5.post3" in freeze and "sglang-sim==0.1.0" in freeze
    metadata = host.check_output("cat /opt/sglang/venv/lib/python3.*/site-packages/sglang-0.5.5.post3.dist-info/"
                                 "METADATA").splitlines()
    assert "Name: sglang" in metadata and "Version: 0.5.5.post3" in metadata and "Requires-Dist: sglang-sim" in metadata
    # What the server reports as its version: the installed distribution's.
    version = host.check_output("/opt/sglang/venv/bin/python -c 'import sglang; print(sglang.__version__)'")
    assert version == "0.5.5.post3"


def test_dev_shm_large_enough_and_persisted(host):
    size = int(host.check_output("findmnt --noheadings --bytes --output SIZE --target /dev/shm"))
    assert size >= 16 * GIB
    assert "tmpfs /dev/shm tmpfs rw,nosuid,nodev,size=16G 0 0" in host.file("/etc/fstab").content_string.splitlines()


# --- sglang_service role -------------------------------------------------------------------------------------

def test_service_enabled_and_running_as_sglang_not_root(host):
    service = host.service(UNIT)
    assert service.is_enabled and service.is_running
    pids = host.check_output("pgrep -f sglang.launch_server").split()
    assert pids
    users = {host.check_output(f"ps -o user= -p {pid}").strip() for pid in pids}
    assert users == {"sglang"}
    assert unit_props(host, "MainPID")["MainPID"] in pids


def test_environment_file_is_root_only(host, secrets):
    env = host.file(ENV_FILE)
    assert env.user == "root" and env.group == "root" and env.mode == 0o600
    lines = env.content_string.splitlines()
    assert f'HF_TOKEN="{secrets["hf_token"]}"' in lines
    assert f'SGLANG_API_KEY="{secrets["api_key"]}"' in lines
    assert unit_props(host, "EnvironmentFiles")["EnvironmentFiles"].startswith(ENV_FILE)


def test_unit_hardening_keeps_the_gpus_reachable(host):
    props = unit_props(host, "User", "Type", "NoNewPrivileges", "ProtectSystem", "ReadWritePaths", "PrivateTmp",
                       "ProtectHome", "PrivateDevices", "DevicePolicy", "Restart", "StartLimitBurst",
                       "StartLimitIntervalUSec", "TimeoutStartUSec", "LimitNOFILE", "ProtectKernelModules")
    assert props["User"] == "sglang"
    assert props["Type"] == "exec"
    assert props["NoNewPrivileges"] == "yes"
    assert props["ProtectSystem"] == "strict"
    assert props["ReadWritePaths"].split() == ["/var/lib/sglang", "/run/sglang-sim"]
    assert props["PrivateTmp"] == "yes" and props["ProtectHome"] == "yes"
    assert props["PrivateDevices"] == "no" and props["DevicePolicy"] == "auto"  # /dev/nvidia* stay reachable
    assert props["ProtectKernelModules"] == "yes"
    assert props["Restart"] == "on-failure"
    assert props["StartLimitBurst"] == "3" and props["StartLimitIntervalUSec"] == "2h"
    assert props["TimeoutStartUSec"] == "30min"
    assert props["LimitNOFILE"] == "1048576"


def test_unit_hardening_directives(host):
    expected = {"ProtectKernelLogs": "yes", "ProtectClock": "yes", "ProtectHostname": "yes", "RestrictNamespaces": "yes",
                "SystemCallArchitectures": "native", "CapabilityBoundingSet": "", "AmbientCapabilities": "",
                "ProtectProc": "invisible", "ProcSubset": "all", "KeyringMode": "private", "RemoveIPC": "yes",
                "LockPersonality": "yes", "RestrictRealtime": "yes", "RestrictSUIDSGID": "yes",
                # Left out on purpose (see the template): they would break the real NVIDIA driver or SGLang.
                "PrivateUsers": "no", "MemoryDenyWriteExecute": "no"}
    props = unit_props(host, *expected, "RestrictAddressFamilies", "DeviceAllow", "SystemCallFilter")
    assert {name: props.get(name) for name in expected} == expected
    assert sorted(props["RestrictAddressFamilies"].split()) == ["AF_INET", "AF_INET6", "AF_NETLINK", "AF_UNIX"]
    # ProtectClock= adds no device allow-list under DevicePolicy=auto (systemd >= 252): /dev/nvidia* stay open.
    assert props.get("DeviceAllow", "") == ""
    assert not props.get("SystemCallFilter", "~").strip("~")  # no SystemCallFilter= (see the template)


def test_unit_exposure_score(host):
    output = host.check_output(f"systemd-analyze security --no-pager {UNIT}")
    level = re.search(rf"Overall exposure level for {re.escape(UNIT)}: (\d+\.\d+)", output)
    assert level, output
    assert float(level.group(1)) <= EXPOSURE_MAX, output


def test_exec_start_from_the_server_args(host):
    exec_start = [line for line in host.file(UNIT_FILE).content_string.splitlines() if line.startswith("ExecStart=")]
    assert exec_start == [
        "ExecStart=/opt/sglang/venv/bin/python -m sglang.launch_server --model-path /models/single-gpu/model "
        "--host 0.0.0.0 --port 30000 --served-model-name llama-3.1-8b --tp-size 1 $LLMSERVE_KV_ARGS "
        "--api-key ${SGLANG_API_KEY}"]
    # No --mem-fraction-static set: the variable is empty (SGLang's default); the KV tuner's drop-ins override it.
    assert 'Environment="LLMSERVE_KV_ARGS="' in host.file(UNIT_FILE).content_string.splitlines()


def test_server_uses_its_sandbox(host):
    # Inside the unit, /usr is read-only and /var/lib/sglang writable: ProtectSystem=strict + ReadWritePaths.
    pid = unit_props(host, "MainPID")["MainPID"]
    mounts = host.check_output(f"cat /proc/{pid}/mountinfo")
    assert re.search(r" /usr \S+ ro[, ]", mounts) or re.search(r" / \S+ ro[, ]", mounts), mounts
    assert re.search(r" /var/lib/sglang \S+ rw[, ]", mounts), mounts


def test_server_sees_its_own_processes_and_the_driver_files_only(host):
    """ProtectProc=invisible without ProcSubset=pid, in the server's own mount namespace and as its user: other
    users' processes are hidden, its own and /proc's non-process files (/proc/driver, where NVIDIA's
    /proc/driver/nvidia lives, /proc/meminfo, /proc/devices) are not. The server has no capability left."""
    pid = unit_props(host, "MainPID")["MainPID"]
    as_server = f"nsenter -t {pid} -m -S $(id -u sglang) -G $(id -g sglang) "
    assert host.run(as_server + "test -e /proc/1").rc != 0
    assert host.run(as_server + f"test -r /proc/{pid}/status").rc == 0
    for path in ["/proc/meminfo", "/proc/devices"] + (["/proc/driver"] if host.file("/proc/driver").exists else []):
        assert host.run(as_server + f"test -e {path}").rc == 0, path
    status = host.file(f"/proc/{pid}/status").content_string
    assert re.search(r"^CapBnd:\s+0+$", status, re.M) and re.search(r"^CapEff:\s+0+$", status, re.M), status


def test_real_generation_with_the_api_key(hostvars, secrets):
    status, body = generate(hostvars, secrets["api_key"])
    assert status == 200
    assert body["meta_info"]["completion_tokens"] == 4 and body["text"]


def test_generation_refused_without_or_with_a_wrong_api_key(hostvars):
    assert generate(hostvars, None)[0] == 401
    assert generate(hostvars, "sk-wrong")[0] == 401


def test_secrets_not_in_the_unit_file(host, secrets):
    unit = host.file(UNIT_FILE).content_string
    assert secrets["hf_token"] not in unit
    assert secrets["api_key"] not in unit


def test_hf_token_not_in_the_process_list(host, secrets):
    # The API key is on the server's command line (SGLang reads it from no environment variable; see the README).
    assert secrets["hf_token"] not in host.check_output("ps auxww")


def test_hf_token_not_in_the_journal(host, secrets):
    assert secrets["hf_token"] not in host.check_output("journalctl --no-pager --output=cat")


def test_idempotence_did_not_restart_the_server(host):
    # converge appends the unit's InvocationID once per start; the idempotence run added none.
    invocations = host.file("/root/sglang-invocations").content_string.split()
    props = unit_props(host, "InvocationID", "NRestarts")
    assert invocations == [props["InvocationID"]]
    assert props["NRestarts"] == "0"


@pytest.mark.parametrize("role, extra, expect", [
    ("sglang", {"sglang_shm_action": "bogus"}, "sglang_shm_action"),
    ("sglang", {"sglang_model_path": "/srv/no-model"},
     "sglang_model_path=/srv/no-model: the model has no readable config.json at /srv/no-model/config.json"),
    ("sglang_service", {"sglang_service_port": "not-a-port"}, "sglang_service_port"),
    ("sglang_service", {"sglang_service_model_path": "/m", "sglang_service_server_args": {"api-key": "x"}},
     "must not hold api_key"),
], ids=["argument-spec", "model-without-config", "service-argument-spec", "api-key-in-server-args"])
def test_bad_input_fails_before_any_change(tmp_path, role, extra, expect):
    play = tmp_path / "play.yml"
    play.write_text(json.dumps([{"name": "Bad input", "hosts": "all", "gather_facts": False,
                                 "roles": [{"role": f"llmserve.sglang.{role}", **extra}]}]))
    output = playbook(play)
    assert output.endswith("rc=2"), output[-3000:]
    assert expect in output, output[-3000:]
    assert recap(output)["failed"] == 1 and recap(output)["changed"] == 0, output[-3000:]


# A stand-in for the venv's Hugging Face CLI (the host is offline): records who ran it, with which token and
# arguments, whether the token was on its or its parent's command line, and writes a config.json.
FAKE_HF = r"""#!/bin/sh
while [ $# -gt 0 ]; do
  case "$1" in download) repo=$2; shift;; --revision) rev=$2; shift;; --local-dir) dir=$2; shift;; esac
  shift
done
cmdlines=$(tr '\0' ' ' < /proc/$$/cmdline; tr '\0' ' ' < /proc/$PPID/cmdline)
case "$cmdlines" in *"${HF_TOKEN:-@none@}"*) on_cmdline=yes;; *) on_cmdline=no;; esac
printf '{"user": "%s", "token": "%s", "token_on_cmdline": "%s", "hf_home": "%s", "repo": "%s", "revision": "%s"}\n' \
  "$(id -un)" "${HF_TOKEN:-}" "$on_cmdline" "$HF_HOME" "$repo" "$rev" >> /var/lib/sglang/fake-hf.jsonl
echo '{"architectures": ["LlamaForCausalLM"]}' > "$dir/config.json"
"""


def test_secrets_never_in_ansible_output(host, secrets):
    """A converge at -vvv with --diff that rewrites the EnvironmentFile and the unit (so restarts the server and
    waits for a real generation with the key) and downloads a draft model with the (fake) Hugging Face CLI prints
    neither the HF token nor the API key."""
    host.check_output(f"rm -f {ENV_FILE} {UNIT_FILE} /var/lib/sglang/fake-hf.jsonl && "
                      f"install -m 0755 /dev/stdin /opt/sglang/venv/bin/hf <<'EOF'\n{FAKE_HF}EOF")
    output = playbook(SCENARIO / "converge.yml", "-vvv", "--diff", "-e", "sglang_draft_model_repo=example/draft-model")
    assert output.endswith("rc=0"), output[-3000:]
    assert recap(output)["changed"] >= 4  # the EnvironmentFile, the unit, the restart, the download
    assert "Wait until the server answers a real generation: sglang.service" in output
    assert "censored" in output
    assert secrets["hf_token"] not in output
    assert secrets["api_key"] not in output
    # The CLI ran once, as the service user, with the token in its environment and not on a command line.
    calls = [json.loads(line) for line in host.file("/var/lib/sglang/fake-hf.jsonl").content_string.splitlines()]
    assert calls == [{"user": "sglang", "token": secrets["hf_token"], "token_on_cmdline": "no",
                      "hf_home": "/var/lib/sglang/huggingface", "repo": "example/draft-model", "revision": "main"}]
    draft = host.file("/var/lib/sglang/models/example--draft-model")
    assert draft.is_directory and draft.user == "sglang" and draft.mode == 0o750
    assert host.file("/var/lib/sglang/models/example--draft-model/config.json").exists
    # That converge restarted the server on purpose: start the idempotence record afresh for a later verify.
    host.check_output("systemctl show --property=InvocationID --value sglang.service > /root/sglang-invocations")

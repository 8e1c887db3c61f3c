# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""One SGLang server on two simulated 8x H100 hosts (prefix simnodes): Llama-3.1-70B at TP16, --nnodes 2, node 0 on
simnodes1 (it serves the API), node 1 on simnodes2, joined at node 0's --dist-init-addr over the hosts' network.
Another process holds 4 GiB of one GPU of node 1 (within SGLang's balance limit), so the least free GPU of the
server is on the node that serves no request.

tune_kv.yml tunes the server as one: every trial restarts both nodes on one value, node 1 watches its GPUs while
node 0 drives the load, the least free GPU of either node judges it, and both nodes pin the value. The simulator's
oracle, asked for both nodes, gives the largest stable value. A re-run changes nothing.

rollout.yml upgrades the two nodes in one batch: a release that crashes on node 1 rolls both back together; a
release whose larger graph reserve fails the old pin in the capture re-tunes the server as one, on both nodes.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
import yaml

from simhost_lib import (HOST_JSON, PIN_DROPIN, PLOT_OFF, REPO, SAFETY_GIB, TRIAL_DROPIN, ansible, ansible_journal,
                         controller, deployed, fact, invocation, play, running_fraction, server_argv, set_faults, ssh,
                         trial_left, tune, wait_for, write_host_vars)

PREFIX = "simnodes"
NODES = [f"{PREFIX}1", f"{PREFIX}2"]
RES = 0.005
# The server's API key (a vault variable in a real inventory): it may reach the server's environment file, the
# tuner's requests and nothing else the tuner writes or logs.
API_KEY = "FAKE-simnodes-api-key-not-a-real-secret"


def _two_nodes(inventory):
    """Node 0 on NODES[0], node 1 on NODES[1], joined at node 0's address; 4 GiB held on node 1's GPU 3."""
    hosts = yaml.safe_load((inventory / "hosts.yml").read_text())["sim"]["hosts"]
    leader = hosts[NODES[0]]["ansible_host"]
    write_host_vars(inventory, {host: {"sglang_service_api_key": API_KEY, "sglang_service_server_args": {
        "served_model_name": "llama-3.1-70b-instruct", "tp_size": 16, "nnodes": 2, "node_rank": rank,
        "dist_init_addr": f"{leader}:5000"}} for rank, host in enumerate(NODES)})
    set_faults(NODES[1], gpu_occupied_mib={"3": 4096})


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with deployed(tmp_path_factory.mktemp("simnodes"), PREFIX, ["h100-llama70b"] * 2, prepare=_two_nodes) as inventory:
        yield inventory


def oracle_max() -> float:
    """The simulator's ground truth for the whole server (both nodes' host.json), at the tuner's margin and grid."""
    ssh(NODES[0], "cat > /tmp/node1-host.json", stdin=ssh(NODES[1], f"cat {HOST_JSON}"))
    words = server_argv(NODES[0])
    args = words[words.index("-m") + 2:]
    index = args.index("--mem-fraction-static")
    del args[index:index + 2]
    out = ssh(NODES[0], " ".join(["/opt/sglang-sim/bin/sglang-sim-oracle", "--host", HOST_JSON, "--node-host",
                                  HOST_JSON, "--node-host", "/tmp/node1-host.json", *args,
                                  "--safety-gib", str(SAFETY_GIB), "--resolution", str(RES)]))
    return json.loads(out)["max_mem_fraction_static"]


class ChannelReader(threading.Thread):
    """Reads, while a run lasts, every message the nodes exchange (plugin_utils/node_channel.py: JSON files in a
    kv-tune-* directory of ansible-playbook's local temporary directory, removed when it exits)."""

    def __init__(self):
        super().__init__(daemon=True)
        self.messages, self.done = {}, threading.Event()

    def run(self):
        root = Path(os.path.expanduser("~/.ansible/tmp"))
        while not self.done.wait(0.2):
            for path in root.glob("ansible-local-*/kv-tune-*/*.json"):
                try:
                    self.messages[str(path)] = path.read_text(errors="replace")
                except OSError:   # renamed or removed meanwhile
                    pass

    def stop(self):
        self.done.set()
        self.join(5)
        return self.messages


def test_the_server_is_tuned_as_one_and_pinned_on_both_nodes(server, tmp_path, measured):
    channel = ChannelReader()
    channel.start()
    try:
        run = tune(server, tmp_path, cmdline="-vvv")
    finally:
        messages = channel.stop()
    assert run.status == "successful", run.stdout[-8000:]
    result = json.loads((tmp_path / f"{NODES[0]}.json").read_text())
    assert result["status"] == "tuned", result
    value = result["after"]["mem_fraction_static"]
    truth = oracle_max()
    assert truth - RES - 1e-9 <= value <= truth + 1e-9, (value, truth, result["trials"])
    for host in NODES:
        assert fact(host)["mem_fraction_static"] == pytest.approx(value)
        assert running_fraction(host) == pytest.approx(value)
    # Node 1's GPUs were watched under every load, and the least free GPU of the server was one of them.
    loaded = [trial for trial in result["trials"] if trial["min_free_gib_per_gpu"]]
    assert loaded and all(any(key.startswith(NODES[1] + ":") for key in trial["min_free_gib_per_gpu"])
                          for trial in loaded), loaded
    last = loaded[-1]["min_free_gib_per_gpu"]
    assert min(last, key=last.get) == f"{NODES[1]}:3", last
    assert "node 1 of the server led by %s" % NODES[0] in run.stdout
    rows = {row["host"]: row for row in json.loads((tmp_path / "summary.json").read_text())}
    assert rows[NODES[1]]["follower_of"] == NODES[0] and rows[NODES[1]]["after"] == pytest.approx(value)
    measured("two-node server (TP16 over 2 hosts, 4 GiB held on node 1): %s -> %s in %d restart(s), oracle %s"
             % (result["before"]["mem_fraction_static"], value, result["restarts"], truth))
    # The secrets sweep: the server ran with the key (its requests were authorised), and the key is in no line of
    # the -vvv run, no message between the nodes, no report, no fact, no drop-in and no module invocation in either
    # node's journal.
    assert API_KEY in " ".join(server_argv(NODES[0])) and API_KEY not in run.stdout
    names = {Path(path).name for path in messages}
    assert {"hello-1.json", "step-0.json", "ack-0-1.json"} <= names, sorted(names)
    assert not [path for path, text in messages.items() if API_KEY in text]
    for path in tmp_path.rglob("*"):
        assert not path.is_file() or API_KEY not in path.read_text(errors="replace"), path
    for host in NODES:
        assert "Invoked with" in ansible_journal(host)   # the journal holds the modules' invocations
        kept = ssh(host, f"cat /etc/ansible/facts.d/sglang_kv.fact {PIN_DROPIN} {TRIAL_DROPIN} 2>/dev/null; "
                         "true") + ansible_journal(host)
        assert API_KEY not in kept, host


def test_a_rerun_changes_nothing_on_either_node(server, tmp_path):
    before = {host: invocation(host) for host in NODES}
    run = tune(server, tmp_path)
    assert run.status == "successful", run.stdout[-5000:]
    assert all(run.stats["changed"].get(host, 0) == 0 for host in NODES), run.stdout[-5000:]
    assert {host: invocation(host) for host in NODES} == before


def test_a_node_watches_what_other_processes_take_on_its_gpus_during_a_load(server):
    # What node 1 runs while node 0 drives a trial's load (gpu_info with watch_units, on a real systemd host): the
    # 4 GiB held on GPU 3 all along, and 2 GiB another process takes on GPU 5 meanwhile, outside sglang.service.
    failures = []

    def take():
        # Once the module runs on node 1 (its pipelined interpreter is there: a process whose whole command line is the
        # inventory's /usr/bin/python3, under `sh -c` on every core; 2.21 no longer adds `&& sleep 0`), not a fixed
        # time after ansible starts: on a busy controller the connection alone can outlast a fixed delay, and the
        # first reading already sees 2 GiB.
        try:
            wait_for(lambda: ssh(NODES[1], "pgrep -fx /usr/bin/python3 || true").strip(), timeout=60, step=0.1)
            time.sleep(2)
            set_faults(NODES[1], gpu_occupied_mib={"3": 4096, "5": 2048})
        except Exception as exc:  # pylint: disable=broad-exception-caught
            failures.append(exc)  # said below, not lost with the thread

    taker = threading.Thread(target=take)
    taker.start()
    try:
        results = ansible(server, "llmserve.sglang.gpu_info", "watch=8 gpus=3,5 watch_units=sglang.service")
    finally:
        taker.join()
        set_faults(NODES[1], gpu_occupied_mib={"3": 4096})
    assert not failures, "the other process never took its 2 GiB: %r" % failures
    seen = {entry["gpu"]: entry for entry in results[NODES[1]]["watched"]["other_memory_seen"]}
    gib = 2 ** 30
    assert (seen[3]["min_bytes"], seen[3]["max_bytes"]) == (4 * gib, 4 * gib), seen
    assert (seen[5]["min_bytes"], seen[5]["max_bytes"]) == (0, 2 * gib), seen
    assert [proc["pid"] for proc in seen[5]["processes"]] == [90005], seen
    idle = results[NODES[0]]["watched"]["other_memory_seen"]
    assert [(entry["min_bytes"], entry["max_bytes"]) for entry in idle] == [(0, 0), (0, 0)], idle


def test_a_start_that_runs_node_1_out_of_memory_backs_off_from_node_1s_failure(server, tmp_path):
    """Fault: at 0.96 the node that serves no request (4 GiB held) runs out of memory; node 0 only loses its peer
    (nccl_error, not a memory failure). The search reads node 1's failure, backs off, and both nodes end on one
    stable value, each pinned."""
    run = tune(server, tmp_path, kv_tune_force=True, kv_tune_start=0.96)
    assert run.status == "successful", run.stdout[-8000:]
    result = json.loads((tmp_path / f"{NODES[0]}.json").read_text())
    first = result["trials"][0]
    assert first["text"] == "0.960" and first["outcome"] in ("startup_oom", "runtime_oom"), first
    value, truth = result["after"]["mem_fraction_static"], oracle_max()
    assert truth - RES - 1e-9 <= value <= truth + 1e-9, (value, truth, result["trials"])
    for host in NODES:
        assert fact(host)["mem_fraction_static"] == pytest.approx(value)
        assert running_fraction(host) == pytest.approx(value)
        assert ssh(host, f"test -e {TRIAL_DROPIN} && echo left || echo none").strip() == "none"


def test_a_server_with_a_node_left_out_is_not_tuned(server, tmp_path):
    before = {host: invocation(host) for host in NODES}
    run = tune(server, tmp_path, kv_tune_hosts=NODES[0], kv_tune_force=True)
    assert run.status == "failed"
    assert "node rank 1 is not in this run" in run.stdout
    assert {host: invocation(host) for host in NODES} == before


def _trial_on(host):
    """Whether ``host`` has a trial drop-in: True, False, or None when it does not answer in time (its CPU busy with
    a start: a poll tries again)."""
    out = ssh(host, f"test -e {TRIAL_DROPIN} && echo yes || echo no", check=False).strip()
    return {"yes": True, "no": False}.get(out)


def _runs(host, value):
    """The server on ``host`` runs ``value`` (False between two starts, or when the host does not answer in time)."""
    try:
        return running_fraction(host) == pytest.approx(value)
    except AssertionError:
        return False


def _signal_tree(pid, signum):
    """Send ``signum`` to a process and all its descendants, as a frozen machine would stop them all: Ansible's
    workers run in sessions of their own (os.setsid), so a signal to ansible-playbook's group misses them."""
    for _round in range(2):   # a child forked between the listing and the signal is caught the second time
        parents = {}
        for line in subprocess.run(["ps", "-e", "-o", "pid=,ppid="], capture_output=True, text=True,
                                   check=True).stdout.splitlines():
            child, parent = (int(word) for word in line.split())
            parents.setdefault(parent, []).append(child)
        tree, todo = [], [pid]
        while todo:
            tree.append(todo.pop())
            todo.extend(parents.get(tree[-1], []))
        for member in tree:
            try:
                os.kill(member, signum)
            except ProcessLookupError:
                pass


def _unit_story(host):
    """The server unit's state, the host's journal (less the request lines) and drop-ins, for a failed assertion."""
    story = ("systemctl show -p ActiveState -p SubState -p Result -p NRestarts sglang.service; "
             "journalctl --no-pager -o short-monotonic -n 3000 "
             "| grep -v -e ' HTTP/1.1\" ' -e 'Prefill batch' -e 'Decode batch' | tail -60; "
             "ls -l /etc/systemd/system/sglang.service.d /run/systemd/system/sglang.service.d")
    return host + "\n" + ssh(host, story, check=False)


def _serves(host, value):
    """The server on ``host`` runs ``value`` and its log since that start says it is ready."""
    try:
        if not _runs(host, value):
            return False
        return "ready to roll" in ssh(host, "journalctl -o cat _SYSTEMD_INVOCATION_ID=%s" % invocation(host))
    except AssertionError:   # between two starts (no main process to read), or no answer in time
        return False


def test_a_commit_that_cannot_be_written_on_node_0_pins_neither_node(server, tmp_path):
    """Fault: node 0's drop-in directory is read-only when the verified value is committed (a full disk, say).
    Before, node 1 pinned the new value, node 0 kept its old one, and the next run said both hold. Now every node
    prepares the commit first: node 0's fails there, every node reverts its trial at once, and neither pin moves."""
    pinned = {host: fact(host)["mem_fraction_static"] for host in NODES}
    directory = os.path.dirname(PIN_DROPIN)
    ssh(NODES[0], f"mount --bind {directory} {directory} && mount -o remount,ro,bind {directory}")
    try:
        run = tune(server, tmp_path, kv_tune_force=True, kv_tune_start=round(pinned[NODES[0]] - 0.01, 3),
                   kv_tune_budget=1)
    finally:
        ssh(NODES[0], f"umount {directory}")
    assert run.status == "failed", run.stdout[-8000:]
    assert "Read-only file system" in run.stdout, run.stdout[-8000:]
    for host in NODES:
        assert fact(host)["mem_fraction_static"] == pytest.approx(pinned[host])
        assert running_fraction(host) == pytest.approx(pinned[host])
        assert not trial_left(host)
        assert ssh(host, f"ls {directory}").split() == [os.path.basename(PIN_DROPIN)]   # nothing prepared is left


def test_memory_taken_on_the_other_node_while_each_start_loads_pins_nothing(server, tmp_path):
    """Fault: another process takes 2 GiB on every GPU of node 1 while each start loads its weights (held 3 s) and
    gives them back after the pool: node 1's own log is even, the server's pool comes out smaller and the memory
    given back reads as headroom. Node 1 watches its GPUs while its server starts: the trial is untrusted, started
    again once, then the run stops with both nodes on their pin."""
    pinned = {host: fact(host) for host in NODES}
    set_faults(NODES[1], gpu_occupied_mib={"3": 4096}, slow_start_s=3,
               load_contention_mib={str(gpu): 2048 for gpu in range(8)})
    try:
        run = tune(server, tmp_path, kv_tune_force=True,
                   kv_tune_start=round(pinned[NODES[0]]["mem_fraction_static"] - 0.02, 3))
    finally:
        set_faults(NODES[1], gpu_occupied_mib={"3": 4096})
    result = json.loads((tmp_path / f"{NODES[0]}.json").read_text())
    assert [trial["outcome"] for trial in result["trials"]] == ["untrusted", "unverified"], result["trials"]
    assert run.status == "failed" and result["status"] == "failed", run.stdout[-8000:]
    why = result["trials"][0]["why"]
    assert f"node {NODES[1]}: another process held up to 2.00 GiB on GPU 0 while the server started" in why, why
    for host in NODES:
        assert fact(host)["time"] == pinned[host]["time"], host
        assert running_fraction(host) == pytest.approx(pinned[host]["mem_fraction_static"]), host
        assert not trial_left(host), host


@pytest.mark.parametrize("signum, phase, load_s, after_s, confirm_s", [
    (signal.SIGKILL, "load", 40, 8, 600),     # issue 32, item 5: 39 s before, the rest of the load and the watch
    (signal.SIGKILL, "start", 40, 3, 600),
    (signal.SIGINT, "load", 40, 8, 600),      # forwarded to the workers, whose Ansible handler ended them at once
], ids=["killed-8s-into-a-40s-load", "killed-3s-into-the-start", "interrupted-8s-into-a-40s-load"])
def test_the_controller_killed_during_a_two_node_trial_reverts_both_nodes_at_once(server, tmp_path, measured, signum,
                                                                                  phase, load_s, after_s, confirm_s):
    """Fault: ansible-playbook killed (its workers live on) or interrupted while node 0 drives a trial's load, or
    while the trial's servers start. Before, node 0's revert first waited for node 1, gave up as the controller was
    gone, and left node 0 on the unverified value until its revert timer; then (issue 32) each worker saw the
    controller gone only after its call in progress (the load, node 1's watch of it: 39 s for a 40 s load killed 8 s
    in), and one that ansible-playbook interrupted was ended at once by Ansible, trial and all. Now a call in
    progress is cut short and a forwarded signal ends the run like a controller gone: each node reverts its own
    trial at once, before any word to the other, long before the timers."""
    pinned = fact(NODES[0])["mem_fraction_static"]
    trial = round(pinned - 0.01, 3)
    if phase == "start":
        set_faults(NODES[0], slow_start_s=30)   # the kill lands while node 0's server loads (a real one: minutes)
    proc = controller(server, tmp_path, kv_tune_force=True, kv_tune_start=trial, kv_tune_budget=1,
                      kv_tune_ready_timeout=300, kv_tune_stress_duration=load_s, kv_tune_confirm_timeout=confirm_s)
    log = tmp_path / "controller.log"
    try:
        assert wait_for(lambda: proc.poll() is not None or all(_trial_on(host) for host in NODES), 240) \
            and proc.poll() is None, log.read_text()[-4000:]
        if phase == "load":
            # node 0's progress line as the trial's load begins (tuner/progress_lines.py: "<unit>: under load <value>"); the
            # run has no load before (no measurement in place: it starts on kv_tune_start)
            assert wait_for(lambda: "under load" in log.read_text(), 360, step=0.2), log.read_text()[-4000:]
        time.sleep(after_s)
        os.kill(proc.pid, signum)   # ansible-playbook only: its workers see it gone, or get the signal from it
        killed = time.monotonic()
        assert wait_for(lambda: all(_trial_on(host) is False for host in NODES), 120), log.read_text()[-4000:]
        seconds = time.monotonic() - killed
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)   # what is left of ansible-playbook, whatever it did
        except ProcessLookupError:
            pass
        if phase == "start":
            set_faults(NODES[0])
    for host in NODES:
        assert wait_for(lambda host=host: _runs(host, pinned), 120), host
        assert fact(host)["mem_fraction_static"] == pytest.approx(pinned)
    # The two reverts restart each node by itself: a node that lost its peer meanwhile is restarted by systemd until
    # the server forms again on both. It serves again before the next test's run takes its first look.
    assert wait_for(lambda: _serves(NODES[0], pinned), 240), \
        "the server did not form again on its pin\n" + "\n".join(_unit_story(host) for host in NODES)
    # Within a trial's start (8 s here), whatever was left of the call in progress (the load: up to 32 s here).
    assert seconds < 12, seconds
    how = {signal.SIGKILL: "killed", signal.SIGINT: "interrupted"}[signum]
    when = "a %d s load" % load_s if phase == "load" else "the start"
    measured("two-node trial, ansible-playbook %s %d s into %s: both trial drop-ins gone %.0f s later "
             "(revert timers at %d s)" % (how, after_s, when, seconds, confirm_s))


def test_the_controller_stopped_past_the_confirm_timeout_pins_neither_node(server, tmp_path, measured):
    """Fault: ansible-playbook and its workers SIGSTOPped (a suspended terminal, a frozen controller VM) during a
    two-node trial for longer than the confirm timeout. Each node's revert timer puts it back on its pin by itself;
    when the controller goes on, the servers it finds are not the trial's starts, and it pins neither node."""
    pinned = {host: fact(host) for host in NODES}
    value = pinned[NODES[0]]["mem_fraction_static"]
    set_faults(NODES[0], slow_start_s=8, from_mem_fraction_static=0.5)   # the stop comes while the trial starts
    proc = controller(server, tmp_path, kv_tune_force=True, kv_tune_start=round(value - 0.01, 3), kv_tune_budget=1,
                      kv_tune_ready_timeout=14, kv_tune_stress_duration=3, kv_tune_confirm_timeout=20)
    try:
        assert wait_for(lambda: proc.poll() is not None or all(_trial_on(host) for host in NODES), 240) \
            and proc.poll() is None, (tmp_path / "controller.log").read_text()[-4000:]
        _signal_tree(proc.pid, signal.SIGSTOP)
        stopped = time.monotonic()
        assert wait_for(lambda: all(_trial_on(host) is False for host in NODES), 150), "no node reverted by itself"
        seconds = time.monotonic() - stopped
        for host in NODES:
            assert wait_for(lambda host=host: _runs(host, value), 120), _unit_story(host)
        _signal_tree(proc.pid, signal.SIGCONT)
        assert proc.wait(300) != 0, (tmp_path / "controller.log").read_text()[-6000:]
    finally:
        try:
            _signal_tree(proc.pid, signal.SIGCONT)
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        set_faults(NODES[0])
    for host in NODES:
        assert fact(host) == pinned[host] and not trial_left(host)
        assert _runs(host, value), host
    measured("two-node trial, ansible-playbook stopped past the confirm timeout (20 s): both nodes back on their pin "
             "%.0f s after the stop, by their own timers; the resumed run failed and pinned nothing" % seconds)


def _installed(host: str) -> str:
    return ssh(host, "ls -d /opt/sglang/venv/lib/python3*/site-packages/sglang-*.dist-info").strip() \
        .rsplit("sglang-", 1)[1].removesuffix(".dist-info")


def _rollout(server: Path, reports: Path, **extravars):
    return play(server, playbook=REPO / "playbooks" / "rollout.yml",
                extravars={"rollout_report_dir": str(reports), "kv_tune_report_dir": str(reports / "kv_tune"),
                           "sglang_version": "0.5.10", **PLOT_OFF, **extravars})


def _node_0_generates() -> bool:
    """Node 0 answers a real generation (with the API key) within 2 minutes."""
    script = ("import json, urllib.request; r = urllib.request.urlopen(urllib.request.Request("
              "'http://127.0.0.1:30000/generate', data=json.dumps({'text': 'Hi', 'sampling_params': "
              "{'max_new_tokens': 1}}).encode(), headers={'Authorization': 'Bearer %s', 'Content-Type': "
              "'application/json'}), timeout=30); print(r.status)" % API_KEY)
    return wait_for(lambda: ssh(NODES[0], "python3 -c \"%s\" 2>/dev/null || true" % script).strip() == "200", 120)


def _rows(reports: Path) -> dict:
    return {row["server"]: row for row in json.loads((reports / "rollout_summary.json").read_text())}


def test_a_release_that_crashes_on_node_1_rolls_both_nodes_back_together(server, tmp_path):
    """issue 35, item 1: the two nodes are one batch (the canary is the whole server); node 1 crashes on 0.5.10 and
    node 0 loses it, which is not a lack of memory: both nodes go back to 0.5.9 and their pins, restarted together,
    and the server serves again."""
    pinned = {host: fact(host) for host in NODES}
    set_faults(NODES[1], gpu_occupied_mib={"3": 4096}, crash_at_startup=True, for_sglang_versions=["0.5.10"])
    try:
        run = _rollout(server, tmp_path)
    finally:
        set_faults(NODES[1], gpu_occupied_mib={"3": 4096})
    assert run.status == "failed", run.stdout[-8000:]
    rows = _rows(tmp_path)
    for host in NODES:
        assert (rows[host]["status"], rows[host]["phase"]) == ("rolled_back", "upgrade"), rows[host]
        assert rows[host]["cause"].startswith("not a lack of memory ("), rows[host]["cause"]
        assert _installed(host) == "0.5.9" and fact(host) == pinned[host], host
        assert running_fraction(host) == pytest.approx(pinned[host]["mem_fraction_static"])
    assert "crash" in rows[NODES[0]]["cause"]
    assert _node_0_generates()


def test_a_rollout_upgrades_both_nodes_together_and_re_tunes_the_server_as_one(server, tmp_path):
    """issue 35, items 1 and 2: 0.5.10 reserves about 6 GiB more for its CUDA graphs on both nodes, so the pin tuned on
    0.5.9 runs out of memory in the capture on node 1 (the least free GPU), and node 0 loses it: the server is
    re-tuned for 0.5.10 as one and kept, on both nodes, from the upgrade's failed start, not started on the old pin
    again."""
    pinned = fact(NODES[0])["mem_fraction_static"]
    since = ssh(NODES[0], "date +%s").strip()
    for host in NODES:
        set_faults(host, gpu_occupied_mib={"3": 4096} if host == NODES[1] else {},
                   _memory_for_sglang_versions={"0.5.10": {"graph_mib_base": 6144}})
    run = _rollout(server, tmp_path)
    assert run.status == "successful", run.stdout[-8000:]
    rows = _rows(tmp_path)
    for host in NODES:
        assert (rows[host]["status"], rows[host]["retune"]) == ("retuned", "tuned"), rows[host]
        assert (rows[host]["before"]["sglang"], rows[host]["after"]["sglang"]) == ("0.5.9", "0.5.10")
        assert _installed(host) == "0.5.10" and fact(host)["fingerprint"]["versions"]["sglang"] == "0.5.10"
    assert "a lack of memory on the old pin (" in rows[NODES[0]]["cause"], rows[NODES[0]]
    assert "capture_oom" in rows[NODES[0]]["cause"], rows[NODES[0]]
    # one value on both nodes, lower than the old pin, pinned and running
    assert fact(NODES[0])["mem_fraction_static"] == fact(NODES[1])["mem_fraction_static"] < pinned
    # the old pin started once on 0.5.10, by the upgrade, on each node (SGLang logs its arguments at each start)
    for host in NODES:
        values = ssh(host, f"journalctl -u sglang.service --since @{since} -o cat --no-pager | grep -o "
                           "'mem_fraction_static=[0-9.]*' || true").split()
        assert [float(value.split("=")[1]) for value in values].count(pinned) == 1, (host, pinned, values)
    assert "failed for a lack of memory (capture_oom" in run.stdout, run.stdout[-8000:]
    assert running_fraction(NODES[0]) == running_fraction(NODES[1])
    assert "node 1 of the server led by %s" % NODES[0] in run.stdout
    assert _node_0_generates()

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The headroom watch on one simulated host (prefix simwatch): 1x H100 with Llama-3.1-8B, deployed by site.yml with
sglang_service_kv_watch (a sample a second, a window every 3 s here; 5 s and 5 min by default), then tuned.

The watch runs as a dynamic user of its own and keeps its windows where the server's user cannot write; it follows
the server through a restart, through garbage on /metrics and through a full disk. Production-like traffic (sglang-sim-traffic: mixed
lengths, bursts) that never fills the pool is not_enough_traffic; traffic that fills it gives a verdict. Traffic
that asks for the logprobs of its prompts (memory no stress load takes) comes within the margin: tune_kv.yml lowers
the pin by the memory it missed and verifies that under the load. The lowered pin then has headroom under the
plain traffic: proposed, and with kv_tune_watch_action=act searched from. A pool that comes back smaller at the same
value is named as the reason to tune again, and the re-tune pins what holds with that memory gone. With
kv_tune_pin_tokens the pin caps the pool at the verified one: turned on, without a restart; after the memory is
freed again, a restart serves the verified pool, not a larger one, and the pin still holds. The capacity report
shows the production headroom and draws its timeline.

The host also runs node_exporter (Debian's prometheus-node-exporter, installed by apt before site.yml, as on a
monitored fleet), whose textfile collector serves the watch's metrics; the near miss fires LlmserveKvNearMiss in a
real Prometheus (Debian's prometheus, on the controller) that scrapes it with the collection's alerting rules.
"""
from __future__ import annotations

import base64
import contextlib
import json
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import yaml

from simhost_lib import (REPO, address, ansible, deployed, fact, invocation, play, report, running_fraction, set_faults,
                         ssh, tune, wait_for)

PREFIX = "simwatch"
HOST = f"{PREFIX}1"
WATCH = "llmserve-kv-watch-sglang.service"
STATE = "/var/lib/llmserve-kv-watch-sglang/windows.jsonl"
DEPLOY = {"sglang_service_kv_watch": True, "sglang_service_kv_watch_interval": 1,
          "sglang_service_kv_watch_window": 3}
# The tuner judges a pin after this much time at a full pool (a day by default): a few samples. Full is a token
# usage of 0.6 here (0.9 by default): the simulator reserves each request's whole output where SGLang reserves a
# fraction and retracts, so traffic of mixed lengths holds its pool at about 0.6 to 0.8, not above 0.9.
JUDGE = {"kv_tune_watch_headroom_hours": 0.0005, "kv_tune_watch_full_usage": 0.6}
FULL = {"headroom_hours": 0.0005, "full_usage": 0.6}
RES = 0.005   # the tuner's grid (kv_tune_resolution's default)
# The watch's metrics, in node_exporter's textfile directory (the role's default, Debian's node_exporter's own).
TEXTFILE_DIR = "/var/lib/prometheus/node-exporter"
TEXTFILE = f"{TEXTFILE_DIR}/llmserve_kv_sglang.prom"
PROMETHEUS_DIR = REPO / ".tmp" / "prometheus"   # make prometheus-debs (tools/prometheus/fetch_debs.py)
RULES = REPO / "monitoring" / "prometheus" / "llmserve-kv.rules.yml"


def prometheus_debs() -> Path:
    """Debian's prometheus and node_exporter packages, pinned (`make simhosts` fetches them first)."""
    if not (PROMETHEUS_DIR / "root" / ".unpacked").exists():
        subprocess.run([sys.executable, str(REPO / "tools" / "prometheus" / "fetch_debs.py"), str(PROMETHEUS_DIR)],
                       check=True, capture_output=True, timeout=600)
    return PROMETHEUS_DIR


def install_node_exporter(_inventory) -> None:
    """Debian's node_exporter on the host, installed by its apt from the pinned package."""
    deb = base64.b64encode((prometheus_debs() / "prometheus-node-exporter.deb").read_bytes()).decode()
    ssh(HOST, "base64 -d > /tmp/node-exporter.deb && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "
              "/tmp/node-exporter.deb > /tmp/node-exporter.log 2>&1 && rm /tmp/node-exporter.deb", stdin=deb)


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    with deployed(tmp_path_factory.mktemp("simwatch"), PREFIX, ["single-gpu"], extravars=DEPLOY,
                  prepare=install_node_exporter) as inventory:
        yield inventory


@contextlib.contextmanager
def prometheus(tmp: Path, target: str):
    """A real Prometheus on the controller, scraping ``target`` (node_exporter) every second and evaluating the
    collection's alerting rules every second; its API's URL."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"}, "rule_files": [str(RULES)],
              "scrape_configs": [{"job_name": "node", "static_configs": [{"targets": [target]}]}]}
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
    with (tmp / "prometheus.log").open("w") as log:
        server = subprocess.Popen([str(prometheus_debs() / "root" / "usr" / "bin" / "prometheus"),
                                   f"--config.file={tmp / 'prometheus.yml'}", f"--storage.tsdb.path={tmp / 'tsdb'}",
                                   f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(30)


def alerts(url: str) -> list:
    """The alerts Prometheus holds (pending or firing); none while it starts."""
    try:
        with urllib.request.urlopen(f"{url}/api/v1/alerts", timeout=5) as answer:
            return json.load(answer)["data"]["alerts"]
    except OSError:
        return []


def windows(since: float = 0.0) -> list[dict]:
    text = ssh(HOST, f"cat {STATE} 2>/dev/null || true")
    return [record for record in map(json.loads, text.splitlines()) if record["end"] > since]


def host_time() -> float:
    return float(ssh(HOST, "date +%s.%N"))


def traffic(seconds: int, fill: float, **options) -> dict:
    """sglang-sim-traffic on the host against its server; its summary."""
    extra = " ".join("--%s %s" % (key.replace("_", "-"), value) for key, value in options.items())
    return json.loads(ssh(HOST, f"/opt/sglang-sim/bin/sglang-sim-traffic --url http://127.0.0.1:30000 "
                                f"--seconds {seconds} --fill {fill} --burst-every 1 --concurrency 256 --seed 7 {extra}"))


def watch_facts(**options) -> dict:
    args = " ".join(f"{key}={value}" for key, value in dict({"unit": "sglang.service"}, **options).items())
    return ansible(host_inventory[0], "llmserve.sglang.kv_watch_facts", args)[HOST]


host_inventory: list = []


def test_the_watch_runs_as_its_own_user_and_the_server_cannot_write_what_it_keeps(host, tmp_path):
    host_inventory[:] = [host]
    assert wait_for(lambda: len(windows()) >= 2, 30), ssh(HOST, f"journalctl -u {WATCH} -o cat --no-pager | tail -20")
    record = windows()[-1]
    assert record["serving_samples"] >= 2 and record["gpus"]["0"]["least_free_gib"] > 0, record
    assert record["pool_tokens"] > 0 and record["errors"] == {}, record
    owner = ssh(HOST, f"stat -L -c %U {STATE}").strip()
    assert owner not in ("root", "sglang"), owner
    # the watch's metrics: its own file in node_exporter's directory, which the server's user cannot write either
    assert wait_for(lambda: ssh(HOST, f"test -s {TEXTFILE} && echo yes || true").strip() == "yes", 30)
    assert ssh(HOST, f"stat -c %U {TEXTFILE}").strip() == owner
    assert 'llmserve_kv_verdict{unit="sglang.service",verdict="no_pin"} 1.0' in ssh(HOST, f"cat {TEXTFILE}")
    for path in (STATE, TEXTFILE, TEXTFILE_DIR, "/usr/local/lib/llmserve-kv-watch/llmserve_kv_watch.py",
                 "/usr/local/lib/llmserve-kv-watch/ansible_collections/llmserve/sglang/plugins/module_utils/watch/sampler.py"):
        assert ssh(HOST, f"runuser -u sglang -- test -w {path} && echo writable || echo no").strip() == "no", path
    assert "Permission denied" in ssh(HOST, f"runuser -u sglang -- sh -c 'echo x >> {STATE}' 2>&1 || true")
    # The server is started with --enable-metrics for it, and the tune pins a value (the watch's verdicts need one).
    run = tune(host, tmp_path)
    assert run.status == "successful", run.stdout[-6000:]
    assert report(tmp_path, HOST)["status"] == "tuned"


def test_traffic_that_never_fills_the_pool_is_not_enough_traffic_and_a_full_pool_gets_a_verdict(host):
    pinned = fact(HOST)
    # Bursts that reserve 0.15 of the pool: one long prompt (a quarter of the pool at most) on top stays under 0.6.
    traffic(6, 0.15)
    light = watch_facts(**FULL)
    assert light["verdict"] == "not_enough_traffic", light
    assert "the pool was at a token usage of 0.60 or more for " in light["reasons"][0], light
    result = traffic(8, 1.3)
    assert result["statuses"] == {"200": result["sent"]}, result
    full = watch_facts(**FULL)
    assert full["verdict"] in ("ok", "headroom"), full
    assert full["evidence"]["least_free_full_gib"] >= pinned["settings"]["safety_gib"], full


def test_a_near_miss_under_real_traffic_lowers_the_pin_and_verifies_it(host, tmp_path):
    before = fact(HOST)["mem_fraction_static"]
    started = host_time()
    target = f"{address(HOST)}:9100"
    with prometheus(tmp_path, target) as url:
        # A fifth of the requests ask for the logprobs of their prompt's last 2,048 tokens: 0.98 GiB of logits in a
        # full prefill chunk, more than the margin the stress load left.
        traffic(8, 1.3, logprob_share=0.2, logprob_tokens=2048)
        seen = windows(started)
        assert min(record["least_free_gib"] for record in seen if record["least_free_gib"] is not None) < 1.0, seen
        # The watch's next window says it in its metrics; node_exporter serves them, and Prometheus fires the alert.
        assert wait_for(lambda: any(alert["state"] == "firing" and alert["labels"]["alertname"] == "LlmserveKvNearMiss"
                                    for alert in alerts(url)), 60), \
            (alerts(url), ssh(HOST, f"cat {TEXTFILE}"), (tmp_path / "prometheus.log").read_text()[-3000:])
        fired = [alert for alert in alerts(url) if alert["labels"]["alertname"] == "LlmserveKvNearMiss"]
        assert [(alert["labels"]["instance"], alert["labels"]["unit"]) for alert in fired] == \
            [(target, "sglang.service")], fired
    run = tune(host, tmp_path, **JUDGE)
    assert run.status == "successful", run.stdout[-8000:]
    assert "a near miss under real traffic (the least free memory under traffic was" in run.stdout, run.stdout[-8000:]
    result = report(tmp_path, HOST)
    after = fact(HOST)["mem_fraction_static"]
    assert result["status"] == "tuned" and after < before - 0.004, (before, after, result["trials"])
    assert result["trials"][-1]["outcome"] == "stable" and running_fraction(HOST) == pytest.approx(after)


def test_headroom_under_plain_traffic_is_proposed_and_with_act_searched_below_the_value_that_missed(host, tmp_path):
    """Issue 32, item 7b: before, the search with act climbed straight back to the value that missed under the
    logprob traffic; it now stays below it (the pin records it: missed)."""
    pin = fact(HOST)
    lowered, missed = pin["mem_fraction_static"], pin["missed"]
    assert missed > lowered, pin
    started = invocation(HOST)
    traffic(8, 1.3)
    proposed = tune(host, tmp_path / "propose", **JUDGE, kv_tune_watch_headroom_steps=0)
    assert proposed.status == "successful", proposed.stdout[-8000:]
    assert "Proposal: headroom under real traffic" in proposed.stdout, proposed.stdout[-8000:]
    assert invocation(HOST) == started and fact(HOST)["mem_fraction_static"] == lowered
    acted = tune(host, tmp_path / "act", **JUDGE, kv_tune_watch_headroom_steps=0, kv_tune_watch_action="act")
    assert acted.status == "successful", acted.stdout[-8000:]
    assert "headroom under real traffic" in acted.stdout
    if lowered + RES < missed - RES + 1e-9:   # room below the miss: a search, capped one step below it
        assert "missed under real traffic on this fingerprint (the headroom watch): the search stays at or below" \
            in acted.stdout, acted.stdout[-8000:]
        assert lowered < fact(HOST)["mem_fraction_static"] < missed, report(tmp_path / "act", HOST)["trials"]
    else:                                     # the next step up is the miss: said, nothing restarts
        assert "the pin stays below it" in acted.stdout and fact(HOST)["mem_fraction_static"] == lowered


def test_the_capacity_report_shows_the_production_headroom_and_its_timeline(host, tmp_path):
    out = tmp_path / "capacity"
    run = play(host, playbook=REPO / "playbooks" / "capacity_report.yml",
               extravars={"capacity_report_output_dir": str(out), "capacity_report_watch_headroom_hours": 0.0005})
    assert run.status == "successful", run.stdout[-6000:]
    text = (out / f"{HOST}.md").read_text()
    assert "### Production headroom (the watch, llmserve-kv-watch-sglang.service)" in text, text
    assert "| least free under the stress load when verified |" in text and "| the pin's margin / one grid step |" in text
    assert (out / f"{HOST}-watch.png").stat().st_size > 10000


def test_the_watch_follows_a_restart_garbage_on_metrics_and_a_full_disk(host):
    watch_pid = ssh(HOST, f"systemctl show -p MainPID --value {WATCH}").strip()
    started = host_time()
    set_faults(HOST, metrics_garbage=True)
    try:
        assert wait_for(lambda: any(record["errors"].get("metrics") for record in windows(started)), 20)
    finally:
        set_faults(HOST)
    ssh(HOST, "systemctl restart sglang.service")
    assert wait_for(lambda: any(len(record["invocations"]) == 1 and record["serving_samples"]
                                and record["start"] > started for record in windows(started)), 60)
    seen = windows(started)
    assert len({i for record in seen for i in record["invocations"]}) == 2, seen
    assert "/metrics is not in Prometheus' text format" in ssh(HOST, f"journalctl -u {WATCH} -o cat --no-pager")
    # A full disk: a 64 KiB filesystem over the state directory, filled (the mount reaches the watch's namespace).
    # The windows wait in memory, and are written once there is room again.
    directory = STATE.rsplit("/", 1)[0]
    ssh(HOST, f"mount -t tmpfs -o size=64k,uid=$(id -u llmserve-kv-watch) tmpfs {directory} && "
              f"dd if=/dev/zero of={directory}/filler bs=4k count=16 2>/dev/null || true")

    def journal():
        return ssh(HOST, f"journalctl -u {WATCH} -o cat --no-pager")

    try:
        assert wait_for(lambda: "No space left on device" in journal(), 20), journal()[-2000:]
        ssh(HOST, f"rm -f {directory}/filler")
        assert wait_for(lambda: "written again, with the" in journal(), 20), journal()[-2000:]
        assert len(ssh(HOST, f"cat {STATE}").splitlines()) >= 2
    finally:
        ssh(HOST, f"umount {directory}", check=False)
    assert ssh(HOST, f"systemctl show -p MainPID --value {WATCH}").strip() == watch_pid


def test_kv_tune_pin_tokens_caps_a_pin_that_holds_without_a_restart(host, tmp_path):
    pinned, started = fact(HOST), invocation(HOST)
    run = tune(host, tmp_path, kv_tune_pin_tokens=True)
    assert run.status == "successful", run.stdout[-6000:]
    assert f"its pin now caps the pool at {pinned['tokens']:,} tokens, the verified one" in run.stdout, run.stdout[-6000:]
    assert invocation(HOST) == started and fact(HOST)["max_total_tokens"] == pinned["tokens"]
    assert f"--max-total-tokens {pinned['tokens']}" in ssh(HOST, "cat /etc/systemd/system/sglang.service.d/50-kv-tune.conf")


def test_a_pool_that_comes_back_smaller_at_the_same_value_is_named(host, tmp_path):
    pinned = fact(HOST)
    since = host_time()
    # Another process takes 1 GiB of the GPU before the server starts again: the same value, a pool smaller by f x 1
    # GiB (about a fifth of this 24 GB card's pool).
    set_faults(HOST, gpu_occupied_mib={"0": 1024})
    try:
        ssh(HOST, "systemctl restart sglang.service")
        assert wait_for(lambda: any(record["pool_tokens"] and record["pool_tokens"] < pinned["tokens"] * 0.9
                                    for record in windows(since)), 60), windows(since)
        # The cap pinned before (the larger pool) does not hide the smaller one.
        run = tune(host, tmp_path, kv_tune_pin_tokens=True)
    finally:
        set_faults(HOST)
    assert "the pool came back" in run.stdout and "smaller at the same value" in run.stdout, run.stdout[-8000:]
    # The re-tune measures what the GPU holds now: the value that keeps the margin with that memory gone, verified.
    assert run.status == "successful", run.stdout[-8000:]
    result = report(tmp_path, HOST)
    assert result["status"] == "tuned" and fact(HOST)["mem_fraction_static"] <= pinned["mem_fraction_static"]
    assert all(trial["min_free_gib"] >= pinned["settings"]["safety_gib"] for trial in result["trials"]
               if trial["outcome"] == "stable" and trial["f"] == result["after"]["mem_fraction_static"]), result
    assert running_fraction(HOST) == pytest.approx(fact(HOST)["mem_fraction_static"])

    # The re-tune pinned the pool it verified with that memory held. Freed, that memory would give the same value a
    # pool larger by about a fifth at the next start: the pin's cap keeps the verified one, and the next run finds
    # the pin holding (the cap is the pin's own, not a change of the server's arguments).
    retuned = fact(HOST)
    assert retuned["max_total_tokens"] == retuned["tokens"] == result["after"]["tokens"], retuned
    ssh(HOST, "systemctl restart sglang.service")
    started = invocation(HOST)

    def pools() -> set:
        return {record["pool_tokens"] for record in windows() if record["invocations"] == [started]
                and record["pool_tokens"]}

    assert wait_for(pools, 60), windows()[-3:]
    assert pools() == {retuned["tokens"]}, windows()[-3:]
    # The memory was freed indeed: this start had about 1 GiB more before the weights than the verified trial's.
    verified = [trial for trial in result["trials"] if trial["outcome"] == "stable"
                and trial["f"] == result["after"]["mem_fraction_static"]][-1]
    boots = [ansible(host, "llmserve.sglang.sglang_startup_facts", f"unit=sglang.service invocation_id={start}")[HOST]
             for start in (verified["invocation_id"], started)]
    assert boots[1]["pre_load_free_gib"] > boots[0]["pre_load_free_gib"] + 0.9, boots
    again = tune(host, tmp_path / "again", kv_tune_pin_tokens=True)
    assert again.status == "successful", again.stdout[-6000:]
    assert f"({retuned['tokens']:,} KV tokens, capped there)" in again.stdout, again.stdout[-6000:]
    assert invocation(HOST) == started

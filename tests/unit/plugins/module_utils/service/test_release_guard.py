# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""release_guard: the manifest, and the host script's decision (wait, retire, revert) and its revert, on files in a
temporary directory (the script's own functions, as the timer and the module run them)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ansible_collections.llmserve.sglang.plugins.module_utils.service import kv_pin, release_guard

RUN = "1f2e3d4c"
UNITS = ["sglang@a.service", "sglang@b.service"]
NOW = 1_800_000_000.0
SCRIPT = release_guard.functions()


def lock(run=RUN, expires=NOW + 600):
    return json.dumps({"run_id": run, "controller": "ops1 pid 7", "renewed": 1, "expires": expires}).encode()


def facts(**pins):
    """The fact file: unit -> (value, the fingerprint it was verified on)."""
    return json.dumps({unit: {"mem_fraction_static": value, "fingerprint_hash": digest * 64}
                       for unit, (value, digest) in pins.items()}).encode()


BEFORE = facts(**{"sglang@a.service": (0.91, "a"), "sglang@b.service": (0.9, "b")})


@pytest.fixture
def guard(tmp_path):
    """A manifest of two units whose paths all lie under tmp_path, with the fact file kept before the upgrade."""
    data = release_guard.manifest(RUN, UNITS, str(tmp_path / "venv"), str(tmp_path / "sglang_kv.fact"), {}, 30)
    data["locks"] = [str(tmp_path / ("%s.lock" % unit)) for unit in UNITS]
    data["trials"] = [str(tmp_path / "run" / ("%s.d" % unit) / "90-kv-trial.conf") for unit in UNITS]
    pins = [str(tmp_path / "etc" / ("%s.d" % unit) / "50-kv-tune.conf") for unit in UNITS]
    state = tmp_path / "state" / RUN
    state.mkdir(parents=True)
    (state / "kept-0").write_text("pin a 0.910\n")
    (state / "kept-2").write_bytes(BEFORE)
    data["saved"] = {pins[0]: str(state / "kept-0"), pins[1]: None, data["fact_path"]: str(state / "kept-2")}
    (state / "manifest.json").write_text(release_guard.manifest_text(data))
    return data


def files_of(mapping):
    return mapping.get


def test_the_manifest_names_each_units_lock_trial_and_this_runs_trial_timer():
    data = release_guard.manifest(RUN, UNITS, "/opt/sglang/venv", kv_pin.FACT_PATH, {}, 30)
    assert data["snapshot"] == "/opt/sglang/venv.before-1f2e3d4c"
    assert data["locks"] == ["/run/llmserve/kv-tune-sglang@a.service.lock",
                             "/run/llmserve/kv-tune-sglang@b.service.lock"]
    assert data["trials"][1] == "/run/systemd/system/sglang@b.service.d/90-kv-trial.conf"
    assert data["trial_timers"] == ["llmserve-kv-revert-1f2e3d4c-sglang-a.timer",
                                    "llmserve-kv-revert-1f2e3d4c-sglang-b.timer"]
    assert release_guard.files_to_keep(UNITS, kv_pin.FACT_PATH) == [
        "/etc/systemd/system/sglang@a.service.d/50-kv-tune.conf",
        "/etc/systemd/system/sglang@b.service.d/50-kv-tune.conf", kv_pin.FACT_PATH]


@pytest.mark.parametrize("args, message", [
    ((RUN, [], "/opt/sglang/venv", kv_pin.FACT_PATH, {}, 30), "at least one"),
    ((RUN, ["sglang"], "/opt/sglang/venv", kv_pin.FACT_PATH, {}, 30), "systemd service name"),
    (("ABC", UNITS, "/opt/sglang/venv", kv_pin.FACT_PATH, {}, 30), "run"),
    ((RUN, UNITS, "opt/sglang/venv", kv_pin.FACT_PATH, {}, 30), "absolute"),
    ((RUN, UNITS, "/opt/sglang/venv/", kv_pin.FACT_PATH, {}, 30), "trailing slash"),
    ((RUN, UNITS, "/", kv_pin.FACT_PATH, {}, 30), "absolute"),
    ((RUN, UNITS, "/opt/sglang/venv", kv_pin.FACT_PATH, {}, 4), "interval must lie in"),
])
def test_a_manifest_of_bad_input_is_refused_with_what_is_wrong(args, message):
    with pytest.raises(kv_pin.PinError, match=message):
        release_guard.manifest(*args)


def test_it_waits_while_the_run_holds_every_lock(guard):
    assert SCRIPT["decide"](guard, files_of({path: lock() for path in guard["locks"]}), NOW) == "wait"


@pytest.mark.parametrize("locks", [
    {0: lock(expires=NOW - 1)},            # lapsed: the controller died
    {0: None},                             # gone: released
    {0: lock(run="9a8b7c6d")},             # another run's
    {0: b"{not json"},                     # unreadable: protects nothing
])
def test_a_lock_that_lapsed_is_released_or_another_runs_puts_the_host_back(guard, locks):
    files = {path: lock() for path in guard["locks"]}
    files.update({guard["locks"][index]: text for index, text in locks.items()})
    files[guard["fact_path"]] = BEFORE
    files[guard["saved"][guard["fact_path"]]] = BEFORE
    assert SCRIPT["decide"](guard, files_of(files), NOW) == "revert"


def test_every_server_pinned_again_since_retires_the_guard_without_a_revert(guard):
    files = {guard["fact_path"]: facts(**{"sglang@a.service": (0.93, "c"), "sglang@b.service": (0.92, "c")}),
             guard["saved"][guard["fact_path"]]: BEFORE}
    assert SCRIPT["decide"](guard, files_of(files), NOW) == "retire"


@pytest.mark.parametrize("now_facts, trial", [
    (facts(**{"sglang@a.service": (0.93, "c"), "sglang@b.service": (0.9, "b")}), False),   # b on its old pin
    (facts(**{"sglang@a.service": (0.93, "c")}), False),                                  # b has no pin (reset)
    (facts(**{"sglang@a.service": (0.93, "c"), "sglang@b.service": (0.92, "c")}), True),   # a trial pending
    (b"", False),                                                                          # the fact file emptied
    # the same pins written again without their pool cap (the rollout does that before the new release starts):
    # verified on the fingerprint of before, not on the new release
    (json.dumps({unit: {"mem_fraction_static": value, "fingerprint_hash": digest * 64, "uncapped": True}
                 for unit, (value, digest) in {"sglang@a.service": (0.91, "a"),
                                               "sglang@b.service": (0.9, "b")}.items()}).encode(), False),
])
def test_a_server_not_pinned_again_or_a_trial_pending_puts_the_host_back(guard, now_facts, trial):
    files = {guard["fact_path"]: now_facts, guard["saved"][guard["fact_path"]]: BEFORE}
    if trial:
        files[guard["trials"][1]] = b"[Service]\n"
    assert SCRIPT["decide"](guard, files_of(files), NOW) == "revert"


def test_a_unit_that_had_no_pin_before_counts_as_pinned_again_once_it_has_one(guard):
    guard["saved"][guard["fact_path"]] = None
    files = {guard["fact_path"]: facts(**{"sglang@a.service": (0.93, "c"), "sglang@b.service": (0.92, "c")})}
    assert SCRIPT["decide"](guard, files_of(files), NOW) == "retire"


def venv(path, version):
    site = path / "lib" / "python3.11" / "site-packages" / ("sglang-%s.dist-info" % version)
    site.mkdir(parents=True)
    (site / "METADATA").write_text("Name: sglang\nVersion: %s\n" % version)


def test_revert_puts_the_release_pins_and_facts_back_and_restarts_the_units(guard, tmp_path):
    venv(tmp_path / "venv", "0.5.10")
    venv(tmp_path / "venv.before-1f2e3d4c", "0.5.9")
    pins = sorted(path for path in guard["saved"] if path.endswith(".conf"))
    for path in pins + guard["trials"]:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write("written by the re-tune\n")
    (tmp_path / "sglang_kv.fact").write_bytes(facts(**{"sglang@a.service": (0.93, "c")}))
    (tmp_path / os.path.basename(guard["locks"][0])).write_bytes(lock(expires=NOW - 5))    # lapsed under a live run
    (tmp_path / os.path.basename(guard["locks"][1])).write_bytes(lock(run="99999999"))
    calls = []
    SCRIPT["revert"](guard, lambda *argv: calls.append(argv) or 0, str(tmp_path / "state"))
    assert os.listdir(tmp_path / "venv" / "lib" / "python3.11" / "site-packages") == ["sglang-0.5.9.dist-info"]
    assert sorted(os.listdir(tmp_path)) == ["etc", "run", os.path.basename(guard["locks"][1]), "sglang_kv.fact",
                                            "state", "venv"]   # no copy left
    assert (tmp_path / "etc" / "sglang@a.service.d" / "50-kv-tune.conf").read_text() == "pin a 0.910\n"
    assert not os.path.exists(pins[1])                  # b had no pin before
    assert (tmp_path / "sglang_kv.fact").read_bytes() == BEFORE
    assert not any(os.path.exists(path) for path in guard["trials"])
    assert not os.path.exists(tmp_path / "state" / RUN)
    # the run's lock released, so that a run still alive fails at its next step; another run's left alone
    assert not os.path.exists(guard["locks"][0]) and os.path.exists(guard["locks"][1])
    # stopped first (nothing runs while the venv moves), restarted last (a start by the run's dying worker
    # meanwhile read the files of before they were back), the guard's own timer stopped
    assert calls == [("systemctl", "stop", *UNITS),
                     ("systemctl", "stop", *guard["trial_timers"]),
                     ("systemctl", "daemon-reload"),
                     ("systemctl", "reset-failed", *UNITS),
                     ("systemctl", "restart", "--no-block", *UNITS),
                     ("systemctl", "disable", "--now", "--no-block", "llmserve-release-guard-1f2e3d4c.timer"),
                     ("systemctl", "daemon-reload")]


def test_restoring_the_release_twice_changes_nothing_the_second_time(guard, tmp_path):
    venv(tmp_path / "venv", "0.5.10")
    venv(tmp_path / "venv.before-1f2e3d4c", "0.5.9")
    assert SCRIPT["restore_release"](guard) is True
    assert SCRIPT["restore_release"](guard) is False
    assert os.listdir(tmp_path / "venv" / "lib" / "python3.11" / "site-packages") == ["sglang-0.5.9.dist-info"]


def test_retire_removes_the_copy_the_state_and_the_timer(guard, tmp_path):
    venv(tmp_path / "venv", "0.5.10")
    venv(tmp_path / "venv.before-1f2e3d4c.partial", "0.5.9")
    venv(tmp_path / "venv.before-1f2e3d4c", "0.5.9")
    guard["unit_dir"] = str(tmp_path / "units")
    for name, text in release_guard.unit_texts(RUN, 30).items():
        os.makedirs(guard["unit_dir"], exist_ok=True)
        with open(os.path.join(guard["unit_dir"], name), "w", encoding="utf-8") as handle:
            handle.write(text)
    calls = []
    SCRIPT["retire"](guard, lambda *argv: calls.append(argv) or 0, str(tmp_path / "state"))
    assert sorted(os.listdir(tmp_path)) == ["state", "units", "venv"]
    assert os.listdir(tmp_path / "state") == [] and os.listdir(tmp_path / "units") == []
    assert calls == [("systemctl", "disable", "--now", "--no-block", "llmserve-release-guard-1f2e3d4c.timer"),
                     ("systemctl", "daemon-reload")]


def test_the_timer_runs_the_check_every_interval_and_after_a_reboot():
    units = release_guard.unit_texts(RUN, 30)
    assert sorted(units) == ["llmserve-release-guard-1f2e3d4c.service", "llmserve-release-guard-1f2e3d4c.timer"]
    assert "ExecStart=/usr/local/sbin/llmserve-release-guard 1f2e3d4c check\n" in units[sorted(units)[0]]
    timer = units["llmserve-release-guard-1f2e3d4c.timer"]
    for line in ("OnActiveSec=30", "OnBootSec=30", "OnUnitActiveSec=30", "WantedBy=timers.target"):
        assert line + "\n" in timer


def test_the_installed_script_is_valid_python_run_by_the_given_interpreter(tmp_path):
    text = release_guard.script_text(sys.executable)
    assert text.startswith("#!%s\n" % sys.executable)
    script = tmp_path / "llmserve-release-guard"
    script.write_text(text)
    compile(text, str(script), "exec")
    # a run with nothing kept says so (and stops its timer: systemctl is not here, which it survives)
    result = subprocess.run([sys.executable, "-c", "import runpy, sys; sys.argv = %r; "
                             "runpy.run_path(%r, run_name='__main__')" % ([str(script), RUN, "check"], str(script))],
                            capture_output=True, text=True, check=False, env={"PATH": str(tmp_path)})
    assert "run 1f2e3d4c has nothing kept" in result.stdout, result


# -- the controller's heartbeat, host side ----------------------------------------------------------------------

def test_a_beat_renews_only_the_runs_live_locks_for_the_lease_keeping_what_else_they_say(guard):
    files = {guard["locks"][0]: lock(expires=NOW + 4 * 3600), guard["locks"][1]: lock(run="99999999")}
    written = {}
    assert SCRIPT["beat"](guard, files.get, NOW, 90, written.__setitem__) == 1
    assert list(written) == [guard["locks"][0]]
    renewed = json.loads(written[guard["locks"][0]])
    assert renewed == {"run_id": RUN, "controller": "ops1 pid 7", "renewed": int(NOW), "expires": int(NOW + 90)}
    # what the timer then reads: held for 90 s, and not one second more
    files.update(written)
    assert SCRIPT["lock_held"](files[guard["locks"][0]], NOW + 89, RUN)
    assert not SCRIPT["lock_held"](files[guard["locks"][0]], NOW + 90, RUN)


@pytest.mark.parametrize("locks", [[None, None], [lock(expires=NOW - 1), lock(run="99999999")]],
                         ids=["released", "lapsed or another run's"])
def test_a_beat_does_not_bring_back_a_lock_that_the_run_lost(guard, locks):
    written = {}
    assert SCRIPT["beat"](guard, dict(zip(guard["locks"], locks)).get, NOW, 90, written.__setitem__) == 0
    assert written == {}


def test_gone_releases_the_runs_locks_lapsed_or_not_and_leaves_another_runs(guard, tmp_path):
    mine, other = guard["locks"]
    (tmp_path / os.path.basename(mine)).write_bytes(lock(expires=NOW - 5))
    (tmp_path / os.path.basename(other)).write_bytes(lock(run="99999999"))
    SCRIPT["release"](guard, SCRIPT["read"])
    assert not os.path.exists(mine) and os.path.exists(other)


def run_script(tmp_path, *argv):
    """The installed script run as the timer or the heartbeat runs it, its state dir under tmp_path."""
    script = tmp_path / "llmserve-release-guard"
    script.write_text(release_guard.script_text(sys.executable).replace(
        'STATE_DIR = "/var/lib/llmserve/release-guard"', 'STATE_DIR = %r' % str(tmp_path / "state")))
    return subprocess.run([sys.executable, str(script), RUN, *argv], capture_output=True, text=True, check=False,
                          env={"PATH": str(tmp_path)})


def test_the_script_beat_says_whether_anything_is_left_to_keep_alive(guard, tmp_path):
    for path in guard["locks"]:
        with open(path, "wb") as handle:
            handle.write(lock(expires=9e9))
    assert run_script(tmp_path, "beat", "90").returncode == 0
    assert json.loads((tmp_path / os.path.basename(guard["locks"][0])).read_text())["expires"] < 9e9
    for path in guard["locks"]:
        os.unlink(path)
    assert run_script(tmp_path, "beat", "90").returncode == release_guard.NOTHING_TO_KEEP
    (tmp_path / "state" / RUN / "manifest.json").unlink()      # retired
    assert run_script(tmp_path, "beat", "90").returncode == release_guard.NOTHING_TO_KEEP


def test_gone_after_the_guard_retired_does_nothing(tmp_path):
    result = run_script(tmp_path, "gone")
    assert (result.returncode, result.stdout) == (0, ""), result


@pytest.mark.parametrize("lease", [0, 20, 3600])
def test_a_controller_lease_of_0_or_within_its_bounds_is_taken(lease):
    assert release_guard.check_controller_lease(lease) == lease


@pytest.mark.parametrize("lease", [-1, 5, 19, 3601])
def test_a_controller_lease_out_of_its_bounds_is_refused(lease):
    with pytest.raises(kv_pin.PinError, match="controller_lease must be 0"):
        release_guard.check_controller_lease(lease)


def test_the_script_gone_releases_the_runs_locks_and_starts_the_check_at_once(guard, tmp_path):
    systemctl = tmp_path / "systemctl"
    systemctl.write_text("#!/bin/sh\necho \"$@\" >> %s\n" % (tmp_path / "calls"))
    systemctl.chmod(0o755)
    for path in guard["locks"]:
        with open(path, "wb") as handle:
            handle.write(lock(expires=9e9))
    result = run_script(tmp_path, "gone")
    assert result.returncode == 0, result
    assert "the controller of run 1f2e3d4c is gone" in result.stdout
    assert not any(os.path.exists(path) for path in guard["locks"])
    # the check runs as the timer's service, never beside it
    assert (tmp_path / "calls").read_text() == "start --no-block llmserve-release-guard-1f2e3d4c.service\n"

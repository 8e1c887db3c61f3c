# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The host's way back to the SGLang release and pins it ran before an upgrade, for a controller that dies in the
middle of one (module release_guard). Pure and stdlib only.

Before the rollout installs a new release, the guard keeps a copy of the root-owned venv beside it
(``<venv>.before-<run>``, same file system, so that going back is a rename), a copy of each server's pin drop-in and
of the fact file, and a manifest of it all under ``/var/lib/llmserve/release-guard/<run>/``. A timer
(``/etc/systemd/system/llmserve-release-guard-<run>.timer``, enabled: it survives a reboot, after which the locks in
/run are gone and the host goes back) runs :data:`SCRIPT` every ``interval`` seconds. The script does nothing
while the rollout's run holds every unit's tuning lock (the rollout takes it before its upgrade, and the re-tune
renews it with every step); once a lock lapses (its controller is gone), it either retires (every server was pinned
on another fingerprint since: a value verified on the new release, under load) or puts the host back: the servers
stopped, this run's trials and their timers removed, the old venv and pins restored, the servers started. A rollout
that ends (kept, re-tuned or rolled back) retires the guard itself.

:data:`SCRIPT` is the whole logic, host side and controller side: the module runs its functions in-process (exec of
the same text) for ``restored`` and ``disarmed``, and the timer runs the file it installs.
"""
from __future__ import annotations

import json
import os
from typing import Any

from ansible_collections.llmserve.sglang.plugins.module_utils.service import kv_pin

STATE_DIR = "/var/lib/llmserve/release-guard"
SCRIPT_PATH = "/usr/local/sbin/llmserve-release-guard"
UNIT_DIR = "/etc/systemd/system"
TIMER_PREFIX = "llmserve-release-guard-"
# Bounds of the timer's period (seconds): how soon after a lock lapses the host goes back.
INTERVAL_BOUNDS = (5, 3600)
# The controller's heartbeat (plugin_utils/release_heartbeat.py): how long the run's locks last without a beat (the
# default, and the bounds; 0: no heartbeat, the locks last the leases the rollout's steps give them).
CONTROLLER_LEASE = 90
LEASE_BOUNDS = (20, 3600)
# What the host script's beat exits with when nothing of the run's is left to keep alive (retired, locks gone).
NOTHING_TO_KEEP = 3

SCRIPT = r'''
# Installed by llmserve.sglang (module release_guard). Run by the timer llmserve-release-guard-RUN.timer
# while rollout.yml upgrades this host's SGLang: once the rollout's lock on a unit lapses (its controller is gone),
# put the host back on the release and pins it ran before, unless every server was pinned on the new release since.
#   llmserve-release-guard RUN check          the timer's: wait, retire or put the host back
#   llmserve-release-guard RUN beat SECONDS   the controller's heartbeat: the run's locks last SECONDS from now
#                                             (exit 3: nothing of the run's to keep alive, the beats stop)
#   llmserve-release-guard RUN gone           the controller is gone: the run's locks released, the check started
import json
import os
import shutil
import subprocess
import sys
import time

STATE_DIR = "/var/lib/llmserve/release-guard"
UNIT_DIR = "/etc/systemd/system"


def say(text):
    print("llmserve-release-guard: " + text, flush=True)


def read(path):
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def load(run, state_dir=STATE_DIR):
    """The run's manifest, None when it has none (retired)."""
    text = read(os.path.join(state_dir, run, "manifest.json"))
    return None if text is None else json.loads(text.decode("utf-8"))


def lock_of(text):
    """A lock file's data: None for no file or one that is not a JSON object."""
    try:
        lock = json.loads(text.decode("utf-8"))
    except (AttributeError, ValueError):
        return None
    return lock if isinstance(lock, dict) else None


def held(lock, now, run):
    """Whether a lock (lock_of) is run's, unexpired."""
    try:
        return lock is not None and lock.get("run_id") == run and float(lock["expires"]) > now
    except (KeyError, TypeError, ValueError):
        return False


def lock_held(text, now, run):
    """Whether a lock file's text is run's, unexpired."""
    return held(lock_of(text), now, run)


def entries(text):
    """The fact file's entries by unit ({} for none or an unreadable file)."""
    try:
        facts = json.loads(text.decode("utf-8"))
    except (AttributeError, ValueError):
        return {}
    return facts if isinstance(facts, dict) else {}


def fingerprint_of(entry):
    return entry.get("fingerprint_hash") if isinstance(entry, dict) else None


def repinned(manifest, saved_facts, facts_now):
    """Whether every server was pinned on another fingerprint since the guard was armed: the re-tune's pin, verified
    on the new release. The same pin written again (the rollout drops its pool cap before the new release starts)
    keeps the fingerprint it was verified on."""
    before, now = entries(saved_facts), entries(facts_now)
    return all(fingerprint_of(now.get(unit)) not in (None, fingerprint_of(before.get(unit)))
               for unit in manifest["units"])


def decide(manifest, files, now):
    """wait (the rollout holds every lock), retire (every server pinned on another fingerprint, no trial pending)
    or revert. ``files(path)`` reads a file's bytes (None: absent)."""
    run = manifest["run_id"]
    if all(lock_held(files(path), now, run) for path in manifest["locks"]):
        return "wait"
    kept = manifest["saved"].get(manifest["fact_path"])
    saved = files(kept) if kept else None
    if not any(files(path) is not None for path in manifest["trials"]) \
            and repinned(manifest, saved, files(manifest["fact_path"])):
        return "retire"
    return "revert"


def beat(manifest, files, now, lease, write):
    """The controller lives: each lock the run still holds lasts ``lease`` seconds from ``now`` (its other fields
    kept). A lock that lapsed or another run's is left alone. Returns how many locks the run holds."""
    renewed = 0
    for path in manifest["locks"]:
        lock = lock_of(files(path))
        if held(lock, now, manifest["run_id"]):
            lock.update(renewed=int(now), expires=int(now + lease))
            write(path, (json.dumps(lock, sort_keys=True) + "\n").encode("utf-8"))
            renewed += 1
    return renewed


def release(manifest, files):
    """The controller is gone: the run's locks removed, lapsed or not (another run's stay)."""
    for path in manifest["locks"]:
        if (lock_of(files(path)) or {}).get("run_id") == manifest["run_id"]:
            put_back(path, None)


def restore_release(manifest):
    """The venv kept before the upgrade back in its place (renames, then the new one removed); nothing when it is
    back already."""
    venv, kept = manifest["venv"], manifest["snapshot"]
    if not os.path.isdir(kept):
        return False
    failed = "%s.failed-%s" % (venv, manifest["run_id"])
    if os.path.lexists(venv):
        os.rename(venv, failed)
    os.rename(kept, venv)
    shutil.rmtree(failed, ignore_errors=True)
    return True


def put_back(path, data):
    """``path`` as it was: ``data`` written atomically (root-owned, 0644), or removed when it did not exist."""
    if data is None:
        if os.path.lexists(path):
            os.unlink(path)
        return
    os.makedirs(os.path.dirname(path), 0o755, exist_ok=True)
    tmp = "%s.release-guard.%d" % (path, os.getpid())
    with open(tmp, "wb") as handle:
        handle.write(data)
    os.chmod(tmp, 0o644)
    os.rename(tmp, path)


def retire(manifest, system, state_dir=STATE_DIR):
    """The kept venv and the guard's files removed, its timer stopped and its units removed."""
    shutil.rmtree(manifest["snapshot"], ignore_errors=True)
    shutil.rmtree(manifest["snapshot"] + ".partial", ignore_errors=True)
    shutil.rmtree(os.path.join(state_dir, manifest["run_id"]), ignore_errors=True)
    remove_units(manifest["run_id"], system, manifest.get("unit_dir", UNIT_DIR))


def remove_units(run, system, unit_dir=UNIT_DIR):
    """The guard's timer stopped and disabled, its unit files removed."""
    timer = os.path.join(unit_dir, "llmserve-release-guard-%s.timer" % run)
    system("systemctl", "disable", "--now", "--no-block", os.path.basename(timer))
    for path in (timer, timer[:-len(".timer")] + ".service"):
        if os.path.lexists(path):
            os.unlink(path)
    system("systemctl", "daemon-reload")


def revert(manifest, system, state_dir=STATE_DIR):
    """The host back on the release and pins it ran before the upgrade, its servers started on them."""
    units = manifest["units"]
    system("systemctl", "stop", *units)
    system("systemctl", "stop", *manifest["trial_timers"])
    for path in manifest["trials"]:
        put_back(path, None)
    restore_release(manifest)
    for path, kept in sorted(manifest["saved"].items()):
        put_back(path, read(kept) if kept else None)
    system("systemctl", "daemon-reload")
    system("systemctl", "reset-failed", *units)
    # restart, not start: a server that the run's dying worker restarted meanwhile (its own revert of a trial) must
    # not go on running what it read before the files were back.
    system("systemctl", "restart", "--no-block", *units)
    # A run that still lives (its lock lapsed under it) then fails at its next step instead of going on, and
    # reporting, as if the host ran the new release.
    release(manifest, read)
    retire(manifest, system, state_dir)


def run_systemctl(*argv):
    try:
        return subprocess.call(list(argv))
    except OSError as exc:
        say("%s: %s" % (" ".join(argv), exc))
        return 127


def main(argv):
    run, command = argv[1], argv[2]
    manifest = load(run)
    if command == "beat":
        if manifest is None or not beat(manifest, read, time.time(), int(argv[3]), put_back):
            return 3
        return 0
    if command == "gone" and manifest is None:
        return 0            # the rollout retired the guard before its controller ended: nothing to do
    if manifest is None:
        say("run %s has nothing kept (retired)" % run)
        remove_units(run, run_systemctl)
        return 0
    if command == "gone":
        # The check itself runs as the timer's service: systemd never runs two of them at once.
        say("the controller of run %s is gone: its locks on %s are released" % (run, " ".join(manifest["units"])))
        release(manifest, read)
        run_systemctl("systemctl", "start", "--no-block", "llmserve-release-guard-%s.service" % run)
        return 0
    action = decide(manifest, read, time.time())
    if action == "wait":
        return 0
    if action == "retire":
        say("every server of %s is pinned on the new release: the copy of the release before is removed"
            % " ".join(manifest["units"]))
        retire(manifest, run_systemctl)
    else:
        say("the rollout's lock on %s lapsed before every server was verified on the new release: back to the "
            "release and pins of before the upgrade" % " ".join(manifest["units"]))
        revert(manifest, run_systemctl)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
'''


def script_text(interpreter: str) -> str:
    """The file the timer runs, with the interpreter that runs it (root's: the one the module runs under)."""
    return "#!%s%s" % (interpreter, SCRIPT)


def unit_texts(run_id: str, interval: int) -> dict[str, str]:
    """The guard's service and timer (file name -> text), enabled so that a reboot does not lose them."""
    kv_pin.check_run_id(run_id)
    description = "Put SGLang and the KV pins back if rollout run %s dies" % run_id
    name = TIMER_PREFIX + run_id
    return {
        name + ".service": "# Installed by llmserve.sglang (module release_guard); removed when the guard retires.\n"
                           "[Unit]\nDescription=%s\n\n[Service]\nType=oneshot\nExecStart=%s %s check\n"
                           % (description, SCRIPT_PATH, run_id),
        name + ".timer": "# Installed by llmserve.sglang (module release_guard); removed when the guard retires.\n"
                         "[Unit]\nDescription=%s\n\n[Timer]\nOnActiveSec=%d\nOnBootSec=%d\nOnUnitActiveSec=%d\n"
                         "AccuracySec=1s\n\n[Install]\nWantedBy=timers.target\n"
                         % (description, interval, interval, interval),
    }


def functions() -> dict[str, Any]:
    """The script's functions, for the module's own use of them (one copy of the logic)."""
    namespace: dict[str, Any] = {"__name__": "llmserve_release_guard"}
    exec(compile(SCRIPT, SCRIPT_PATH, "exec"), namespace)  # pylint: disable=exec-used
    return namespace


def manifest(run_id: str, units: list[str], venv: str, fact_path: str, saved: dict[str, str | None],
             interval: int) -> dict[str, Any]:
    """What the guard keeps and watches for run ``run_id`` on the host's ``units``: each unit's lock, trial drop-in
    and this run's trial timer, the files saved before the upgrade (path -> its copy under the state dir, None for a
    file that did not exist), the venv and its copy."""
    kv_pin.check_run_id(run_id)
    unit_paths = [kv_pin.paths(unit, run_id) for unit in units]
    if not units:
        raise kv_pin.PinError("units must name at least one of the host's SGLang units")
    if not os.path.isabs(venv) or venv.rstrip("/") != venv or venv == "/":
        raise kv_pin.PinError("venv must be an absolute path without a trailing slash, got %r" % (venv,))
    low, high = INTERVAL_BOUNDS
    if not low <= interval <= high:
        raise kv_pin.PinError("interval must lie in [%d, %d] seconds, got %d" % (low, high, interval))
    return {"run_id": run_id, "units": list(units), "venv": venv, "snapshot": snapshot_path(venv, run_id),
            "fact_path": fact_path, "saved": dict(saved), "interval": interval,
            "locks": [paths["lock"] for paths in unit_paths], "trials": [paths["trial"] for paths in unit_paths],
            "trial_timers": [paths["revert_unit"] + ".timer" for paths in unit_paths], "unit_dir": UNIT_DIR}


def snapshot_path(venv: str, run_id: str) -> str:
    return "%s.before-%s" % (venv, kv_pin.check_run_id(run_id))


def files_to_keep(units: list[str], fact_path: str) -> list[str]:
    """Each unit's pin drop-in, then the fact file: what a revert puts back as it was."""
    return [kv_pin.paths(unit)["pin"] for unit in units] + [fact_path]


def manifest_text(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=1, sort_keys=True) + "\n"


def check_controller_lease(lease: int) -> int:
    low, high = LEASE_BOUNDS
    if lease != 0 and not low <= lease <= high:
        raise kv_pin.PinError("controller_lease must be 0 (no heartbeat) or lie in [%d, %d] seconds, got %d"
                              % (low, high, lease))
    return lease

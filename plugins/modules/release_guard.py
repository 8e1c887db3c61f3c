#!/usr/bin/python
# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

DOCUMENTATION = r"""
module: release_guard
short_description: Keep the host's SGLang release and pins during an upgrade, and put them back if the controller dies
version_added: 1.0.0
description:
  - Used by the P(llmserve.sglang.rollout#role) role around an upgrade of SGLang, so that a controller that dies in
    the middle of one (killed, its network cut) never leaves a server on a release and value that no load verified.
  - O(state=armed), before the new release is installed, keeps a copy of the root-owned virtualenv beside it
    (C(<venv>.before-<run_id>), on the same file system), a copy of each unit's pin drop-in and of the fact file, and
    enables a timer C(/etc/systemd/system/llmserve-release-guard-<run_id>.timer) that runs
    C(/usr/local/sbin/llmserve-release-guard) every O(interval) seconds, and after a reboot (the locks under C(/run)
    are gone then, and the host goes back). Nothing is kept when the virtualenv already holds O(version).
  - The timer does nothing while run O(run_id) holds the tuning lock of every unit in O(units) (the rollout takes the
    locks before its upgrade; the re-tune renews them with every step, and the controller's heartbeat, see
    O(controller_lease)). Once a lock lapses or is released, it removes its copy when every unit was pinned on
    another fingerprint since (the re-tune's pin, a value verified on the new release under load; the same pin
    written again does not count); otherwise it stops the units, removes this run's trials and their timers, puts
    the virtualenv, the pin drop-ins and the fact file back as they were, restarts the units and releases the run's
    locks (a run still alive then fails at its next step).
  - O(state=restored) puts the kept virtualenv back in place (no restart; the roll-back restarts the units on their
    pins) and retires the guard. O(state=disarmed) retires it (removes the copy and the timer).
  - Only the SGLang release is kept; a driver or a model is not.
author:
  - llmserve.sglang contributors (@llmserve)
requirements:
  - systemd (C(systemctl)) and C(cp) on the managed host, as root.
extends_documentation_fragment:
  - llmserve.sglang.attributes
attributes:
  check_mode:
    support: none
  diff_mode:
    support: none
options:
  run_id:
    description: The rollout's run (8 lower-case hex digits), which holds the units' tuning locks.
    type: str
    required: true
  state:
    description: What to do (see the description).
    type: str
    required: true
    choices: [armed, restored, disarmed]
  units:
    description: The host's SGLang units that the upgrade restarts. Required with O(state=armed).
    type: list
    elements: str
  venv:
    description: The root-owned virtualenv that the units run. Required with O(state=armed).
    type: path
  version:
    description: The SGLang version the upgrade installs; nothing is kept when the virtualenv holds it already.
      Required with O(state=armed).
    type: str
  interval:
    description: Seconds between the timer's checks of the locks (5 to 3600).
    type: int
    default: 30
  fact_path:
    description: The tuner's fact file, put back with the pins.
    type: path
    default: /etc/ansible/facts.d/sglang_kv.fact
  controller_lease:
    description:
      - With O(state=armed), the controller's heartbeat (the action, on the controller) keeps the run's locks for
        this many seconds at a time while C(ansible-playbook) lives (20 to 3600), renewing them four times per lease
        through the task's connection.
      - Once C(ansible-playbook) is gone (killed, interrupted, a cancelled job), it tells the host, which goes back at
        once; where the controller's machine or network died, the host goes back when the lease ends.
      - V(0) starts no heartbeat; the locks then last the leases that the rollout's steps give them (hours during
        an install).
    type: int
    default: 90
notes:
  - The heartbeat is a process of its own on the controller, one per host being upgraded; it ends when the guard is
    retired. It needs a connection that starts a new client per command (ssh, the default, or local); over
    C(paramiko_ssh) none is started, with a warning.
  - The copy takes as much disk as the virtualenv (C(cp --reflink=auto) shares the blocks where the file system can);
    O(state=armed) fails, before it changes anything, where the file system lacks the room.
seealso:
  - module: llmserve.sglang.kv_trial
"""

EXAMPLES = r"""
- name: Keep SGLang and the pins before the upgrade to 0.5.10
  llmserve.sglang.release_guard:
    run_id: 1f2e3d4c
    state: armed
    units: [sglang.service]
    venv: /opt/sglang/venv
    version: 0.5.10
    controller_lease: 90

- name: Back on the release of before (the roll-back then restarts the units on their pins)
  llmserve.sglang.release_guard:
    run_id: 1f2e3d4c
    state: restored

- name: Every server verified on the new release
  llmserve.sglang.release_guard:
    run_id: 1f2e3d4c
    state: disarmed
"""

RETURN = r"""
armed:
  description: Whether a guard of this run is armed after the call.
  returned: always
  type: bool
  sample: true
why:
  description: What the call did, in words.
  returned: always
  type: str
  sample: kept sglang 0.5.9 (/opt/sglang/venv, 7.9 GiB) until the upgrade to 0.5.10 is verified
kept:
  description: The copy of the virtualenv (V(null) when none is kept).
  returned: always
  type: str
  sample: /opt/sglang/venv.before-1f2e3d4c
timer:
  description: The guard's timer.
  returned: always
  type: str
  sample: llmserve-release-guard-1f2e3d4c.timer
heartbeat:
  description: The controller's heartbeat started by this call (V(null) when none is).
  returned: always
  type: dict
  contains:
    pid:
      description: Its process on the controller.
      type: int
    lease:
      description: Seconds the locks last without a beat.
      type: int
    every:
      description: Seconds between beats.
      type: int
    controller_pid:
      description: The C(ansible-playbook) it watches.
      type: int
  sample: {"pid": 48113, "lease": 90, "every": 22, "controller_pid": 48020}
"""

import os
import shutil
import sys

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmserve.sglang.plugins.module_utils.service import kv_pin, release_guard
from ansible_collections.llmserve.sglang.plugins.module_utils.host import host_files
from ansible_collections.llmserve.sglang.plugins.module_utils.host.host_commands import C_LOCALE

GIB = 1 << 30


def tree_bytes(path):
    """The disk the tree under ``path`` takes (allocated blocks), links not followed."""
    total = 0
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                pass
    return total


class Guard(object):
    def __init__(self, module):
        self.module = module
        self.run_id = kv_pin.check_run_id(module.params["run_id"])
        self.state_dir = os.path.join(release_guard.STATE_DIR, self.run_id)
        self.timer = release_guard.TIMER_PREFIX + self.run_id + ".timer"
        self.script = release_guard.functions()

    def run(self, *argv):
        return self.module.run_command(list(argv), environ_update=C_LOCALE)

    def done(self, changed, armed, why, kept=None):
        self.module.exit_json(changed=changed, armed=armed, why=why, kept=kept, timer=self.timer)

    def armed(self, units, venv, version, interval, fact_path):
        data = release_guard.manifest(self.run_id, units, venv, fact_path, {}, interval)
        found = host_files.installed_distribution(venv, "sglang")
        if found is None:
            self.module.fail_json(msg="no sglang distribution is installed in %s: nothing to keep" % venv)
        if found["version"] == version:
            self.done(False, False, "sglang %s is installed already: nothing to keep" % version)
        others = self.other_runs()
        if others:
            self.module.fail_json(
                msg="the release guard of run %s is still armed on this host: its rollout stopped in the middle of an "
                    "upgrade, and the host goes back to the release and pins of before by itself once that run's "
                    "locks lapse. Wait for it; nothing was changed" % ", ".join(others))
        kept = release_guard.snapshot_path(venv, self.run_id)
        if self.script["load"](self.run_id, release_guard.STATE_DIR) is not None:
            self.done(False, True, "run %s keeps sglang %s already" % (self.run_id, found["version"]), kept)
        size = tree_bytes(venv)
        stat = os.statvfs(os.path.dirname(venv))
        free = stat.f_bavail * stat.f_frsize
        if free < size + GIB:
            self.module.fail_json(
                msg="keeping a copy of %s (sglang %s, %.1f GiB) until the upgrade to %s is verified needs %.1f GiB "
                    "free beside it, and %.1f GiB are: free the room, nothing was changed"
                    % (venv, found["version"], size / GIB, version, (size + GIB) / GIB, free / GIB))
        try:
            os.makedirs(self.state_dir, 0o700, exist_ok=True)
            for index, path in enumerate(release_guard.files_to_keep(units, fact_path)):
                data["saved"][path] = self.save(path, os.path.join(self.state_dir, "kept-%d" % index))
            partial = kept + ".partial"
            shutil.rmtree(partial, ignore_errors=True)
            rc, out, err = self.run("cp", "-a", "--reflink=auto", venv, partial)
            if rc != 0:
                raise OSError("cp -a %s %s failed (rc %d): %s" % (venv, partial, rc, (err or out).strip()))
            os.rename(partial, kept)
            self.write(release_guard.SCRIPT_PATH, release_guard.script_text(sys.executable), 0o755)
            self.write(os.path.join(self.state_dir, "manifest.json"), release_guard.manifest_text(data), 0o600)
            for name, text in release_guard.unit_texts(self.run_id, interval).items():
                self.write(os.path.join(release_guard.UNIT_DIR, name), text, 0o644)
            systemctl = self.module.get_bin_path("systemctl", required=True)
            for argv in ((systemctl, "daemon-reload"), (systemctl, "enable", "--now", self.timer)):
                rc, out, err = self.run(*argv)
                if rc != 0:
                    raise OSError("%s failed (rc %d): %s" % (" ".join(argv), rc, (err or out).strip()))
        except OSError as exc:
            # Nothing half-armed: no copy, no manifest, no timer.
            self.retire(data)
            self.module.fail_json(msg="could not keep sglang %s before the upgrade: %s; nothing was changed"
                                      % (found["version"], exc))
        self.done(True, True, "kept sglang %s (%s, %.1f GiB) until the upgrade to %s is verified"
                  % (found["version"], venv, size / GIB, version), kept)

    def other_runs(self):
        """The runs other than this one whose guard is armed on the host."""
        try:
            names = sorted(os.listdir(release_guard.STATE_DIR))
        except FileNotFoundError:
            return []
        return [name for name in names if name != self.run_id
                and os.path.isfile(os.path.join(release_guard.STATE_DIR, name, "manifest.json"))]

    def save(self, path, copy):
        """A copy of ``path`` (root's) at ``copy``, 0600; None when ``path`` does not exist."""
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except FileNotFoundError:
            return None
        with open(copy, "wb") as handle:
            handle.write(data)
        os.chmod(copy, 0o600)
        return copy

    def write(self, path, text, mode):
        host_files.write_root_owned(self.module.atomic_move, path, text, mode, "release_guard")

    def quiet_systemctl(self, *argv):
        return self.run(self.module.get_bin_path(argv[0], required=True), *argv[1:])[0]

    def retire(self, data):
        """The script's retire, on this module's paths."""
        self.script["retire"](data, self.quiet_systemctl, release_guard.STATE_DIR)

    def restored(self):
        data = self.script["load"](self.run_id, release_guard.STATE_DIR)
        if data is None:
            self.done(False, False, "run %s keeps no release" % self.run_id)
        back = self.script["restore_release"](data)
        self.retire(data)
        self.done(True, False, ("the release kept before the upgrade is back in %s" if back else
                                "%s holds the release of before the upgrade already") % data["venv"])

    def disarmed(self):
        data = self.script["load"](self.run_id, release_guard.STATE_DIR)
        if data is None:
            self.done(False, False, "run %s keeps no release" % self.run_id)
        self.retire(data)
        self.done(True, False, "the copy of the release of before the upgrade is removed")


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            run_id=dict(type="str", required=True),
            state=dict(type="str", required=True, choices=["armed", "restored", "disarmed"]),
            units=dict(type="list", elements="str"),
            venv=dict(type="path"),
            version=dict(type="str"),
            interval=dict(type="int", default=30),
            fact_path=dict(type="path", default=kv_pin.FACT_PATH),
            controller_lease=dict(type="int", default=release_guard.CONTROLLER_LEASE),
        ),
        required_if=[("state", "armed", ["units", "venv", "version"])],
        supports_check_mode=False,
    )
    params = module.params
    try:
        release_guard.check_controller_lease(params["controller_lease"])    # the action's heartbeat uses it
        guard = Guard(module)
        if params["state"] == "armed":
            guard.armed(params["units"], params["venv"], params["version"], params["interval"], params["fact_path"])
        elif params["state"] == "restored":
            guard.restored()
        else:
            guard.disarmed()
    except (kv_pin.PinError, host_files.UntrustedPath) as exc:
        module.fail_json(msg=str(exc))
    except (OSError, ValueError) as exc:
        module.fail_json(msg="%s: %s" % (params["state"], exc))


if __name__ == "__main__":
    main()

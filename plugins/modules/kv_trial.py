#!/usr/bin/python
# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

DOCUMENTATION = r"""
module: kv_trial
short_description: Try a --mem-fraction-static on an SGLang unit with a host-side revert timer, then commit or revert it
version_added: 1.0.0
author:
  - llmserve.sglang contributors (@llmserve)
description:
  - The host half of the KV tuner's commit-confirmed trials (as network devices do C(commit confirmed)); the
    M(llmserve.sglang.kv_tune) action drives it. The unit's ExecStart must end with C($LLMSERVE_KV_ARGS), as the
    P(llmserve.sglang.sglang_service#role) role renders it.
  - O(state=locked) takes the unit's lock for the run O(run_id) (C(/run/llmserve/kv-tune-<unit>.lock)), and fails,
    naming the holder, while another live run holds it; a lock whose run stopped renewing it lapses after O(lease)
    seconds. Every other state with O(run_id) renews it and refuses to act while another run holds it.
    O(state=unlocked) releases it.
  - O(state=started) arms a transient timer C(llmserve-kv-revert-<run>-<unit>.timer) first, then writes the value
    to the runtime drop-in C(/run/systemd/system/<unit>.d/90-kv-trial.conf) (gone at reboot; C(Restart=no)) and
    restarts the unit. Unless a commit or a revert stops the timer within O(confirm_timeout) seconds, the host itself
    removes the drop-in and restarts the unit on its last-known-good value (a killed controller or a cut network
    never leaves it on an unverified value). A drop-in that cannot be written disarms the timer again.
    With O(restart=false) it arms and writes the same but leaves the unit running, and its next start runs the
    value (the P(llmserve.sglang.rollout#role) role's upgrade restart, which then is the trial).
  - O(state=committed) makes the value the last-known-good one. It writes the pinned drop-in
    C(/etc/systemd/system/<unit>.d/50-kv-tune.conf) and, with O(fact), the unit's entry in the local fact file (a
    fact file that is not JSON is moved aside, with a warning), stops the timer, removes the trial drop-in and
    reloads systemd. It does not restart, since the server runs the value. When the entry has a C(max_total_tokens)
    (C(kv_tune_pin_tokens)), the pin also sets C(--max-total-tokens) to it, from the next start on.
  - O(state=prepared) writes what O(state=committed) with the same O(value) and O(fact) would write, next to each
    file (C(<file>.kv-next)), and changes nothing that systemd or Ansible reads. A full disk or a read-only
    directory fails here, on every node of a server that spans hosts, before any of them commits. O(state=committed)
    then moves the prepared files into place.
  - O(state=reverted) stops the timers, removes the trial drop-in and restarts the unit on its last-known-good
    value (also used to start a stopped unit on it).
  - O(state=disarmed) stops revert timers of the unit left by earlier runs, without a restart (a timer without a
    trial would restart a healthy server later).
  - O(state=reset) removes the pin (drop-in and fact entry), any trial and timer, and restarts the unit on the value
    its base unit file gives.
  - A restart whose start fails is not a module failure (RV(restart_rc) says so). The readiness wait that follows
    classifies it.
requirements:
  - systemd (C(systemctl), C(systemd-run)) on the managed host, as root.
attributes:
  check_mode:
    support: none
    details: A trial restarts a server; the kv_tune action never calls it in check mode.
extends_documentation_fragment:
  - llmserve.sglang.attributes
options:
  unit:
    description: The systemd unit of the SGLang server.
    type: str
    required: true
  state:
    description: What to do with the unit's trial, pin or lock.
    type: str
    choices: [locked, unlocked, started, prepared, committed, reverted, disarmed, reset]
    required: true
  value:
    description:
      - The C(--mem-fraction-static) as it is written, a decimal strictly between 0 and 1 (V(0.910)).
      - Required with O(state=started), O(state=prepared) and O(state=committed).
    type: str
  run_id:
    description:
      - The tuning run (8 lower-case hex digits) that owns the lock and names the revert timer.
      - Required with O(state=locked) and O(state=unlocked); without it the other states neither check nor renew a
        lock, and use the timer name C(llmserve-kv-revert-<unit>.timer).
    type: str
  controller:
    description: Who runs the tuning (host and process), written into the lock for the message of a run it stops.
    type: str
    default: unknown
  lease:
    description: Seconds the lock stays valid after each step of the run.
    type: int
    default: 4200
  confirm_timeout:
    description: Seconds after O(state=started) at which the host reverts an unconfirmed trial by itself (3 to 86400).
    type: int
    default: 3600
  restart:
    description:
      - With O(state=started), whether to restart the unit on the value now. V(false) arms the timer and writes the
        trial drop-in only, for a restart that something else makes (a new SGLang's).
    type: bool
    default: true
  fact:
    description:
      - With O(state=prepared) and O(state=committed), the unit's entry in O(fact_path) (what proved the value).
      - Its C(max_total_tokens), when set, is the pool the value was verified with; the pin then caps the pool there.
    type: dict
  fact_path:
    description: The local fact file of the pins (JSON, one entry per unit).
    type: path
    default: /etc/ansible/facts.d/sglang_kv.fact
seealso:
  - module: llmserve.sglang.kv_tune
  - module: llmserve.sglang.kv_fingerprint
"""

EXAMPLES = r"""
- name: Try 0.910 on sglang.service; the host reverts by itself after 20 minutes unless committed
  llmserve.sglang.kv_trial:
    unit: sglang.service
    state: started
    value: "0.910"
    confirm_timeout: 1200

- name: It held the load, so make it the last-known-good value
  llmserve.sglang.kv_trial:
    unit: sglang.service
    state: committed
    value: "0.910"
    fact:
      mem_fraction_static: 0.91
      tokens: 202389

- name: Back to the last-known-good value
  llmserve.sglang.kv_trial:
    unit: sglang.service
    state: reverted

- name: Forget the pin; the unit runs its base value again
  llmserve.sglang.kv_trial:
    unit: sglang.service
    state: reset
"""

RETURN = r"""
trial_dropin:
  description: The runtime drop-in of a trial.
  returned: always
  type: str
  sample: /run/systemd/system/sglang.service.d/90-kv-trial.conf
pin_dropin:
  description: The drop-in of the pinned value.
  returned: always
  type: str
  sample: /etc/systemd/system/sglang.service.d/50-kv-tune.conf
revert_timer:
  description: The transient timer that reverts an unconfirmed trial of this run.
  returned: always
  type: str
  sample: llmserve-kv-revert-1f2e3d4c-sglang.timer
disarmed:
  description: Revert timers stopped by this call.
  returned: always
  type: list
  elements: str
  sample: [llmserve-kv-revert-9a8b7c6d-sglang.timer]
invocation_id:
  description: The unit's InvocationID after a restart (the start that a trial's readiness wait must see); V(null)
    when the state does not restart.
  returned: always
  type: str
  sample: 0b5cd4e2a1f34c7c9e2f6d5a4b3c2d1e
restart_rc:
  description: The exit status of C(systemctl restart); V(null) when the state does not restart.
  returned: always
  type: int
  sample: 0
restart_stderr:
  description: What C(systemctl restart) said when it failed.
  returned: always
  type: str
  sample: ""
lock:
  description: The unit's lock as this call left it (V(null) when there is none).
  returned: always
  type: dict
  sample: {"run_id": "1f2e3d4c", "controller": "ops1 pid 4242", "renewed": 1796110000, "expires": 1796114200}
"""

import os
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmserve.sglang.plugins.module_utils.service import kv_pin
from ansible_collections.llmserve.sglang.plugins.module_utils.host import host_files
from ansible_collections.llmserve.sglang.plugins.module_utils.host.host_commands import (
    C_LOCALE, SystemctlError, list_units, unit_properties)


# What state=prepared writes next to each file of a commit; systemd reads only *.conf and Ansible only *.fact.
PREPARED = ".kv-next"


class KvTrial(object):
    def __init__(self, module):
        self.module = module
        self.params = module.params
        self.unit = module.params["unit"]
        self.run_id = module.params["run_id"]
        self.paths = kv_pin.paths(self.unit, self.run_id)
        self.systemctl = module.get_bin_path("systemctl", required=True)
        self.changed = False
        self.restart_rc = None
        self.restart_stderr = ""
        self.invocation_id = None
        self.disarmed = []
        self.lock = None

    def run(self, *argv):
        return self.module.run_command(list(argv), environ_update=C_LOCALE)

    def must(self, *argv):
        rc, out, err = self.run(*argv)
        if rc != 0:
            self.module.fail_json(msg="%s failed (rc %d): %s" % (" ".join(argv), rc, (err or out).strip()), rc=rc)

    def write(self, path, text, mode):
        """Write ``text`` to ``path`` (root-owned, atomically) unless it is there already."""
        try:
            with open(path, encoding="utf-8") as handle:
                if handle.read() == text:
                    return False
        except FileNotFoundError:
            pass
        directory = os.path.dirname(path)
        if not os.path.isdir(directory):
            os.makedirs(directory, 0o755)
        host_files.write_root_owned(self.module.atomic_move, path, text, mode, "kv_trial")
        self.changed = True
        return True

    def move_prepared(self, path, text):
        """Move ``path``'s prepared file into place when it holds ``text`` (a rename: no space needed); a stale one
        (another value) is removed. Whether it was moved."""
        try:
            with open(path + PREPARED, encoding="utf-8") as handle:
                prepared = handle.read() == text
        except FileNotFoundError:
            return False
        if not prepared:
            self.remove(path + PREPARED)
            return False
        self.module.atomic_move(path + PREPARED, path)
        self.changed = True
        return True

    def remove(self, path):
        if os.path.lexists(path):
            os.unlink(path)
            self.changed = True

    # -- the lock --------------------------------------------------------------------------------------------------

    def read_lock(self):
        try:
            with open(self.paths["lock"], encoding="utf-8") as handle:
                return handle.read()
        except FileNotFoundError:
            return None

    def hold_lock(self, take=False):
        """Renew the run's lock (take it when ``take``); fail, naming the holder, while another live run holds it."""
        if self.run_id is None:
            return
        state, lock = kv_pin.lock_holder(self.read_lock(), time.time(), self.run_id)
        if state == "held" or (state == "free" and not take):
            if state == "free":
                self.module.fail_json(msg="run %s does not hold the lock of %s (it lapsed: the run was too slow, or "
                                          "another run took it over); nothing was done" % (self.run_id, self.unit))
            self.module.fail_json(msg=kv_pin.lock_message(self.unit, lock, self.paths["lock"]), lock=lock)
        self.write(self.paths["lock"], kv_pin.lock_text(self.run_id, self.params["controller"], time.time(),
                                                        self.params["lease"]), 0o644)
        self.lock = kv_pin.lock_holder(self.read_lock(), time.time(), self.run_id)[1]

    def unlocked(self):
        state, lock = kv_pin.lock_holder(self.read_lock(), time.time(), self.run_id)
        if state == "ours":
            self.remove(self.paths["lock"])
        else:
            self.lock = lock

    # -- timers and restarts ---------------------------------------------------------------------------------------

    def revert_timers(self, every_run):
        """The unit's revert timers that are loaded: this run's only, or every run's."""
        if not every_run:
            return [self.paths["revert_unit"] + ".timer"]
        return [name for name in list_units(self.module, kv_pin.REVERT_PREFIX + "*.timer")
                if kv_pin.is_revert_timer(name, self.unit)]

    def disarm(self, every_run=False):
        for timer in self.revert_timers(every_run):
            rc, _out, _err = self.run(self.systemctl, "stop", timer)
            self.run(self.systemctl, "reset-failed", timer, timer[:-len(".timer")] + ".service")
            if rc == 0:
                self.changed = True
                self.disarmed.append(timer)

    def restart(self):
        self.run(self.systemctl, "reset-failed", self.unit)
        rc, out, err = self.run(self.systemctl, "restart", self.unit)
        self.restart_rc, self.restart_stderr = rc, (err or out).strip() if rc else ""
        self.changed = True
        state = unit_properties(self.module, self.unit, ["InvocationID"])
        self.invocation_id = state.get("InvocationID") or None

    # -- states ----------------------------------------------------------------------------------------------------

    def started(self, value, confirm_timeout, restart=True):
        # The tuner's own bound: a timer days away would leave the host on an unverified value that long.
        low, high, unit, _why = kv_pin.CONFIRM_TIMEOUT_BOUNDS
        if not low <= confirm_timeout <= high:
            self.module.fail_json(msg="confirm_timeout must lie in [%s, %s] %s, got %d"
                                  % (low, high, unit, confirm_timeout))
        self.write(kv_pin.REVERT_SCRIPT, kv_pin.REVERT_SCRIPT_TEXT, 0o755)
        self.disarm()  # this run's timer of its previous trial
        self.must(self.module.get_bin_path("systemd-run", required=True), "--quiet",
                  "--unit=" + self.paths["revert_unit"],
                  "--description=Revert an unconfirmed KV trial of " + self.unit,
                  "--on-active=%ds" % confirm_timeout, "--timer-property=AccuracySec=1s",
                  kv_pin.REVERT_SCRIPT, self.unit, self.paths["trial"])
        try:
            self.write(self.paths["trial"], kv_pin.dropin_text(self.unit, value, True, self.run_id), 0o644)
            rc, out, err = self.run(self.systemctl, "daemon-reload")
            problem = None if rc == 0 else "systemctl daemon-reload failed (rc %d): %s" % (rc, (err or out).strip())
        except OSError as exc:
            problem = "cannot write the trial drop-in %s: %s" % (self.paths["trial"], exc)
        if problem is not None:
            # Never leave a timer that would restart the server later for a trial that did not happen.
            try:
                self.remove(self.paths["trial"])
            except OSError:
                pass
            self.disarm()
            self.run(self.systemctl, "daemon-reload")
            self.module.fail_json(msg="%s; the revert timer is disarmed and nothing was restarted" % problem)
        if restart:
            self.restart()
        else:
            self.changed = True

    def commit_files(self, value, fact, fact_path):
        """[(path, text)] that make ``value`` (and ``fact``) the unit's last-known-good one."""
        cap = (fact or {}).get("max_total_tokens")
        files = [(self.paths["pin"], kv_pin.dropin_text(self.unit, value, trial=False, max_total_tokens=cap))]
        if fact is not None:
            # Read first: a fact file that cannot be updated stops the commit before the pin changes.
            try:
                with open(fact_path, encoding="utf-8") as handle:
                    current = handle.read()
            except FileNotFoundError:
                current = None
            try:
                kv_pin.read_facts(current, fact_path)
            except kv_pin.PinError as exc:
                aside = "%s.broken-%s" % (fact_path, time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()))
                os.rename(fact_path, aside)
                self.module.warn("%s; moved it to %s and wrote a new one" % (exc, aside))
                current = None
            files.append((fact_path, kv_pin.facts_text(current, self.unit, fact)))
        return files

    def prepared(self, value, fact, fact_path):
        for path, text in self.commit_files(value, fact, fact_path):
            self.write(path + PREPARED, text, 0o644)

    def committed(self, value, fact, fact_path):
        for path, text in self.commit_files(value, fact, fact_path):
            if not self.move_prepared(path, text):
                self.write(path, text, 0o644)
        self.disarm()
        self.remove(self.paths["trial"])
        self.must(self.systemctl, "daemon-reload")

    def reverted(self, fact_path):
        self.disarm(every_run=self.run_id is None)
        self.remove(self.paths["trial"])
        for path in (self.paths["pin"], fact_path):   # a commit that did not happen
            self.remove(path + PREPARED)
        self.must(self.systemctl, "daemon-reload")
        self.restart()

    def disarmed_state(self):
        if os.path.lexists(self.paths["trial"]):
            self.module.fail_json(msg="a trial of %s is pending (%s): revert it instead of disarming its timer"
                                      % (self.unit, self.paths["trial"]))
        self.disarm(every_run=True)

    def reset(self, fact_path):
        self.disarm(every_run=True)
        self.remove(self.paths["trial"])
        self.remove(self.paths["pin"])
        try:
            with open(fact_path, encoding="utf-8") as handle:
                facts = kv_pin.read_facts(handle.read(), fact_path)
        except FileNotFoundError:
            facts = {}
        if self.unit in facts:
            with open(fact_path, encoding="utf-8") as handle:
                current = handle.read()
            self.write(fact_path, kv_pin.facts_text(current, self.unit, None), 0o644)
        self.must(self.systemctl, "daemon-reload")
        self.restart()


def build_module():
    return AnsibleModule(
        argument_spec=dict(
            unit=dict(type="str", required=True),
            state=dict(type="str", required=True,
                       choices=["locked", "unlocked", "started", "prepared", "committed", "reverted", "disarmed",
                                "reset"]),
            value=dict(type="str"),
            run_id=dict(type="str"),
            controller=dict(type="str", default="unknown"),
            lease=dict(type="int", default=4200),
            confirm_timeout=dict(type="int", default=3600),
            restart=dict(type="bool", default=True),
            fact=dict(type="dict"),
            fact_path=dict(type="path", default=kv_pin.FACT_PATH),
        ),
        required_if=[("state", "started", ["value"]), ("state", "prepared", ["value"]),
                     ("state", "committed", ["value"]), ("state", "locked", ["run_id"]),
                     ("state", "unlocked", ["run_id"])],
        supports_check_mode=False,
    )


def main() -> None:
    module = build_module()
    params = module.params
    try:
        trial = KvTrial(module)
        if params["value"] is not None:
            kv_pin.check_value_text(params["value"])
        state = params["state"]
        if state == "unlocked":
            trial.unlocked()
        else:
            trial.hold_lock(take=state == "locked")
        if state == "started":
            trial.started(params["value"], params["confirm_timeout"], params["restart"])
        elif state == "prepared":
            trial.prepared(params["value"], params["fact"], params["fact_path"])
        elif state == "committed":
            trial.committed(params["value"], params["fact"], params["fact_path"])
        elif state == "reverted":
            trial.reverted(params["fact_path"])
        elif state == "disarmed":
            trial.disarmed_state()
        elif state == "reset":
            trial.reset(params["fact_path"])
    except (kv_pin.PinError, SystemctlError) as exc:
        module.fail_json(msg=str(exc))
    except OSError as exc:
        module.fail_json(msg="%s: %s" % (params["state"], exc))
    module.exit_json(changed=trial.changed, trial_dropin=trial.paths["trial"], pin_dropin=trial.paths["pin"],
                     revert_timer=trial.paths["revert_unit"] + ".timer", disarmed=trial.disarmed,
                     invocation_id=trial.invocation_id, restart_rc=trial.restart_rc,
                     restart_stderr=trial.restart_stderr, lock=trial.lock)


if __name__ == "__main__":
    main()

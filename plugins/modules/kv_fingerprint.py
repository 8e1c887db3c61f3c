#!/usr/bin/python
# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

DOCUMENTATION = r"""
module: kv_fingerprint
short_description: The memory-picture fingerprint of an SGLang unit's server, and whether its KV pin still holds
version_added: 1.0.0
author:
  - llmserve.sglang contributors (@llmserve)
description:
  - Reads what the SGLang server of a systemd unit really runs, the command line of its main process
    (C(/proc/<MainPID>/cmdline)), and from it the server arguments, the model path and the current
    C(--mem-fraction-static).
  - Reads the SGLang version from the installed distribution's metadata (C(sglang-*.dist-info/METADATA)) in the
    virtualenv that the unit's ExecStart names, and only when root alone controls every directory and file on the
    way. It never runs, imports or follows anything the server's user could have written.
  - Reads the model's C(config.json) (and a speculative draft's) only as data, and only when the unit's user could
    read it anyway; the GPUs with the driver and CUDA versions (NVML, else nvidia-smi, as
    M(llmserve.sglang.gpu_info)), and which GPU memory belongs to other processes than the unit's.
  - Says in RV(stale) when what is on disk is newer than the running server (SGLang or a model's C(config.json)
    changed after it started), when the fingerprint describes the disk, not the process. For a stopped unit, what
    changed since its last start began (also its unit file and drop-ins), when that start's log says nothing about
    what it would start now.
  - Returns the fingerprint the KV tuner pins a value under (GPU model, count and memory; driver, CUDA and SGLang
    versions; model path, sha256 of C(config.json) and revision; the memory-relevant server arguments) and its
    sha256. A pinned value stays valid while the hash is unchanged.
  - Reads the unit's pin (its entry in O(fact_path), written by the KV tuner) and says in RV(retune_reason) why
    it must be tuned again, or V(null) when the fingerprint hash and the running value are the pinned ones. This
    one call is the KV tuner's "nothing to do".
  - Also says whether the unit can be tuned at all (RV(takes_kv_args)), whether a trial of an earlier tuner run
    was left unconfirmed (RV(trial_pending)), which revert timers are armed (RV(revert_timers)) and who holds the
    unit's tuning lock (RV(lock)).
  - A stopped unit (with O(require_running=false)) is fingerprinted from the command line it would start, its
    ExecStart with its C(Environment=) expanded (RV(source=unit)).
  - Fails, changing nothing, when the unit does not exist, is not running (unless O(require_running=false)), its
    command line has no C(--model-path), the model directory or its C(config.json) is missing, or the SGLang version
    or the GPUs cannot be read.
  - Secret arguments (C(--api-key), C(--admin-api-key), C(--ssl-keyfile-password)) are never returned.
requirements:
  - systemd on the managed host, and root (the server's C(/proc/<pid>/cmdline), its cgroup, the fact file).
options:
  unit:
    description: The systemd unit of the SGLang server.
    type: str
    default: sglang.service
  model_revision:
    description:
      - The revision of the model's weights (a Hugging Face commit, a release tag), when the path alone does not
        say it. Part of the fingerprint.
    type: str
  fact_path:
    description: The local fact file of the KV tuner's pins (JSON, one entry per unit).
    type: path
    default: /etc/ansible/facts.d/sglang_kv.fact
  require_running:
    description:
      - Fail when the unit is not running. With V(false), a stopped unit is reported with RV(running=false) and no
        fingerprint.
    type: bool
    default: true
  also_units:
    description:
      - Units whose processes RV(gpu_memory) counts neither as the unit's nor as other processes' - the servers that
        share its GPUs, whose memory the caller knows otherwise.
    type: list
    elements: str
    default: []
  watch:
    description:
      - Read the headroom watch of the unit (its state file, written by C(llmserve-kv-watch-<unit>.service)) and
        judge the windows since the pin (as M(llmserve.sglang.kv_watch_facts) does). RV(watch) has the verdict, and
        RV(retune_reason) names a near miss with memory to free, a pool smaller than the verified one, or (with
        C(action=act)) headroom.
      - Omitted, the watch is not read. A setting out of its range fails the module before the host is read.
    type: dict
    suboptions:
      action:
        description: V(propose) reports headroom as a proposal; V(act) makes it a reason to search from the pin.
        type: str
        choices: [propose, act]
        default: propose
      full_usage:
        description: The token usage from which the pool counts as full (a band of the watch, V(0.5) to V(0.95)).
        type: float
        default: 0.9
      headroom_hours:
        description: Hours at a full pool before the windows are judged for headroom (0.0005 to 8760).
        type: float
        default: 24
      headroom_steps:
        description: Steps over the margin that are still V(ok) (0 to 100).
        type: int
        default: 2
      storm_retractions:
        description: Requests retracted in one window that make a retraction storm (1 to 1000000).
        type: int
        default: 20
      pool_tolerance:
        description: >-
          How much smaller than the verified pool (a share) the running pool may be before it is a reason (0 to
          0.5).
        type: float
        default: 0.02
      state_path:
        description: The watch's state file; the default is the one the role's watch of O(unit) writes.
        type: path
extends_documentation_fragment:
  - llmserve.sglang.attributes
  - llmserve.sglang.attributes.read_only
  - llmserve.sglang.gpu_probe
seealso:
  - module: llmserve.sglang.gpu_info
  - module: llmserve.sglang.sglang_startup_facts
"""

EXAMPLES = r"""
- name: Fingerprint the server of sglang.service
  llmserve.sglang.kv_fingerprint:
  register: fp

- name: Say whether the pinned value still holds
  ansible.builtin.debug:
    msg: "{{ fp.retune_reason or 'the pin holds' }}"
"""

RETURN = r"""
running:
  description: Whether the unit's server runs (C(ActiveState=active) with a main process).
  returned: success
  type: bool
  sample: true
takes_kv_args:
  description: Whether the unit's ExecStart uses C($LLMSERVE_KV_ARGS), so that the tuner's drop-ins set its value.
  returned: success
  type: bool
  sample: true
trial_pending:
  description: Whether a trial drop-in of the KV tuner (C(/run/systemd/system/<unit>.d/90-kv-trial.conf)) is there.
  returned: success
  type: bool
  sample: false
trial_value:
  description: The C(--mem-fraction-static) of the pending trial drop-in (RV(trial_pending)), or V(null).
  returned: success
  type: float
  sample: null
revert_timers:
  description: The unit's loaded revert timers (of a trial in progress, or left by a run that died).
  returned: success
  type: list
  elements: str
  sample: [llmserve-kv-revert-1f2e3d4c-sglang.timer]
lock:
  description: The unit's tuning lock (run, controller, until when) with C(live) (its run still holds it); V(null)
    when there is none.
  returned: success
  type: dict
  sample: {"run_id": "1f2e3d4c", "controller": "ops1 pid 4242", "expires": 1796114200, "live": true}
stale:
  description: What on disk is newer than the running server (for a stopped unit, than its last start); empty when
    the disk is what runs (or last ran).
  returned: success
  type: list
  elements: str
  sample: ["sglang 0.5.10 was installed at 2026-12-01T10:00:00Z, after the server started"]
source:
  description: Where the server arguments come from, V(process) (the running server's command line) or V(unit) (the
    command line the stopped unit would start, from its ExecStart and Environment=); V(null) when neither is known.
  returned: success
  type: str
  sample: process
gpu_memory:
  description:
    - Per GPU, the memory that belongs to the unit's processes and to others (which the unit cannot use when it
      starts again), in bytes; V(null) when there is no fingerprint.
    - C(unlisted_bytes) is the GPU's used memory that no listed compute process holds (another container's, or
      one NVML cannot attribute), V(null) when the total is not known.
    - The processes of O(also_units) are in neither C(server_bytes) nor C(other_bytes).
  returned: success
  type: list
  elements: dict
  sample: [{"index": 3, "total_bytes": 102894051328, "reserved_bytes": 645922816, "server_bytes": 90000000000,
            "other_bytes": 8589934592, "unlisted_bytes": 0,
            "other_processes": [{"pid": 90003, "name": "/usr/bin/python3"}]}]
configured_gpus:
  description:
    - The GPUs (NVML's indices) that the unit's configuration gives its server on this host, running or not - its
      C(--base-gpu-id), C(--gpu-id-step), parallel sizes and C(--nnodes), counted within C(CUDA_VISIBLE_DEVICES)
      of its C(Environment=) or C(EnvironmentFile=). Units whose GPUs meet share them, also while one is down.
    - V(null) when that cannot be told (a MIG device, a rank past the visible GPUs, no fingerprint).
  returned: success
  type: list
  elements: int
  sample: [0, 1, 2, 3]
sizing_environment:
  description:
    - The environment variables of the unit that change how SGLang sizes the KV pool
      (C(SGLANG_ENABLE_POST_CAPTURE_KV_SIZING)), as its C(Environment=) and root-controlled C(EnvironmentFile=) set
      them; only those are read. V(null) when there is no fingerprint.
  returned: success
  type: dict
  sample: {"SGLANG_ENABLE_POST_CAPTURE_KV_SIZING": "1"}
fingerprint_error:
  description: Why a stopped unit could not be fingerprinted (a running one fails instead).
  returned: when the unit does not run and cannot be fingerprinted
  type: str
pin_error:
  description: What is wrong with the fact file or the unit's entry in it, when it cannot be used; V(null) otherwise.
  returned: success
  type: str
  sample: "/etc/ansible/facts.d/sglang_kv.fact is not JSON (Expecting value: line 1 column 1 (char 0))"
pin:
  description: The unit's entry in O(fact_path) (the pinned value and what proved it); V(null) when never tuned.
  returned: success
  type: dict
  sample: {"mem_fraction_static": 0.91, "tokens": 202389, "fingerprint_hash": "5d41...", "time": "2026-11-30T10:00:00Z"}
watch:
  description:
    - With O(watch), what the headroom watch says - verdict, reasons and evidence (as
      M(llmserve.sglang.kv_watch_facts) returns them), windows (since the pin), bad_line_count and bad_lines (the
      state file's lines that are not windows - how many, and the first 20 named), pool_tokens (the running
      start's pool as its /metrics gives it, V(null) when unknown), retune (the reason it gives, or V(null)),
      lower_to (the value a near miss is verified at), proposal (what it would do with O(watch.action=act)), and error
      (why it could not be read).
    - V(null) without O(watch), without a pin, or when the unit has no watch's state file.
  returned: success
  type: dict
  sample: {"verdict": "ok", "windows": 288, "pool_tokens": 202389, "retune": null, "proposal": null}
retune_reason:
  description:
    - "Why the unit must be tuned (V(never tuned), V(fingerprint changed: versions.driver), ...); V(null) when the
      pin holds, and when the unit does not run."
  returned: success
  type: str
  sample: "fingerprint changed: versions.sglang"
config:
  description: The model's C(config.json) as data; V(null) when the model path is a Hugging Face id.
  returned: success
  type: dict
  sample: {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 80}
fingerprint:
  description: The fingerprint, in sections C(gpu), C(versions), C(model) and C(server_args); V(null) when not running.
  returned: success
  type: dict
  sample: {"gpu": {"name": "NVIDIA H200", "count": 8, "memory_total_mib": 143771},
           "versions": {"driver": "580.95.05", "cuda": "13.0", "sglang": "0.5.9"},
           "model": {"path": "/models/deepseek-v3", "config_sha256": "9f2c...", "revision": null},
           "server_args": {"tp_size": 8, "kv_cache_dtype": "fp8_e4m3"}}
fingerprint_hash:
  description: sha256 of the canonical JSON of RV(fingerprint); V(null) when not running.
  returned: success
  type: str
  sample: 5d41402abc4b2a76b9719d911017c592ae2b0b5ab0d1b5a1f3f0b4c8d2f3e4a1
server_args:
  description:
    - The server's arguments from its command line, keyed by field name (tp_size), secrets as V([REDACTED]).
    - Without the pin's own C(--max-total-tokens) (RV(tokens_cap)), which is the tuner's output, not an input.
  returned: success
  type: dict
  sample: {"model_path": "/models/deepseek-v3", "tp_size": "8", "mem_fraction_static": "0.88", "port": "30000"}
tokens_cap:
  description:
    - The pool cap that the pin wrote (C(kv_tune_pin_tokens)) and that the command line runs with, V(null) when it
      runs none (no cap pinned, or a start from before the cap was pinned). The tail
      C(--mem-fraction-static F --max-total-tokens N) of the command line is the pin's when N is the pin's
      C(max_total_tokens); an operator's own C(--max-total-tokens) stays in RV(server_args) and the fingerprint.
  returned: success
  type: int
  sample: 202389
mem_fraction_static:
  description: The C(--mem-fraction-static) on the command line; V(null) when SGLang picks its default.
  returned: success
  type: float
  sample: 0.88
api_key_set:
  description: Whether the command line has an C(--api-key) (its value is not returned).
  returned: success
  type: bool
  sample: false
url:
  description: Where the server answers on the host (C(0.0.0.0) and C(::) become the loopback address).
  returned: success
  type: str
  sample: http://127.0.0.1:30000
model_path:
  description: The C(--model-path).
  returned: success
  type: str
  sample: /models/deepseek-v3
model_config:
  description: The C(config.json) read; V(null) when the model path is a Hugging Face id, not a directory.
  returned: success
  type: str
  sample: /models/deepseek-v3/config.json
checkpoint_bytes:
  description:
    - The checkpoint's size, C(metadata.total_size) of the model directory's C(model.safetensors.index.json), read as
      data the unit's user could read; V(null) without one (a Hugging Face id, a single-file or unreadable index).
    - The tuner checks the weights memory of each start's log against it (another process allocating while SGLang
      loads makes that log untrustworthy).
  returned: success
  type: int
  sample: 688586727753
sglang_metadata:
  description: The metadata file the SGLang version was read from.
  returned: when running
  type: str
  sample: /opt/sglang/venv/lib/python3.11/site-packages/sglang-0.5.9.dist-info/METADATA
sglang_version:
  description: The version of the C(sglang) distribution installed in the unit's virtualenv.
  returned: success
  type: str
  sample: 0.5.9
main_pid:
  description: The main process of the unit.
  returned: success
  type: int
  sample: 4242
invocation_id:
  description: The unit's current invocation, or a stopped unit's last (it changes with every start).
  returned: success
  type: str
  sample: 0b5cd4e2a1f34c7c9e2f6d5a4b3c2d1e
"""

import json
import os
import shlex
import time
from typing import Any, cast

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmserve.sglang.plugins.module_utils.startup import boot_trust
from ansible_collections.llmserve.sglang.plugins.module_utils.host import host_files
from ansible_collections.llmserve.sglang.plugins.module_utils.service import kv_pin, server_args as sa
from ansible_collections.llmserve.sglang.plugins.module_utils.watch import journal, kv_watch, settings, store
from ansible_collections.llmserve.sglang.plugins.module_utils.watch.verdict import verdict as watch_verdict
from ansible_collections.llmserve.sglang.plugins.module_utils.service.fingerprint import (
    FingerprintError, fingerprint, fingerprint_hash, retune_reason)
from ansible_collections.llmserve.sglang.plugins.module_utils.host.gpu_fields import GpuProbeError
from ansible_collections.llmserve.sglang.plugins.module_utils.host.gpu_probe import PREFER_CHOICES, probe
from ansible_collections.llmserve.sglang.plugins.module_utils.host.gpu_watch import control_group
from ansible_collections.llmserve.sglang.plugins.module_utils.host.host_commands import (
    C_LOCALE, SystemctlError, list_units, unit_journal, unit_properties)
from ansible_collections.llmserve.sglang.plugins.module_utils.service.host_units import configured_gpus

_UNIT_PROPERTIES = ["LoadState", "MainPID", "ActiveState", "SubState", "InvocationID", "ExecStart", "User",
                    "ControlGroup", "Environment", "EnvironmentFiles", "ExecMainStartTimestampMonotonic",
                    "FragmentPath", "DropInPaths"]
# What a stopped unit whose configuration cannot be fingerprinted returns (with its unit facts).
_NO_FINGERPRINT: dict[str, Any] = dict(
    fingerprint=None, fingerprint_hash=None, server_args={}, mem_fraction_static=None, api_key_set=None, url=None,
    model_path=None, model_config=None, config=None, checkpoint_bytes=None, sglang_version=None, retune_reason=None,
    stale=[], gpu_memory=None, configured_gpus=None, sizing_environment=None, source=None, tokens_cap=None)


def exec_path(exec_start):
    """The executable of systemd's ExecStart property (``{ path=/opt/sglang/venv/bin/python ; argv[]=... }``)."""
    for part in exec_start.strip("{} ").split(" ; "):
        if part.startswith("path="):
            return part[len("path="):]
    return None


def configured_argv(exec_start, environment):
    """The command line the unit would start (its ExecStart's argv, $NAME and ${NAME} expanded from its
    Environment=; a variable it does not set, such as a secret from an EnvironmentFile, stays as written), for a
    unit that does not run. Words are split as systemd prints them: a word with a space in it is not supported."""
    text = exec_start or ""
    if "argv[]=" not in text:
        return None
    words = text.split("argv[]=", 1)[1].split(" ; ", 1)[0].split()
    env = dict(item.split("=", 1) for item in shlex.split(environment or "") if "=" in item)
    argv = []
    for word in words:
        if word.startswith("$") and not word.startswith("${") and word[1:] in env:
            argv.extend(env[word[1:]].split())
        else:
            for name, value in env.items():
                word = word.replace("${%s}" % name, value)
            argv.append(word)
    return argv


class Unavailable(Exception):
    """The server cannot be fingerprinted; the message says why (a failure for a running unit, a missing
    fingerprint for a stopped one)."""


class Fingerprint(object):
    def __init__(self, module):
        self.module = module
        self.unit = module.params["unit"]
        self.stale = []

    def fail(self, msg):
        raise Unavailable(msg)

    def read_pin(self, fact_path):
        """(the unit's entry in the tuner's fact file or None, what is wrong with it or None)."""
        try:
            with open(fact_path, encoding="utf-8") as handle:
                entry = kv_pin.read_facts(handle.read(), fact_path).get(self.unit)
        except FileNotFoundError:
            return None, None
        except (OSError, kv_pin.PinError) as exc:
            return None, str(exc)
        problem = kv_pin.check_entry(entry) if entry is not None else None
        if problem:
            return None, "the pin of %s in %s cannot be used: %s" % (self.unit, fact_path, problem)
        return entry, None

    def read_trial_value(self, path):
        """The value of the trial drop-in (root's directory under /run/systemd), or None."""
        try:
            with open(path, encoding="utf-8") as handle:
                return kv_pin.dropin_value(handle.read())
        except (OSError, UnicodeDecodeError):
            return None

    def read_lock(self, path):
        try:
            with open(path, encoding="utf-8") as handle:
                state, lock = kv_pin.lock_holder(handle.read(), time.time())
        except FileNotFoundError:
            return None
        return None if lock is None else dict(lock, live=state == "held")

    def model_config(self, model_path, uid, gids, started, what="model"):
        """(path, text) of a model's config.json, read as data the unit's user could read; (None, None) for a
        Hugging Face id (org/name, not on disk)."""
        if os.path.isdir(model_path):
            path = os.path.join(model_path, "config.json")
            if not os.path.isfile(path):
                self.fail("the %s directory %s has no config.json: the model is missing or incomplete (nothing was "
                          "restarted)" % (what, model_path))
            try:
                data, info = host_files.read_as_user(path, uid, gids)
            except OSError as exc:
                self.fail("refusing to read the %s's config.json: %s (nothing was restarted)" % (what, exc))
            if started is not None and info.st_mtime > started + 1:
                self.stale.append("the %s's %s changed at %s, after the server started" % (what, path, _utc(info)))
            return path, data
        if model_path.startswith(("/", ".", "~")) or os.path.exists(model_path):
            self.fail("the %s path %s of the running server does not exist on the host: the model was moved or "
                      "deleted, a restart would fail (nothing was restarted)" % (what, model_path))
        return None, None

    def checkpoint_bytes(self, model_path, uid, gids):
        """metadata.total_size of the model's safetensors index, read as data the unit's user could read; None when
        there is none or it cannot be read (the check it feeds is then skipped, never the tune)."""
        path = os.path.join(model_path, "model.safetensors.index.json")
        if not os.path.isdir(model_path) or not os.path.isfile(path):
            return None
        try:
            data, _info = host_files.read_as_user(path, uid, gids)
            return boot_trust.checkpoint_bytes(json.loads(data))
        except (OSError, ValueError):
            return None

    def sglang_version(self, exec_start, started):
        """The installed sglang's version, from the metadata of the venv that the unit file names."""
        python = exec_path(exec_start or "")
        if not python or not python.startswith("/"):
            self.fail("cannot tell the virtualenv of %s from its ExecStart (%s)" % (self.unit, exec_start[:200]))
        venv = os.path.dirname(os.path.dirname(python))
        try:
            found = host_files.installed_distribution(venv, "sglang")
        except OSError as exc:
            self.fail("refusing to read the SGLang version of %s: %s. The virtualenv must belong to root and be "
                      "writable by root only (the server runs model code)" % (self.unit, exc))
        if found is None:
            self.fail("no sglang distribution is installed in %s, the virtualenv of %s's ExecStart" % (venv, self.unit))
        if started is not None and found["stat"].st_mtime > started + 1:
            self.stale.append("sglang %s was installed at %s, after the server started"
                              % (found["version"], _utc(found["stat"])))
        return found["version"], found["metadata"]

    def unit_files(self, state, started):
        """A stopped unit: its unit file and drop-ins written after its last start (that start ran another
        configuration)."""
        for path in [state.get("FragmentPath")] + (state.get("DropInPaths") or "").split():
            try:
                info = os.stat(path) if path else None
            except OSError:
                continue
            if info is not None and info.st_mtime > started + 1:
                self.stale.append("the unit's %s changed at %s, after the server started" % (path, _utc(info)))

    def server_pids(self, control_group, main_pid):
        """The processes of the unit (its cgroup; the main process and its children when the cgroup is unreadable)."""
        return host_files.unit_pids(control_group) or {main_pid}


def last_start(state):
    """When a stopped unit's last start began (Unix time, from systemd's monotonic clock), None when it never
    started."""
    try:
        began = int(state.get("ExecMainStartTimestampMonotonic") or 0)
    except ValueError:
        return None
    return time.time() - (time.monotonic() - began / 1e6) if began > 0 else None


def _utc(info):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(info.st_mtime))


def gpu_memory(gpus, server_pids, known_pids=frozenset()):
    """Per GPU: the unit's memory and the others' (bytes), and the other processes; ``known_pids`` (the processes of
    also_units) count as neither."""
    out = []
    for gpu in gpus:
        others = [proc for proc in gpu.get("compute_processes") or []
                  if proc["pid"] not in server_pids and proc["pid"] not in known_pids]
        mine = [proc for proc in gpu.get("compute_processes") or [] if proc["pid"] in server_pids]
        out.append({"index": gpu["index"], "total_bytes": gpu.get("memory_total_bytes"),
                    "reserved_bytes": gpu.get("memory_reserved_bytes") or 0,
                    "server_bytes": sum(proc.get("used_memory_bytes") or 0 for proc in mine),
                    "other_bytes": sum(proc.get("used_memory_bytes") or 0 for proc in others),
                    "unlisted_bytes": boot_trust.unlisted_bytes(gpu),
                    "other_processes": [{"pid": proc["pid"], "name": proc.get("name")} for proc in others]})
    return out


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            unit=dict(type="str", default="sglang.service"),
            model_revision=dict(type="str"),
            fact_path=dict(type="path", default=kv_pin.FACT_PATH),
            require_running=dict(type="bool", default=True),
            also_units=dict(type="list", elements="str", default=[]),
            watch=dict(type="dict", options=dict(
                action=dict(type="str", choices=list(settings.WATCH_ACTIONS), default="propose"),
                full_usage=dict(type="float", default=settings.FULL_USAGE),
                headroom_hours=dict(type="float", default=24.0),
                headroom_steps=dict(type="int", default=2),
                storm_retractions=dict(type="int", default=20),
                pool_tolerance=dict(type="float", default=settings.POOL_TOLERANCE),
                state_path=dict(type="path"))),
            nvidia_smi=dict(type="path"),
            prefer=dict(type="str", choices=list(PREFER_CHOICES), default="auto"),
        ),
        supports_check_mode=True,
    )
    unit = module.params["unit"]
    if module.params["watch"]:
        try:
            settings.check_settings(module.params["watch"], prefix="watch.")
        except settings.WatchError as exc:
            module.fail_json(msg=str(exc))
    fp_reader = Fingerprint(module)
    try:
        paths = kv_pin.paths(unit)
        state = unit_properties(module, unit, _UNIT_PROPERTIES)
        timers = [name for name in list_units(module, kv_pin.REVERT_PREFIX + "*.timer")
                  if kv_pin.is_revert_timer(name, unit)]
    except (SystemctlError, kv_pin.PinError) as exc:
        module.fail_json(msg=str(exc))
    if state.get("LoadState") == "not-found":
        module.fail_json(msg="%s does not exist on the host (systemd has no such unit): deploy it with "
                             "playbooks/site.yml, or set kv_tune_unit" % unit)
    pid = int(state.get("MainPID") or 0)
    pin, pin_error = fp_reader.read_pin(module.params["fact_path"])
    unit_facts = dict(
        changed=False, running=state.get("ActiveState") == "active" and pid > 0,
        takes_kv_args="$" + kv_pin.KV_ARGS_VARIABLE in (state.get("ExecStart") or ""),
        trial_pending=os.path.lexists(paths["trial"]), trial_value=fp_reader.read_trial_value(paths["trial"]),
        revert_timers=timers, lock=fp_reader.read_lock(paths["lock"]),
        pin=pin, pin_error=pin_error, main_pid=pid, invocation_id=state.get("InvocationID") or None)
    argv, started, unreadable = None, None, None
    if unit_facts["running"]:
        try:
            argv = host_files.process_argv(pid)
            started = host_files.process_start_time(pid)
        except (OSError, ValueError, IndexError, StopIteration) as exc:
            unreadable = exc
        if host_files.process_gone(pid):
            # Its main process exited between systemd's answer and these reads (a server that fails as it starts,
            # in a loop of systemd's restarts): the unit is not running.
            unit_facts["running"] = False
        elif unreadable is not None:
            module.fail_json(msg="cannot read the command line of %s (pid %d): %s" % (unit, pid, unreadable))
    if not unit_facts["running"]:
        if module.params["require_running"]:
            module.fail_json(msg="%s is not running (ActiveState=%s, SubState=%s): start it before fingerprinting"
                                 % (unit, state.get("ActiveState"), state.get("SubState")))
        # What the unit would start: its configuration, not a process; what changed since its last start began.
        argv, started = configured_argv(state.get("ExecStart"), state.get("Environment")), last_start(state)
        if started is not None:
            fp_reader.unit_files(state, started)
        if not argv or "--model-path" not in argv:
            module.exit_json(**dict(_NO_FINGERPRINT, **unit_facts))
    # The pin's cap is the tuner's output: the server was tuned without it (a trial never runs one).
    # argv: read from the process, else from the unit (or the module has exited)
    argv, unit_facts["tokens_cap"] = kv_pin.tuner_cap(cast("list[str]", argv), pin)
    try:
        found = describe(module, fp_reader, state, argv, started, pid if unit_facts["running"] else None)
    except Unavailable as exc:
        if unit_facts["running"]:
            module.fail_json(msg=str(exc))
        module.exit_json(fingerprint_error=str(exc), **dict(_NO_FINGERPRINT, **unit_facts))
    watch = read_watch(module, module.params["watch"], unit, pin, unit_facts["invocation_id"])
    module.exit_json(retune_reason=retune_reason(pin, found["fingerprint"], found["fingerprint_hash"],
                                                 found["mem_fraction_static"], watch=watch),
                     source="process" if unit_facts["running"] else "unit", watch=watch, **dict(found, **unit_facts))


def read_watch(module, params, unit, pin, invocation_id):
    """The headroom watch's verdict on ``pin`` and what it asks of the tuner (kv_watch.decision), None when not asked
    for, without a pin or without a state file; a state file that cannot be read is an error in the result, not a
    failure (the pin's other checks stand)."""
    if not params or not pin:
        return None
    path = params["state_path"] or settings.state_path(unit)
    if not os.path.lexists(path):
        return None
    try:
        records, bad = store.read_records(path)
        # The server's OOM and retraction lines: root reads them, the watch cannot (its journal holds the API key).
        text, journal_error = unit_journal(module, unit, records[0]["start"], journal.JOURNAL_GREP,
                                           journal.MAX_JOURNAL_LINES) if records else ("", None)
        records = journal.attach_journal(records, journal.journal_events(text or ""))
        result = watch_verdict(pin, records, full_usage=params["full_usage"],
                               headroom_hours=params["headroom_hours"], headroom_steps=params["headroom_steps"],
                               storm_retractions=params["storm_retractions"], unreadable=bad)
    except settings.WatchError as exc:
        return {"error": str(exc), "retune": None, "proposal": None, "verdict": None}
    pool = kv_watch.current_pool(records, invocation_id, time.time())
    out = dict(result, windows=result["evidence"]["windows"], bad_lines=bad[:20], bad_line_count=len(bad),
               pool_tokens=pool, path=path, error=None, journal_error=journal_error)
    out.update(kv_watch.decision(result, pin, params["action"], pool, params["pool_tolerance"]))
    return out


def describe(module, fp_reader, state, argv, started, pid):
    """The fingerprint and the server facts of ``argv`` (the running process ``pid``'s, or the stopped unit's);
    raises Unavailable."""
    unit = fp_reader.unit
    args = sa.from_argv(argv)
    model_path = args.get("model_path")
    if not isinstance(model_path, str) or not model_path:
        raise Unavailable("the command line of %s has no --model-path: %s" % (unit, " ".join(argv[:3])))
    uid, gids = host_files.service_user(state.get("User"))
    if uid is None:
        raise Unavailable("%s runs as User=%s, which does not exist on the host" % (unit, state.get("User")))
    config_path, config_text = fp_reader.model_config(model_path, uid, gids, started)
    draft_text = None
    if isinstance(args.get("speculative_draft_model_path"), str) and args.get("speculative_algorithm"):
        draft_text = fp_reader.model_config(args["speculative_draft_model_path"], uid, gids, started,
                                            what="draft model")[1]
    try:
        config = json.loads(config_text) if config_text is not None else None
    except ValueError as exc:
        raise Unavailable("the model's %s is not JSON: %s" % (config_path, exc)) from None
    version, metadata = fp_reader.sglang_version(state.get("ExecStart"), started)

    def run_command(command):
        return module.run_command(command, environ_update=C_LOCALE)

    def read_gpus():
        return probe(run_command=run_command, nvidia_smi=module.params["nvidia_smi"], prefer=module.params["prefer"],
                     which=module.get_bin_path)

    try:
        gpus = read_gpus()
        if boot_trust.needs_second_read(gpus["gpus"]):   # once more: a process may have exited between the reads
            gpus["gpus"] = boot_trust.settled_read(gpus["gpus"], read_gpus()["gpus"])
        fp = fingerprint(gpus["gpus"], gpus["driver_version"], gpus["cuda_driver_version"], version, model_path,
                         config_text=config_text, model_revision=module.params["model_revision"], server_args=args,
                         draft_config_text=draft_text)
        mfs = sa.mem_fraction_static(args)
    except (GpuProbeError, FingerprintError, sa.ServerArgsError) as exc:
        raise Unavailable("cannot fingerprint %s: %s" % (unit, exc)) from None
    server_pids = fp_reader.server_pids(state.get("ControlGroup") or "", pid) if pid else set()
    known_pids = set()
    for group in [control_group(module, other) for other in module.params["also_units"]]:
        known_pids |= (host_files.unit_pids(group) if group else None) or set()
    # One read of the unit's environment (its files hold secrets: only these variables are taken from them).
    environment, problem = host_files.unit_variables(state, ("CUDA_VISIBLE_DEVICES",) + sa.SIZING_VARIABLES)
    sizing_environment = {name: environment[name] for name in sa.SIZING_VARIABLES if name in environment}
    # An EnvironmentFile= that root alone does not control leaves CUDA_VISIBLE_DEVICES, and so the GPUs, unknown.
    gpus_given = None if problem else configured_gpus(
        args, {name: environment[name] for name in ("CUDA_VISIBLE_DEVICES",) if name in environment},
        [gpu.get("uuid") for gpu in gpus["gpus"]])
    return dict(configured_gpus=gpus_given, sizing_environment=sizing_environment, fingerprint=fp,
                fingerprint_hash=fingerprint_hash(fp), server_args=args, mem_fraction_static=mfs,
                api_key_set=args.get("api_key") is not None, url=sa.probe_url(args), model_path=model_path,
                model_config=config_path, config=config, sglang_version=version, sglang_metadata=metadata,
                checkpoint_bytes=fp_reader.checkpoint_bytes(model_path, uid, gids),
                stale=fp_reader.stale, gpu_memory=gpu_memory(gpus["gpus"], server_pids, known_pids))


if __name__ == "__main__":
    main()

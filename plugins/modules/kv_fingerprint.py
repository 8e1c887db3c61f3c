#!/usr/bin/python
# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

DOCUMENTATION = r"""
module: kv_fingerprint
short_description: The memory-picture fingerprint of an SGLang unit's server, and whether its KV pin still holds
version_added: 0.1.0
author:
  - llmserve.sglang contributors (@llmserve)
description:
  - Reads what the SGLang server of a systemd unit really runs, the command line of its main process
    (C(/proc/<MainPID>/cmdline)), and from it the server arguments, the model path and the current
    C(--mem-fraction-static).
  - Reads the SGLang version from the server's own interpreter (C(import sglang; sglang.__version__)), the
    C(config.json) of the model directory, and the GPUs with the driver and CUDA versions (NVML, else
    nvidia-smi, as M(llmserve.sglang.gpu_info)).
  - Returns the fingerprint the KV tuner pins a value under (GPU model, count and memory; driver, CUDA and SGLang
    versions; model path, sha256 of C(config.json) and revision; the memory-relevant server arguments) and its
    sha256. A pinned value stays valid while the hash is unchanged.
  - Reads the unit's pin (its entry in O(fact_path), written by the KV tuner) and says in RV(retune_reason) why
    it must be tuned again, or V(null) when the fingerprint hash and the running value are the pinned ones. This
    one call is the KV tuner's "nothing to do".
  - Also says whether the unit can be tuned at all (RV(takes_kv_args)) and whether a trial of an earlier tuner run
    was left unconfirmed (RV(trial_pending)).
  - Fails, changing nothing, when the unit is not running (unless O(require_running=false)), its command line has
    no C(--model-path), the model directory or its C(config.json) is missing, or the SGLang version or the GPUs
    cannot be read.
  - Secret arguments (C(--api-key), C(--admin-api-key), C(--ssl-keyfile-password)) are never returned.
requirements:
  - systemd on the managed host, and the right to read the server's C(/proc/<pid>/cmdline) (root).
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
    support: full
    details: This module only reads; it behaves the same in check mode.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in diff mode).
    support: none
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
extends_documentation_fragment:
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
pin:
  description: The unit's entry in O(fact_path) (the pinned value and what proved it); V(null) when never tuned.
  returned: success
  type: dict
  sample: {"mem_fraction_static": 0.91, "tokens": 202389, "fingerprint_hash": "5d41...", "time": "2026-11-30T10:00:00Z"}
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
  description: The server's arguments from its command line, keyed by field name (tp_size), secrets as V([REDACTED]).
  returned: success
  type: dict
  sample: {"model_path": "/models/deepseek-v3", "tp_size": "8", "mem_fraction_static": "0.88", "port": "30000"}
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
sglang_version:
  description: The SGLang version of the server's interpreter.
  returned: success
  type: str
  sample: 0.5.9
main_pid:
  description: The main process of the unit.
  returned: success
  type: int
  sample: 4242
invocation_id:
  description: The unit's current invocation (it changes with every start).
  returned: success
  type: str
  sample: 0b5cd4e2a1f34c7c9e2f6d5a4b3c2d1e
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmserve.sglang.plugins.module_utils import kv_pin, server_args as sa
from ansible_collections.llmserve.sglang.plugins.module_utils.fingerprint import FingerprintError, fingerprint, fingerprint_hash
from ansible_collections.llmserve.sglang.plugins.module_utils.gpu_probe import GpuProbeError, PREFER_CHOICES, probe
from ansible_collections.llmserve.sglang.plugins.module_utils.host_commands import (
    C_LOCALE, SystemctlError, unit_properties)
from ansible_collections.llmserve.sglang.plugins.module_utils.kv_tune import retune_reason
_VERSION_SNIPPET = "import json, sglang; print(json.dumps(str(sglang.__version__)))"


def read_argv(pid):
    with open("/proc/%d/cmdline" % pid, "rb") as handle:
        raw = handle.read()
    return [word.decode("utf-8", "replace") for word in raw.split(b"\0") if word]


def model_config_text(module, model_path):
    """(path, text) of the model's config.json; (None, None) for a Hugging Face id (org/name, not on disk)."""
    if os.path.isdir(model_path):
        path = os.path.join(model_path, "config.json")
        if not os.path.isfile(path):
            module.fail_json(msg="the model directory %s has no config.json: the model is missing or incomplete "
                                 "(nothing was restarted)" % model_path)
        with open(path, "rb") as handle:
            return path, handle.read()
    if model_path.startswith(("/", ".", "~")) or os.path.exists(model_path):
        module.fail_json(msg="the model path %s of the running server does not exist on the host: the model was "
                             "moved or deleted, a restart would fail (nothing was restarted)" % model_path)
    return None, None


def sglang_version(module, python):
    rc, out, err = module.run_command([python, "-c", _VERSION_SNIPPET], environ_update=C_LOCALE)
    if rc != 0:
        module.fail_json(msg="cannot read the SGLang version with the server's interpreter %s (rc %d): %s"
                             % (python, rc, (err or out).strip()[-500:]))
    try:
        return json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        module.fail_json(msg="the server's interpreter %s printed no SGLang version: %r" % (python, out[-200:]))


def read_pin(module, fact_path, unit):
    """The unit's entry in the tuner's fact file, or None."""
    try:
        with open(fact_path, encoding="utf-8") as handle:
            return kv_pin.read_facts(handle.read()).get(unit)
    except FileNotFoundError:
        return None
    except (OSError, kv_pin.PinError) as exc:
        module.fail_json(msg="cannot read the KV pins in %s: %s" % (fact_path, exc))


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            unit=dict(type="str", default="sglang.service"),
            model_revision=dict(type="str"),
            fact_path=dict(type="path", default=kv_pin.FACT_PATH),
            require_running=dict(type="bool", default=True),
            nvidia_smi=dict(type="path"),
            prefer=dict(type="str", choices=list(PREFER_CHOICES), default="auto"),
        ),
        supports_check_mode=True,
    )
    unit = module.params["unit"]
    try:
        paths = kv_pin.paths(unit)
        state = unit_properties(module, unit, ["MainPID", "ActiveState", "SubState", "InvocationID", "ExecStart"])
    except (SystemctlError, kv_pin.PinError) as exc:
        module.fail_json(msg=str(exc))
    pid = int(state.get("MainPID") or 0)
    unit_facts = dict(
        changed=False, running=state.get("ActiveState") == "active" and pid > 0,
        takes_kv_args="$" + kv_pin.KV_ARGS_VARIABLE in (state.get("ExecStart") or ""),
        trial_pending=os.path.lexists(paths["trial"]), pin=read_pin(module, module.params["fact_path"], unit),
        main_pid=pid, invocation_id=state.get("InvocationID") or None)
    if not unit_facts["running"]:
        if module.params["require_running"]:
            module.fail_json(msg="%s is not running (ActiveState=%s, SubState=%s): start it before fingerprinting"
                                 % (unit, state.get("ActiveState"), state.get("SubState")))
        module.exit_json(fingerprint=None, fingerprint_hash=None, server_args={}, mem_fraction_static=None,
                         api_key_set=None, url=None, model_path=None, model_config=None, config=None,
                         sglang_version=None, retune_reason=None, **unit_facts)
    try:
        argv = read_argv(pid)
    except OSError as exc:
        module.fail_json(msg="cannot read the command line of %s (pid %d): %s" % (unit, pid, exc))
    args = sa.from_argv(argv)
    model_path = args.get("model_path")
    if not isinstance(model_path, str) or not model_path:
        module.fail_json(msg="the command line of %s has no --model-path: %s" % (unit, " ".join(argv[:3])))
    config_path, config_text = model_config_text(module, model_path)
    try:
        config = json.loads(config_text) if config_text is not None else None
    except ValueError as exc:
        module.fail_json(msg="the model's %s is not JSON: %s" % (config_path, exc))
    version = sglang_version(module, argv[0])

    def run_command(command):
        return module.run_command(command, environ_update=C_LOCALE)

    try:
        gpus = probe(run_command=run_command, nvidia_smi=module.params["nvidia_smi"], prefer=module.params["prefer"],
                     which=module.get_bin_path)
        fp = fingerprint(gpus["gpus"], gpus["driver_version"], gpus["cuda_driver_version"], version, model_path,
                         config_text=config_text, model_revision=module.params["model_revision"], server_args=args)
        mfs = sa.mem_fraction_static(args)
    except (GpuProbeError, FingerprintError, sa.ServerArgsError) as exc:
        module.fail_json(msg="cannot fingerprint %s: %s" % (unit, exc))
    digest = fingerprint_hash(fp)
    module.exit_json(
        fingerprint=fp, fingerprint_hash=digest, server_args=args, mem_fraction_static=mfs,
        api_key_set=args.get("api_key") is not None, url=sa.probe_url(args), model_path=model_path,
        model_config=config_path, config=config, sglang_version=version,
        retune_reason=retune_reason(unit_facts["pin"], fp, digest, mfs), **unit_facts)


if __name__ == "__main__":
    main()

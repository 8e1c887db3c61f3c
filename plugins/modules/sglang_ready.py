#!/usr/bin/python
# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_ready
short_description: Wait until an SGLang server answers a real generation, or stop as soon as its unit has failed
version_added: 1.0.0
author:
  - llmserve.sglang contributors (@llmserve)
description:
  - "Polls the server every O(interval) seconds with C(POST /generate) (one new token), or C(GET /health_generate),
    until it answers with HTTP 200, for at most O(timeout) seconds. C(/health) alone is not trusted, it can answer
    while the engine hangs."
  - With O(unit), checks the systemd unit between polls and stops at once when it is no longer starting or running
    (C(failed), C(inactive), or C(auto-restart), where its process died and systemd waits C(RestartSec) to start it
    again on the same command line) or when it was started again (any other restart, seen by a new C(InvocationID)). A
    server that cannot start is reported in seconds, before systemd starts it again, not after O(timeout). When
    ready, RV(invocation_id) names the start of the unit that answered; when that start failed,
    RV(failed_invocation_id) names it, so that its own log can be read after systemd has begun another start.
  - Not becoming ready is a result (RV(ready=false) with RV(reason)), not a module failure, so that a caller can
    classify it; the module fails only on invalid options.
attributes:
  check_mode:
    support: full
    details: It only reads; it behaves the same in check mode.
extends_documentation_fragment:
  - llmserve.sglang.attributes
options:
  url:
    description: Base URL of the server.
    type: str
    default: http://127.0.0.1:30000
  api_key:
    description: The server's C(--api-key), sent as a bearer token.
    type: str
  unit:
    description: The systemd unit of the server, watched between polls.
    type: str
  invocation_id:
    description:
      - With O(unit), the start of the unit to wait for (its C(InvocationID), as M(llmserve.sglang.kv_trial) returns
        it after a restart). When the unit runs another start, from the first check on, the server is not ready
        (RV(reason=unit_restarted)), since whatever answers is not that start.
    type: str
  timeout:
    description: Seconds to wait in all.
    type: float
    default: 1800
  interval:
    description: Seconds between polls.
    type: float
    default: 2
  check:
    description: V(generate) posts a one-token generation; V(health_generate) asks C(/health_generate).
    type: str
    choices: [generate, health_generate]
    default: generate
  gpus:
    description:
      - With O(unit), the GPUs (indices) to watch while waiting, every second through NVML or nvidia-smi - the
        least and most memory that compute processes outside the unit's cgroup hold on each, and that no listed
        process holds (RV(other_memory_seen)).
        Memory another process takes or gives back while SGLang measures its free memory changes the pool it sizes,
        and the startup log may not show it.
    type: list
    elements: int
  also_units:
    description:
      - With O(gpus), units whose processes count as the server's on those GPUs - the servers that share them and
        are loaded with it, whose own memory the caller watches otherwise.
    type: list
    elements: str
    default: []
  nvidia_smi:
    description: Path of nvidia-smi for O(gpus) (found on PATH when unset).
    type: path
  prefer:
    description: The source of O(gpus)' samples, as M(llmserve.sglang.gpu_info)'s O(prefer).
    type: str
    choices: [auto, nvml, nvidia_smi]
    default: auto
seealso:
  - module: llmserve.sglang.sglang_startup_facts
"""

EXAMPLES = r"""
- name: Wait up to 30 minutes for the server of sglang.service
  llmserve.sglang.sglang_ready:
    unit: sglang.service
    timeout: 1800
  register: ready

- name: Stop when it did not come up
  ansible.builtin.fail:
    msg: "{{ ready.reason }}"
  when: not ready.ready
"""

RETURN = r"""
ready:
  description: Whether the server answered with HTTP 200 within the timeout.
  returned: always
  type: bool
  sample: true
reason:
  description: Why it is not ready (V(timeout), V(unit_failed), V(unit_restarted)); V(null) when ready.
  returned: always
  type: str
  sample: unit_failed
detail:
  description: The unit's state or the last HTTP error, for the report.
  returned: always
  type: str
  sample: "ActiveState=failed SubState=failed Result=exit-code"
invocation_id:
  description: With O(unit), the unit's C(InvocationID) when the server answered (it changes with every start).
  returned: always
  type: str
  sample: 0b5cd4e2a1f34c7c9e2f6d5a4b3c2d1e
failed_invocation_id:
  description:
    - With O(unit), when the start waited for failed (RV(reason) V(unit_failed) or V(unit_restarted)), that start's
      C(InvocationID); M(llmserve.sglang.sglang_startup_facts) reads its log by it (O(invocation_id)), whatever
      systemd started since. V(null) otherwise.
  returned: always
  type: str
  sample: 0b5cd4e2a1f34c7c9e2f6d5a4b3c2d1e
elapsed_s:
  description: Seconds waited.
  returned: always
  type: float
  sample: 41.2
other_memory_seen:
  description:
    - With O(gpus), per GPU watched, the least and most bytes that processes outside the unit held there while the
      server started, and those processes (the most each held); V(null) when not watched or no sample was taken.
    - C(unlisted_min_bytes) and C(unlisted_max_bytes) are the least and most of the GPU's used memory that no listed
      process held (another container's, or one NVML cannot attribute), as two samples in a row agree (the total and
      the processes are two reads); V(null) before two samples or without totals.
  returned: always
  type: list
  elements: dict
  sample: [{"gpu": 0, "min_bytes": 0, "max_bytes": 4294967296, "unlisted_min_bytes": 0, "unlisted_max_bytes": 0,
            "processes": [{"pid": 91000, "name": "python3", "max_bytes": 4294967296}]}]
watch:
  description: With O(gpus), how many samples were taken and why watching stopped early (V(null) when it did not).
  returned: always
  type: dict
  sample: {"samples": 164, "error": null}
"""

import json
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import open_url

from ansible_collections.llmserve.sglang.plugins.module_utils.host.gpu_probe import PREFER_CHOICES
from ansible_collections.llmserve.sglang.plugins.module_utils.host.gpu_watch import start_watch
from ansible_collections.llmserve.sglang.plugins.module_utils.host.host_commands import SystemctlError, unit_properties


def unit_state(module, unit):
    """The unit's state, or {} when it cannot be read (the HTTP probe alone then decides)."""
    try:
        return unit_properties(module, unit, ["ActiveState", "SubState", "Result", "NRestarts", "InvocationID"])
    except SystemctlError:
        return {}


def poll(url, check, api_key, timeout):
    """None when the server generated, else a short error text."""
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = "Bearer " + api_key
    try:
        if check == "generate":
            body = json.dumps({"text": "Hello", "sampling_params": {"max_new_tokens": 1, "temperature": 0}})
            response = open_url(url.rstrip("/") + "/generate", data=body, headers=headers, method="POST",
                                timeout=timeout)
        else:
            response = open_url(url.rstrip("/") + "/health_generate", headers=headers, timeout=timeout)
        return None if response.getcode() == 200 else "HTTP %s" % response.getcode()
    except Exception as exc:  # pylint: disable=broad-except
        # Connection refused, HTTP 503 while loading, a timeout: all mean "not yet".
        return "%s: %s" % (type(exc).__name__, exc)


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            url=dict(type="str", default="http://127.0.0.1:30000"),
            api_key=dict(type="str", no_log=True),
            unit=dict(type="str"),
            invocation_id=dict(type="str"),
            timeout=dict(type="float", default=1800),
            interval=dict(type="float", default=2),
            check=dict(type="str", choices=["generate", "health_generate"], default="generate"),
            gpus=dict(type="list", elements="int"),
            also_units=dict(type="list", elements="str", default=[]),
            nvidia_smi=dict(type="path"),
            prefer=dict(type="str", choices=list(PREFER_CHOICES), default="auto"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    if params["timeout"] <= 0 or params["interval"] <= 0:
        module.fail_json(msg="timeout and interval must be > 0, got %s and %s" % (params["timeout"], params["interval"]))
    unit = params["unit"]
    start = time.monotonic()
    first = unit_state(module, unit) if unit else {}
    if params["invocation_id"] and unit:
        # The start to wait for, not whatever runs now: a start in between (a revert, anyone's restart) counts.
        first["InvocationID"] = params["invocation_id"]

    watch = start_watch(module, params["gpus"], [unit] + params["also_units"]) if unit and params["gpus"] else None

    def stop(ready, reason, detail, state=None, failed=None):
        watched = watch.result() if watch else {"other_memory_seen": None, "watch": None}
        module.exit_json(changed=False, ready=ready, reason=reason, detail=detail,
                         invocation_id=(state or {}).get("InvocationID") or None, failed_invocation_id=failed or None,
                         elapsed_s=round(time.monotonic() - start, 1), **watched)

    while True:
        left = params["timeout"] - (time.monotonic() - start)
        last_error = poll(params["url"], params["check"], params["api_key"], max(1.0, min(30.0, left)))
        state = unit_state(module, unit) if unit else {}
        if last_error is None and not _restarted(first, state):
            stop(True, None, "HTTP 200", state)
        if unit:
            detail = " ".join("%s=%s" % item for item in sorted(state.items()))
            # auto-restart: this start's process died, and systemd starts another after RestartSec (a model load on
            # the same value, which a caller that acts now can spare).
            if state.get("ActiveState") in ("failed", "inactive") or state.get("SubState") == "auto-restart":
                # The unit keeps the InvocationID of its last start until the next one begins.
                stop(False, "unit_failed", detail, failed=state.get("InvocationID") or first.get("InvocationID"))
            if _restarted(first, state):
                # The start waited for ended and systemd (or anyone) began another: the first one is the failure.
                stop(False, "unit_restarted", detail, failed=first.get("InvocationID"))
        if time.monotonic() - start + params["interval"] > params["timeout"]:
            stop(False, "timeout", last_error)
        time.sleep(params["interval"])


def _restarted(first, now):
    """Whether the unit was started again since the wait began: systemd's own restarts or any other start."""
    return any(first.get(key) and now.get(key) and first[key] != now[key] for key in ("NRestarts", "InvocationID"))


if __name__ == "__main__":
    main()

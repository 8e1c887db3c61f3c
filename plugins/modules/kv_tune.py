#!/usr/bin/python
# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

DOCUMENTATION = r"""
module: kv_tune
short_description: Find, prove and pin the largest --mem-fraction-static of an SGLang unit that holds a load filling its KV pool
version_added: 1.0.0
author:
  - llmserve.sglang contributors (@llmserve)
description:
  - An action plugin that runs the whole per-unit search on the controller and calls the collection's modules on
    the host, as M(ansible.builtin.reboot) does; the P(llmserve.sglang.kv_tune#role) role and
    C(playbooks/tune_kv.yml) call it. Every decision comes from the collection's C(plugin_utils/run/unit_run.py)
    and the C(kv_tune_*) files beside it.
  - First, one call of M(llmserve.sglang.kv_fingerprint) - when the fingerprint and the running value are the pinned
    ones, nothing else happens (RV(status=unchanged), no restart).
  - Otherwise it measures the running server under a load that fills its KV pool (M(llmserve.sglang.kv_stress)), or
    restarts it on O(start), then predicts the value that uses the free memory left, verifies each candidate with
    one restart (M(llmserve.sglang.kv_trial) - a runtime drop-in guarded by a revert timer on the host, then
    M(llmserve.sglang.sglang_ready) and the load), commits each new best as the host's last-known-good value, and
    ends on the best (the pinned drop-in and the unit's entry in C(/etc/ansible/facts.d/sglang_kv.fact)).
  - >-
    While a unit's run lasts it prints where it is, a line per phase such as C([kv_tune] gpu3: restarting 0.910)
    (phases probe, restarting, loading, ready, under load, verified, pinned, failed and reverted), and the line
    again with the seconds spent every 20 seconds while a server loads or is under load. They are plain output lines, so a terminal,
    ansible-runner's events and AWX's job output all show them.
  - After every restart the value is read back from the server's command line and its startup log, and the server
    that answered and held the load must be the very start the trial made (its C(InvocationID)); otherwise the
    search ends with RV(status=failed) and the host on its last-known-good value.
  - Any error after a trial started reverts the host to its last-known-good value at once; so does a search whose
    ansible-playbook was killed or interrupted, also in the middle of a load or of a wait for a start (the call is
    cut short within a second). A worker of ansible-playbook killed itself leaves its host to the revert timer.
  - One run at a time per unit, by a lock on the host (C(/run/llmserve/kv-tune-<unit>.lock)); a second run names the
    holder and stops before any restart. Before the first restart it also stops when the unit's GPUs are too
    unbalanced for SGLang (another process holding memory on one of them), restarts a server whose SGLang or model
    changed on disk since it started, clears revert timers left without a trial, and, when the last-known-good value
    no longer starts because of memory, tunes from a safe start (SGLang's default for these GPUs).
  - A server that spans hosts (C(--nnodes)) is tuned as one when every node runs this task at once (as
    C(playbooks/tune_kv.yml) does). Node 0 leads the search, and before each of its trial, commit and revert steps
    every other node does the same; during the load they watch their GPUs
    (O(llmserve.sglang.gpu_info#module:watch)). The least free GPU of any node judges the load, and every node
    pins the value with its own fingerprint. The other nodes return RV(follower_of).
  - Prints a line per trial while it runs. A search that ends without a stable value, or fails, is a result
    (RV(status)), not a task failure, so that the caller can write the reports first; errors before anything
    changed (bad settings, a unit that cannot be tuned, a missing model) fail the task.
options:
  unit:
    description: The systemd unit of the server (its ExecStart must end with C($LLMSERVE_KV_ARGS)).
    type: str
    default: sglang.service
  units:
    description:
      - Several servers on one host (C(sglang@a.service) on GPUs 0-3, C(sglang@b.service) on 4-7); replaces
        O(unit). Each is tuned in turn with its own lock, trials, load, pin, fact entry and report, and its load
        is sampled on its own GPUs only.
      - Units given a common GPU (by their configuration, running or not - C(configured_gpus) of
        M(llmserve.sglang.kv_fingerprint)) are loaded together in every trial of either (their activations meet on
        the shared GPUs). A neighbour that is down is started on its last-known-good value before a unit's run, or
        that unit is not tuned and says why; a neighbour that stopped or restarted during a search is restarted on
        its last-known-good value afterwards, and the pair must hold the joint load again.
      - A unit that fails does not stop the others; the host's RV(status) is then V(failed) (or
        V(no_stable_value)), RV(msg) names the units, and RV(units) holds each unit's result.
    type: list
    elements: str
  start:
    description: The first value measured, on the O(resolution) grid; default the value the server runs now.
    type: float
  cap:
    description: The highest value ever tried, in (0, 1).
    type: float
    default: 0.98
  resolution:
    description: The grid of values tried (a decimal step in [0.0001, 0.1]).
    type: float
    default: 0.005
  safety_gib:
    description: GiB that must stay free on every GPU under the load (0 to 64).
    type: float
    default: 1.0
  budget:
    description: Trials in all, the first measurement included (1 to 30).
    type: int
    default: 6
  min_tokens:
    description: KV tokens the pool must hold at least; raises the lowest value tried.
    type: int
  force:
    description: Tune even when the pin holds.
    type: bool
    default: false
  reset:
    description: Remove the pin (drop-in and fact entry) instead of tuning; the unit restarts on the value of its base
      unit file and must serve again.
    type: bool
    default: false
  model_revision:
    description: The weights' revision, when the model path does not say it (part of the fingerprint).
    type: str
  url:
    description: Where the server answers while it is not running yet; afterwards its command line's --host and --port.
    type: str
    default: http://127.0.0.1:30000
  api_key:
    description: The server's API key.
    type: str
  ready_timeout:
    description: Seconds a restarted server has to answer a real generation (1 to 21600).
    type: float
    default: 1800
  ready_interval:
    description: Seconds between readiness polls (0.1 to 60).
    type: float
    default: 5
  stress_fill_ratio:
    description: Share of the KV pool the load holds at once (0.5 to 1).
    type: float
    default: 0.95
  stress_duration:
    description: Seconds of load per trial (1 to 3600).
    type: float
    default: 120
  confirm_timeout:
    description: Seconds after which the host reverts an unconfirmed trial by itself (3 to 86400); default the
      readiness timeout plus twice the load plus 600.
    type: int
  strategy:
    description: V(per_host) searches on every host; V(per_class) lets a member of a class of identical fingerprints
      verify the value its canary found, less O(class_margin_steps), with one restart (see O(class_plan)).
    type: str
    choices: [per_host, per_class]
    default: per_host
  class_margin_steps:
    description: Grid steps below the class's value that a member verifies.
    type: int
    default: 0
  class_plan:
    description: This host's units' parts in their classes (unit -> the P(llmserve.sglang.kv_tune_class_plan#filter)
      entry); the canary's value is read from its registered C(kv_tune_outcome).
    type: dict
  pin_tokens:
    description:
      - Each pin also sets C(--max-total-tokens) to the pool its value was verified with (the pin's C(tokens)), from
        the server's next start on, so that every restart serves that pool, never a larger one that no load
        verified. A member of a class that verifies its canary's value caps at the least of its own and its canary's
        verified pool.
      - Not for hybrid models (sliding-window or linear-attention state pools), where SGLang applies the cap before it
        splits the pool - the cap would not give the verified pool back; their pins stay uncapped, and the line says so.
      - Changing it on a pinned unit rewrites its pin without a restart (the cap is the tuner's output, not part of
        the fingerprint); it applies from the next start. A cap never enlarges a pool; one that starts smaller is
        named by the headroom watch's pool check.
    type: bool
    default: false
  watch:
    description:
      - "Read each unit's headroom watch (role llmserve.sglang.sglang_service with C(sglang_service_kv_watch)) and act
        on it, with these settings, the suboptions of O(llmserve.sglang.kv_fingerprint#module:watch): C(action),
        C(full_usage), C(headroom_hours), C(headroom_steps), C(storm_retractions), C(pool_tolerance), each within the
        range stated there (a setting out of it is refused before anything runs)."
      - A near miss with memory to free is tuned again from the pin less the missing memory (C(start) and C(cap) that
        value for that unit), verified under the load; a pool smaller than the verified one is tuned again as usual;
        headroom is a proposal in the unit's line, or with C(action=act) a search from the pin.
      - Omitted, the watch is not read.
    type: dict
  run_id:
    description:
      - The run (8 lower-case hex digits) that holds the units' tuning locks already (C(playbooks/rollout.yml) takes
        them before it drains a host, so that no other tune starts during its upgrade). The tune runs as that run,
        renews the locks and leaves them to it.
      - Unset, the tune takes each unit's lock under a run of its own and releases it when it ends.
    type: str
attributes:
  check_mode:
    support: full
    details: In check mode it says whether the unit would be tuned, and why; it restarts nothing.
extends_documentation_fragment:
  - llmserve.sglang.attributes
  - llmserve.sglang.attributes.action_plugin
seealso:
  - module: llmserve.sglang.kv_fingerprint
  - module: llmserve.sglang.kv_trial
  - module: llmserve.sglang.kv_stress
"""

EXAMPLES = r"""
- name: Tune sglang.service unless its pin still holds
  llmserve.sglang.kv_tune:
    unit: sglang.service
    api_key: "{{ sglang_service_api_key }}"
  register: tune

- name: Say what happened
  ansible.builtin.debug:
    msg: "{{ tune.line }}"
"""

RETURN = r"""
status:
  description: V(unchanged) (the pin holds), V(would_tune) (check mode), V(tuned), V(no_stable_value) (the host
    serves its last-known-good value again), V(failed) (the search stopped; see RV(msg)), V(reset) or
    V(would_reset).
  returned: always
  type: str
  sample: tuned
why:
  description: Why the unit was (or would be) tuned; V(null) when unchanged.
  returned: always
  type: str
  sample: never tuned
line:
  description: One line for people (the before -> after line, or why nothing happened).
  returned: always
  type: str
  sample: "sim1: 0.880 -> 0.910, KV 159,282 -> 202,389 tokens (+27%), 1 restart"
msg:
  description: The reason of RV(status=no_stable_value) or RV(status=failed).
  returned: when status is no_stable_value or failed
  type: str
pin:
  description: The unit's pin as found (its fact entry); V(null) when never tuned.
  returned: always
  type: dict
result:
  description: The report of the tune (before, after, restarts, every trial, the search, settings, fingerprint).
  returned: when the unit was tuned (successfully or not)
  type: dict
report:
  description: The same report as Markdown.
  returned: when the unit was tuned (successfully or not)
  type: str
unit:
  description: The unit tuned (one unit).
  returned: when one unit was tuned
  type: str
label:
  description: The name lines, reports and the summary give the unit (the host; C(host/sglang@a) for one of several).
  returned: when one unit was tuned
  type: str
node:
  description: This host's part in a server that spans hosts, C(key) (the server), C(nnodes), C(node_rank) and
    C(dist_init_addr).
  returned: when the server spans hosts
  type: dict
follower_of:
  description: On a node other than 0 of a server that spans hosts, the host of node 0, which led the search; RV(line)
    says how it ended and C(value) is the value pinned.
  returned: on a node other than 0 of a server that spans hosts, outside check mode
  type: str
units:
  description: Unit -> that unit's result (the keys above, with its own C(unit) and C(label)).
  returned: when O(units) names more than one unit and none share a GPU
  type: dict
"""

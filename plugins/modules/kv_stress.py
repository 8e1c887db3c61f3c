#!/usr/bin/python
# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

DOCUMENTATION = r"""
module: kv_stress
short_description: Fill a local SGLang server's KV cache pool with concurrent requests and sample GPU memory meanwhile
version_added: 1.0.0
author:
  - llmserve.sglang contributors (@llmserve)
description:
  - Reads C(max_total_num_tokens), C(max_running_requests), the context length and the prefill chunk size from the
    server's C(/get_server_info) (C(/server_info) when that fails), then sends rounds of concurrent C(/generate)
    requests with random C(input_ids), sized so that the tokens held at once reach O(fill_ratio) of the KV pool and
    each prompt is longer than the largest prefill chunk, for O(duration) seconds or O(rounds) rounds.
  - Meanwhile samples every GPU's free memory about every O(sample_interval) seconds, through NVML or nvidia-smi
    (as M(llmserve.sglang.gpu_info) reads them; after the first sample, nvidia-smi is asked for the memory fields
    only, one command per sample), and polls C(/get_load) for the tokens the server holds.
  - A server that stops answering (connection refused, reset or closed) ends the run at once, with RV(held=false)
    and the reason in RV(failure_reason); every HTTP call has a timeout and the whole run has a deadline (the
    duration or the rounds times O(request_timeout), plus one O(request_timeout)), so it never hangs.
  - A failed load is a result, not a module failure; the module fails only when the server info cannot be read or
    an option is invalid. It changes nothing on the host and always reports RV(ignore:changed=false).
requirements:
  - An SGLang server reachable from the managed host (normally its own, on 127.0.0.1).
  - For the memory samples, an NVIDIA driver and either C(pynvml) (C(nvidia-ml-py)) or C(nvidia-smi); without them
    the load still runs and RV(min_free_gib) is V(null).
attributes:
  check_mode:
    support: none
    details:
      - A load test is an action whose result cannot be predicted; in check mode Ansible skips the task
        (C(remote module does not support check mode)).
options:
  url:
    description: Base URL of the SGLang server.
    type: str
    default: http://127.0.0.1:30000
  api_key:
    description: The server's C(--api-key), sent in an C(Authorization) header as a bearer token.
    type: str
  fill_ratio:
    description: Share of the KV pool (C(max_total_num_tokens)) that the concurrent requests of a round hold together.
    type: float
    default: 0.95
  duration:
    description:
      - Seconds to keep sending rounds (a round started is finished). At least one round runs.
      - Mutually exclusive with O(rounds); with neither, one round runs.
    type: float
  rounds:
    description: Number of rounds to send. Mutually exclusive with O(duration).
    type: int
  max_new_tokens:
    description: Tokens generated per request.
    type: int
    default: 32
  concurrency:
    description: Most requests in flight at once; default and cap the server's C(max_running_requests).
    type: int
  request_timeout:
    description: Seconds to wait for one answer.
    type: float
    default: 120
  sample_interval:
    description:
      - Seconds between GPU memory samples.
      - Longer where a sample takes more than a fifth of it, as through nvidia-smi, which starts a process or two per
        sample. The sampler then waits four times what a sample took, and so never takes more than a fifth of a CPU
        core from the server under load. NVML's samples take about a millisecond.
    type: float
    default: 0.1
  seed:
    description: Seed of the random prompts; random when not set.
    type: int
  also_urls:
    description:
      - Other servers loaded at the same time, each as this one (the same O(fill_ratio), O(duration) and API key),
        such as servers that share this one's GPUs, whose activations meet on them under load.
      - The result is this server's, held only when every one of them held too; RV(min_free_gib_per_gpu) is the
        least any run saw, and C(also) holds each one's own result.
    type: list
    elements: str
    default: []
  gpus:
    description:
      - The indices of the server's GPUs; only they are sampled. On a host with several servers (C(sglang@a) on
        GPUs 0-3, C(sglang@b) on 4-7) the other server's GPUs say nothing about this one's headroom.
      - Not set, every GPU of the host is sampled.
    type: list
    elements: int
  watch_units:
    description:
      - With O(gpus), the systemd units whose processes are the servers on those GPUs (the loaded one first, then
        its neighbours); meanwhile the GPUs' compute processes are watched every second, and what processes outside
        those units hold there is returned (RV(other_memory_seen)). Memory another process takes or gives back
        during the load changes the headroom measured.
    type: list
    elements: str
    default: []
extends_documentation_fragment:
  - llmserve.sglang.attributes
  - llmserve.sglang.gpu_probe
seealso:
  - module: llmserve.sglang.gpu_info
  - module: llmserve.sglang.sglang_startup_facts
"""

EXAMPLES = r"""
- name: Fill 95% of the KV pool for 60 seconds
  llmserve.sglang.kv_stress:
    duration: 60
  register: stress

- name: The server must survive with 1 GiB to spare
  ansible.builtin.assert:
    that:
      - stress.held
      - stress.min_free_gib >= 1
    fail_msg: "{{ stress.failure_reason }} (least free {{ stress.min_free_gib }} GiB)"

- name: Three rounds against a server with an API key
  llmserve.sglang.kv_stress:
    url: http://127.0.0.1:30000
    api_key: "{{ sglang_api_key }}"
    rounds: 3
    fill_ratio: 0.9
"""

RETURN = r"""
other_memory_seen:
  description:
    - With O(watch_units), per GPU of O(gpus), the least and most bytes that processes outside those units held there
      during the load, and those processes; V(null) when not watched or no sample was taken.
    - C(unlisted_min_bytes) and C(unlisted_max_bytes) are the least and most of the GPU's used memory that no listed
      process held, as two samples in a row agree (the total and the processes are two reads); V(null) before two
      samples or without totals.
  returned: success
  type: list
  elements: dict
  sample: [{"gpu": 0, "min_bytes": 0, "max_bytes": 2147483648, "unlisted_min_bytes": 0, "unlisted_max_bytes": 0,
            "processes": [{"pid": 91000, "name": "python3", "max_bytes": 2147483648}]}]
held:
  description: Whether every request was answered and the server was alive at the end.
  returned: success
  type: bool
  sample: true
errors:
  description: The failed requests.
  returned: success
  type: dict
  contains:
    count:
      description: How many requests failed.
      type: int
      sample: 0
    messages:
      description: The first few failure messages.
      type: list
      elements: str
      sample: ["ConnectionRefusedError: [Errno 111] Connection refused"]
requests_completed:
  description: Requests answered with a generation.
  returned: success
  type: int
  sample: 126
peak_tokens_held:
  description:
    - The most KV tokens held at once, from C(/get_load) or, when larger, the tokens of the first round (all of its
      requests fit the pool at once).
  returned: success
  type: int
  sample: 151308
pool_tokens:
  description: The server's C(max_total_num_tokens).
  returned: success
  type: int
  sample: 159282
fill_reached:
  description: RV(peak_tokens_held) / RV(pool_tokens).
  returned: success
  type: float
  sample: 0.9499
min_free_gib_per_gpu:
  description: The least free memory of each GPU during the run, in GiB, keyed by GPU index.
  returned: success
  type: dict
  sample: {"0": 4.273, "1": 4.275}
min_free_gib:
  description: The least free memory of any GPU during the run, in GiB; V(null) when no sample was taken.
  returned: success
  type: float
  sample: 4.273
also:
  description: With O(also_urls), each other server's own result (C(held), C(failure_reason), C(pool_tokens),
    C(fill_reached), C(requests_completed), C(server_alive_at_end)), by URL.
  returned: with O(also_urls)
  type: dict
samples:
  description: Number of GPU memory samples taken.
  returned: success
  type: int
  sample: 25
server_alive_at_end:
  description: Whether the server answered C(/get_server_info) after the load.
  returned: success
  type: bool
  sample: true
throughput_tokens_per_s:
  description: Prompt and generated tokens of the answered requests per second of the run.
  returned: success
  type: float
  sample: 427947.9
duration_s:
  description: Seconds the run took.
  returned: success
  type: float
  sample: 2.475
failure_reason:
  description: Why the load did not hold; V(null) when it held.
  returned: success
  type: str
  sample: "the server stopped answering under load (RemoteDisconnected: Remote end closed connection without response)"
rounds:
  description: Rounds sent.
  returned: success
  type: int
  sample: 7
plan:
  description: The requests of one round.
  returned: success
  type: dict
  sample: {"requests": 18, "input_tokens": 8374, "max_new_tokens": 32, "target_tokens": 151317, "planned_tokens": 151308}
probe_errors:
  description: The first few GPU probe failures (the load runs on without samples).
  returned: success
  type: list
  elements: str
  sample: []
"""

import threading

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmserve.sglang.plugins.module_utils.host.gpu_probe import PREFER_CHOICES, free_memory_sampler
from ansible_collections.llmserve.sglang.plugins.module_utils.host.gpu_watch import start_watch
from ansible_collections.llmserve.sglang.plugins.module_utils.host.host_commands import C_LOCALE
from ansible_collections.llmserve.sglang.plugins.module_utils.host.kv_stress import KvStressError, merge_runs, run_stress


def build_module() -> AnsibleModule:
    return AnsibleModule(
        argument_spec=dict(
            url=dict(type="str", default="http://127.0.0.1:30000"),
            api_key=dict(type="str", no_log=True),
            fill_ratio=dict(type="float", default=0.95),
            duration=dict(type="float"),
            rounds=dict(type="int"),
            max_new_tokens=dict(type="int", default=32, no_log=False),
            concurrency=dict(type="int"),
            request_timeout=dict(type="float", default=120),
            sample_interval=dict(type="float", default=0.1),
            nvidia_smi=dict(type="path"),
            prefer=dict(type="str", choices=list(PREFER_CHOICES), default="auto"),
            seed=dict(type="int"),
            gpus=dict(type="list", elements="int"),
            watch_units=dict(type="list", elements="str", default=[]),
            also_urls=dict(type="list", elements="str", default=[]),
        ),
        mutually_exclusive=[("duration", "rounds")],
        supports_check_mode=False,
    )


def main() -> None:
    module = build_module()
    params = module.params

    def run_command(argv):
        return module.run_command(argv, environ_update=C_LOCALE)

    read_gpus = free_memory_sampler(run_command=run_command, nvidia_smi=params["nvidia_smi"], prefer=params["prefer"],
                                    which=module.get_bin_path)

    def sample():
        gpus = read_gpus()
        if params["gpus"] is None:
            return gpus
        return [gpu for gpu in gpus if gpu["index"] in params["gpus"]]

    def load(url):
        return run_stress(base_url=url, api_key=params["api_key"], fill_ratio=params["fill_ratio"],
                          duration=params["duration"], rounds=params["rounds"], max_new_tokens=params["max_new_tokens"],
                          concurrency=params["concurrency"], request_timeout=params["request_timeout"],
                          sample_interval=params["sample_interval"], probe=sample, seed=params["seed"])

    # Servers that share the GPUs are loaded at the same time: their activations meet on those GPUs.
    others = {}

    def load_other(url):
        try:
            others[url] = load(url)
        except KvStressError as exc:
            others[url] = {"held": False, "failure_reason": str(exc)}

    watch = start_watch(module, params["gpus"], params["watch_units"]) if params["gpus"] and params["watch_units"] \
        else None
    threads = [threading.Thread(target=load_other, args=(url,), daemon=True) for url in params["also_urls"]]
    for thread in threads:
        thread.start()
    try:
        result = load(params["url"])
    except KvStressError as exc:
        module.fail_json(msg=str(exc))
    finally:
        for thread in threads:
            thread.join()
    if params["also_urls"]:
        result = merge_runs(result, others)
    result["other_memory_seen"] = watch.result()["other_memory_seen"] if watch else None
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()

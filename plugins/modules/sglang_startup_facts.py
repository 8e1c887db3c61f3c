#!/usr/bin/python
# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_startup_facts
short_description: Read an SGLang server's startup log and return its memory facts and failure diagnosis
version_added: 1.0.0
author:
  - llmserve.sglang contributors (@llmserve)
description:
  - Reads the startup log of an SGLang server, from the journal of a systemd unit, from a file or from
    a string, and returns what SGLang measured while it started, per GPU rank and aggregated the way
    SGLang itself sizes the KV cache.
  - The aggregated values are the ones the C(--mem-fraction-static) formula uses. RV(pre_load_free_gib) is
    P, the free memory before the weights load (MIN over ranks). RV(post_load_free_gib) is A, the free memory
    after the weights (MIN over ranks). RV(weights_gib) is the MAX over ranks, and RV(kv_tokens) the MIN
    over ranks.
  - Both log formats are read. The classic format prints C(Load weight end. type=...). The current one prints
    C(Load weight end. elapsed=...) and C(Capture target decode CUDA graph end). Rank tags such as
    C(TP3), C(DP1 TP1 EP1) or C(ATTN_CP0) and untagged TP1 lines are read, with or without millisecond
    timestamps, and also when journald or another prefix sits in front of the SGLang record.
  - When the log holds several starts (a journal across restarts), only the last start is described; RV(boots)
    says how many were seen.
  - A start that failed is not a module failure. RV(failure) names the kind, quotes the line that proves it and
    says what to change (for example V(init_oom) means raise C(--mem-fraction-static), V(capture_oom) and
    V(runtime_oom) mean lower it).
  - When another process allocated on the GPUs while SGLang loaded, the log's numbers are wrong. RV(untrusted) then
    says why, with the numbers, and the module warns. The checks are ranks of one pipeline stage that report
    different weights, and, with O(checkpoint_bytes), weights memory far above the checkpoint's share per GPU.
  - Values the log does not hold are V(null). The facts are returned at the top level of the result, not as
    C(ansible_facts); register the result to use them.
  - The module only reads, and always reports RV(ignore:changed=false).
requirements:
  - For O(unit), C(journalctl) and C(systemctl) on the managed host, and the right to read the unit's journal.
extends_documentation_fragment:
  - llmserve.sglang.attributes
  - llmserve.sglang.attributes.read_only
options:
  unit:
    description:
      - The systemd unit that runs the SGLang server, for example V(sglang.service).
      - The module reads the journal of the unit's current (or last) start only. It asks
        C(systemctl show -p InvocationID --value) for the invocation ID and runs
        C(journalctl _SYSTEMD_INVOCATION_ID=<id> -o cat --no-pager).
      - When the unit has no invocation ID or that query returns nothing, it falls back to
        C(journalctl -b -u <unit> -o cat --no-pager), and the last start in that journal is described.
      - Mutually exclusive with O(path) and O(text).
    type: str
  invocation_id:
    description:
      - With O(unit), the start to read (its C(InvocationID)) instead of the unit's current one, so that a start that
        died and was started again by systemd's C(Restart=) is still read, for example the one a trial made.
      - Nothing is read from other starts, and the module fails when that start's journal is empty.
    type: str
    version_added: 1.0.0
  path:
    description:
      - A file that holds the server's log (stdout and stderr of C(sglang.launch_server) or C(sglang serve)).
      - Mutually exclusive with O(unit) and O(text).
    type: path
  checkpoint_bytes:
    description:
      - The model checkpoint's size in bytes (C(metadata.total_size) of its C(model.safetensors.index.json)).
      - With it, a weights memory far above the checkpoint's share per GPU is reported in RV(untrusted).
    type: int
  text:
    description:
      - The log itself, for example the output of a command registered earlier.
      - Mutually exclusive with O(unit) and O(path).
    type: str
notes:
  - Free-memory figures are what SGLang printed, in GiB (bytes / 2**30; SGLang writes "GB").
  - A speculative-decoding draft model loads after the target on every rank. Its weights and KV cache are
    reported as RV(draft_weights_gib) and RV(draft_kv_size_gib). They are never mixed into P, A or RV(weights_gib).
seealso:
  - name: SGLang server arguments
    description: What C(--mem-fraction-static), C(--max-total-tokens) and C(--cuda-graph-max-bs) do.
    link: https://docs.sglang.ai/advanced_features/server_arguments.html
"""

EXAMPLES = r"""
- name: Read the facts of the running server's last start
  llmserve.sglang.sglang_startup_facts:
    unit: sglang.service
  register: startup

- name: Stop when the last start failed because the KV budget was empty
  ansible.builtin.fail:
    msg: "{{ startup.failure.kind }}: {{ startup.failure.line }} ({{ startup.failure.advice }})"
  when: startup.failure is not none

- name: Show the memory picture
  ansible.builtin.debug:
    msg: >-
      P={{ startup.pre_load_free_gib }} GiB, weights={{ startup.weights_gib }} GiB,
      A={{ startup.post_load_free_gib }} GiB, KV={{ startup.kv_tokens }} tokens
      ({{ startup.kv_size_gib }} GiB), free after start={{ startup.available_gpu_mem_gib }} GiB

- name: Parse a log file copied from another host
  llmserve.sglang.sglang_startup_facts:
    path: /var/log/sglang/server.log
  register: from_file

- name: Parse a log held in a variable
  llmserve.sglang.sglang_startup_facts:
    text: "{{ server_log.stdout }}"
  register: from_text
"""

RETURN = r"""
source:
  description: Where the log came from (V(unit:<name>) with the invocation ID when known, V(path:<file>) or V(text)).
  returned: success
  type: str
  sample: "unit:sglang.service invocation=9c2d1f0e8a6b4c3d"
format:
  description: The log format of the boot, by its C(Load weight end) line (V(current) prints C(elapsed=)).
  returned: success
  type: str
  choices: [classic, current]
  sample: classic
boots:
  description: How many SGLang starts the text holds; the facts describe the last one.
  returned: success
  type: int
  sample: 1
pre_load_free_gib:
  description: P, free GPU memory before the weights load, MIN over ranks (each rank's first C(Load weight begin)).
  returned: success
  type: float
  sample: 77.43
weights_gib:
  description: Memory the target model's weights took, MAX over ranks (C(mem usage) of C(Load weight end)).
  returned: success
  type: float
  sample: 36.73
post_load_free_gib:
  description: A, free GPU memory after the target's weights, MIN over ranks.
  returned: success
  type: float
  sample: 40.69
kv_tokens:
  description: Tokens in the target's KV pool, MIN over ranks (C(#tokens) of C(KV Cache is allocated)).
  returned: success
  type: int
  sample: 903439
kv_size_gib:
  description: Size of the target's KV pool (K + V, or the MLA KV size), MAX over ranks.
  returned: success
  type: float
  sample: 27.58
kv_dtype:
  description: The KV cache dtype as SGLang printed it (C(Using KV cache dtype) or the KV line).
  returned: success
  type: str
  sample: torch.float8_e4m3fn
memory_pool_end_free_gib:
  description: Free memory after the KV pool was allocated (C(Memory pool end)), MIN over ranks.
  returned: success
  type: float
  sample: 11.22
cuda_graph_gib:
  description: Memory taken by CUDA graphs, summed over every capture kind on a rank, MAX over ranks.
  returned: success
  type: float
  sample: 0.89
post_capture_free_gib:
  description: Free memory after a rank's last graph capture, MIN over ranks.
  returned: success
  type: float
  sample: 10.26
draft_weights_gib:
  description: Memory taken by the speculative draft model's weights, MAX over ranks.
  returned: success
  type: float
  sample: 2.15
draft_kv_tokens:
  description: Tokens in the draft model's KV pool, MIN over ranks.
  returned: success
  type: int
  sample: 20480
draft_kv_size_gib:
  description: Size of the draft model's KV pool, MAX over ranks.
  returned: success
  type: float
  sample: 0.08
swa_tokens:
  description: Sliding-window layers' tokens of a hybrid SWA model (C(swa_layer_tokens)), MIN over ranks.
  returned: success
  type: int
  sample: 1368
full_tokens:
  description: Full-attention layers' tokens of a hybrid SWA model (C(full_layer_tokens)), MIN over ranks.
  returned: success
  type: int
  sample: 1710
mamba_cache_size:
  description:
    - Request slots of a hybrid linear-attention model's state pool (C(max_mamba_cache_size) of the
      C(Mamba Cache is allocated) line), MIN over ranks; V(null) for other models.
  returned: success
  type: int
  sample: 186
mamba_size_gib:
  description: The state pool's conv plus SSM state size, MAX over ranks; V(null) for other models.
  returned: success
  type: float
  sample: 4.48
mem_fraction_static:
  description:
    - The C(--mem-fraction-static) the pool was sized with. SGLang 0.4.x printed its server_args and then reduced
      f for a multimodal model (C(Automatically reduce --mem-fraction-static to X)); this is then X.
    - V(null) when the log has neither line (SGLang's default applied, or the excerpt starts later).
  returned: success
  type: float
  sample: 0.787
mem_fraction_static_logged:
  description: The C(mem_fraction_static) the log's server_args printed, or V(null).
  returned: success
  type: float
  sample: 0.874
mem_fraction_static_source:
  description: Where RV(mem_fraction_static) came from, V(server_args) or V(multimodal_reduction); V(null) when unknown.
  returned: success
  type: str
  sample: multimodal_reduction
untrusted:
  description: Why the log's memory numbers cannot be trusted (another process allocated during the load); empty when they can.
  returned: success
  type: list
  elements: str
  sample: []
max_total_num_tokens:
  description: C(max_total_num_tokens) of the scheduler line; with several DP replicas, the smallest.
  returned: success
  type: int
  sample: 903439
max_running_requests:
  description: C(max_running_requests) of that scheduler line.
  returned: success
  type: int
  sample: 3529
context_len:
  description: C(context_len) of that scheduler line.
  returned: success
  type: int
  sample: 131072
chunked_prefill_size:
  description: C(chunked_prefill_size) of that scheduler line.
  returned: success
  type: int
  sample: 8192
max_prefill_tokens:
  description: C(max_prefill_tokens) of that scheduler line.
  returned: success
  type: int
  sample: 16384
available_gpu_mem_gib:
  description: Free memory when the scheduler was ready (C(available_gpu_mem)), MIN over DP replicas.
  returned: success
  type: float
  sample: 10.26
replicas:
  description: One entry per DP replica's scheduler line (its rank tag and the values of that line).
  returned: success
  type: list
  elements: dict
  sample:
    - tag: TP0
      max_total_num_tokens: 903439
      chunked_prefill_size: 8192
      max_prefill_tokens: 16384
      max_running_requests: 3529
      context_len: 131072
      available_gpu_mem_gib: 10.26
ready:
  description: Whether the boot printed C(The server is fired up and ready to roll!).
  returned: success
  type: bool
  sample: true
failure:
  description: The failure of the boot, or V(null).
  returned: success
  type: dict
  contains:
    kind:
      description: What failed.
      type: str
      choices: [init_oom, capture_oom, weights_oom, runtime_oom, unbalanced_memory, nccl_error, crash]
      sample: init_oom
    line:
      description: The log line that proves it.
      type: str
      sample: "ValueError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.85."
    advice:
      description: What to change.
      type: str
      sample: Raise --mem-fraction-static.
    oom:
      description:
        - The numbers of torch's CUDA or HIP out-of-memory message, in GiB (bytes / 2**30, not rounded).
        - Read from RV(failure.line), or, for V(capture_oom) and V(runtime_oom), from the out-of-memory line of the
          start nearest to it (after the server became ready, when it did).
        - Both torch wordings are read, C(Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of
          which 1.23 GiB is free) and C(Tried to allocate 2.00 GiB (GPU 0; 79.15 GiB total capacity; ...; 1.23 GiB
          free; ...)).
        - "The key is absent when no such line holds both sizes (for example V(init_oom), or a bare
          C(CUDA error: out of memory))."
        - RV(failure.oom.tried_gib) minus RV(failure.oom.free_gib) is how much memory was missing.
      returned: when the message's numbers are in the log
      type: dict
      contains:
        tried_gib:
          description: The allocation that failed (C(Tried to allocate)).
          type: float
          sample: 2.0
        free_gib:
          description: The free memory of that GPU when it failed.
          type: float
          sample: 1.23
        gpu:
          description: The GPU index torch names, or V(null) when the message names none.
          type: int
          sample: 0
server_args:
  description:
    - The C(server_args=ServerArgs(...)) line as a dictionary, or an empty dictionary when the log has none.
    - Values SGLang printed as Python objects other than literals are returned as their text.
  returned: success
  type: dict
  sample:
    model_path: /models/grok-2
    tp_size: 8
    mem_fraction_static: 0.831
ranks:
  description: One entry per rank tag seen in memory records, with that rank's values (the same keys as above, per rank).
  returned: success
  type: list
  elements: dict
  sample:
    - tag: TP0
      pre_load_free_gib: 77.43
      post_load_free_gib: 40.69
      weights_gib: 36.73
      weights_type: Grok1ForCausalLM
      kv_tokens: 903439
      kv_size_gib: 27.58
      cuda_graphs:
        decode: 0.89
tp_size:
  description: How many ranks the log shows memory records for (TP x DP x PP ranks that printed them).
  returned: success
  type: int
  sample: 8
"""

import re

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmserve.sglang.plugins.module_utils.startup.boot_trust import findings
from ansible_collections.llmserve.sglang.plugins.module_utils.startup.startup_log import (
    StartupLogError,
    parse_startup_log,
)


def build_module() -> AnsibleModule:
    return AnsibleModule(
        argument_spec=dict(
            unit=dict(type="str"),
            path=dict(type="path"),
            text=dict(type="str"),
            checkpoint_bytes=dict(type="int"),
            invocation_id=dict(type="str"),
        ),
        mutually_exclusive=[("unit", "path", "text")],
        required_one_of=[("unit", "path", "text")],
        required_by={"invocation_id": "unit"},
        supports_check_mode=True,
    )


def read_unit_journal(module: AnsibleModule, unit: str, invocation: str | None = None) -> tuple[str, str]:
    """The journal text of the unit's last start (or of the start ``invocation``), and where it came from."""
    journalctl = module.get_bin_path("journalctl", required=True)
    systemctl = module.get_bin_path("systemctl")
    if invocation:
        if not re.match(r"^[0-9a-f]{32}$", invocation):
            module.fail_json(msg="invocation_id must be a systemd InvocationID (32 hex digits), got %r" % invocation)
        rc, out, err = module.run_command(
            [journalctl, "_SYSTEMD_INVOCATION_ID=%s" % invocation, "-o", "cat", "--no-pager"])
        if rc != 0 or not out.strip():
            module.fail_json(msg="no journal for start %s of unit %s: %s" % (
                invocation, unit, err.strip() or "journalctl returned nothing (rotated out, or another unit's start)"))
        return out, "unit:%s invocation=%s" % (unit, invocation)
    invocation = ""
    if systemctl:
        rc, out, _err = module.run_command([systemctl, "show", "-p", "InvocationID", "--value", unit])
        if rc == 0:
            invocation = out.strip()
    if invocation:
        rc, out, err = module.run_command(
            [journalctl, "_SYSTEMD_INVOCATION_ID=%s" % invocation, "-o", "cat", "--no-pager"])
        if rc != 0:
            module.fail_json(msg="journalctl failed for unit %s (invocation %s): %s" % (unit, invocation, err.strip()))
        if out.strip():
            return out, "unit:%s invocation=%s" % (unit, invocation)
    rc, out, err = module.run_command([journalctl, "-b", "-u", unit, "-o", "cat", "--no-pager"])
    if rc != 0:
        module.fail_json(msg="journalctl -b -u %s failed: %s" % (unit, err.strip()))
    return out, "unit:%s" % unit


def read_file(module: AnsibleModule, path: str) -> str:
    try:
        with open(path, "rb") as handle:
            return handle.read().decode("utf-8", errors="replace")
    except OSError as exc:
        module.fail_json(msg="cannot read the SGLang log file %s: %s" % (path, exc.strerror or exc))
    return ""  # not reached


def main() -> None:
    module = build_module()
    params = module.params
    if params["unit"]:
        text, source = read_unit_journal(module, params["unit"], params["invocation_id"])
    elif params["path"]:
        text, source = read_file(module, params["path"]), "path:%s" % params["path"]
    else:
        text, source = params["text"], "text"
    try:
        facts = parse_startup_log(text)
    except StartupLogError as exc:
        module.fail_json(msg="%s: %s" % (source, exc), source=source)
    if params["checkpoint_bytes"]:
        facts["untrusted"] = findings(facts, params["checkpoint_bytes"])
    for why in facts["untrusted"]:
        module.warn("the startup log's memory numbers cannot be trusted: %s" % why)
    module.exit_json(changed=False, source=source, **facts)


if __name__ == "__main__":
    main()

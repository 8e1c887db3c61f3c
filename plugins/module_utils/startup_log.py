# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The grammar of SGLang's startup log: text in, memory facts and a failure diagnosis out.

Pure and stdlib only: no I/O. The caller reads the log (a file, a journal) and hands the text in.

Public API
----------
``parse_startup_log(text) -> dict``
    Facts of the **last boot** in ``text`` (see "Boots" below). Raises ``StartupLogError`` when the text holds
    no SGLang boot at all (empty or unrelated text). A boot that failed early is not an error: its facts come
    back with ``failure`` set and the values it never printed as ``None``.
``split_boots(lines) -> list[list[str]]``
    The boots of a log, oldest first (only the boots that hold SGLang records).
``classify_failure(lines) -> dict | None``
    The failure of one boot (``{kind, line, advice[, oom]}``) or ``None``.
``StartupLogError(ValueError)``
    The text holds no SGLang boot.

Line grammar (checked against SGLang's own format strings, both eras)
--------------------------------------------------------------------
Every SGLang record is ``[<asctime>{ rank tags}] <message>``: asctime ``%Y-%m-%d %H:%M:%S``, optionally with
``.mmm`` (``SGLANG_LOG_MS=1``); rank tags are ``DPn``/``PPn``/``TPn``/``EPn`` in that order, plus newer ones
such as ``ATTN_CP0``/``MOE_DP0``; a TP1 scheduler has no tag at all. The record may sit anywhere on the line
(journald ``Nov 30 00:01:02 host python3[1234]: `` and ``docker compose logs`` ``worker-1  | `` prefixes, tqdm
bars without a newline). Lines without the
prefix (tracebacks, copied excerpts) are still read; their rank is the untagged one (``""``).

The lines below are read through the table ``_LINE_HANDLERS`` of (pattern, handler) rows: each line goes to
the first row whose pattern it matches; a new kind of line is one more row and one more handler.

- ``server_args=ServerArgs(...)``: read by module_utils/server_args.py (without eval, secrets redacted)
- ``Load weight begin. avail mem=X GB``                                       -> P of that rank
- classic ``Load weight end. type=C, dtype=D, avail mem=A GB, mem usage=W GB.`` (older: no ``mem usage``)
  current ``Load weight end. elapsed=S s, type=C, [dtype=D, | <quant>, ]avail mem=A GB, mem usage=W GB.``
- ``Using KV cache dtype: torch.X``
- ``[<label> ]KV Cache is allocated. [dtype: D, ]#tokens: N, K size: x GB, V size: y GB`` (MHA/GQA) or
  ``..., KV size: x GB`` (MLA); ``VA upper bound`` instead of ``is allocated`` with post-capture sizing.
- ``Memory pool end. avail mem=X GB``
- classic ``Capture [piecewise |draft |draft extend ]cuda graph end. Time elapsed: T s. mem usage=M GB. avail mem=Z GB.``
  current ``Capture <role> <phase> CUDA graph end. elapsed=T s, mem usage=M GB, avail mem=Z GB.``
- ``max_total_num_tokens=N, chunked_prefill_size=C, max_prefill_tokens=P, max_running_requests=R,
  context_len=L, available_gpu_mem=X GB`` (older versions print fewer keys; every key present is read)
- ``Use sliding window memory pool. full_layer_tokens=F, swa_layer_tokens=S`` (case-insensitive)
- ``Mamba Cache is allocated. [max_mamba_cache_size: K, ]conv_state size: x GB, ssm_state size: y GB`` (the state
  pool of a hybrid linear-attention model)
- ``Automatically reduce --mem-fraction-static to X because this is a multimodal model`` (SGLang 0.4.x: the pool is
  sized with X, not with the server_args value)
- ``The server is fired up and ready to roll!``

Aggregation (one boot)
----------------------
P (``pre_load_free_gib``) = MIN over ranks of each rank's first ``Load weight begin``; A (``post_load_free_gib``)
= MIN over ranks of each rank's first ``Load weight end``; ``weights_gib`` = MAX over ranks of its ``mem usage``;
``kv_tokens`` = MIN over ranks of the first KV line's ``#tokens``; ``kv_size_gib`` = MAX over ranks of K+V (or KV)
size; ``cuda_graph_gib`` = MAX over ranks of the SUM of every capture kind's ``mem usage`` on that rank (draft and
piecewise graphs included). A rank's second ``Load weight``/KV line (or one whose class or label names a draft:
Eagle, MTP, NextN, Draft) is the speculative draft model's and goes to the ``draft_*`` facts, never to P, A or
the weights. ``max_total_num_tokens`` and its companions come from the scheduler line of each DP replica
(``replicas``); the top-level values are those of the replica with the fewest tokens,
``available_gpu_mem_gib`` is the MIN over replicas.

Boots
-----
A new boot starts at a line that is
  1. a ``server_args=ServerArgs(`` line, when the current boot already holds a ``server_args`` line or a
     weight-load/distributed-init record; or
  2. a systemd start line for a unit (``Starting x.service``/``Started x.service``, with or without a
     ``systemd[1]:`` journald prefix), when the current boot already holds SGLang records; or
  3. an ``Init torch distributed begin.``/``Init parallel begin``/``Load weight begin.`` record while the current
     boot has ended: it printed ``The server is fired up and ready to roll!``, a fatal marker (``Scheduler hit
     an exception``, ``Rank N scheduler is dead``, ``Initialization failed``, ``Received sigquit``,
     ``Exit code:``) or a systemd stop/exit line for the unit.
A draft model's second ``Init torch distributed``/``Load weight begin`` inside a running boot does not start a boot.
Boots without any SGLang record (for example only systemd lines) are dropped. The facts describe the last boot;
``boots`` counts the boots seen.

Failures
--------
``failure`` is ``None`` when the boot became ready and nothing failed after that, or when it simply stops
(truncated, still loading). Otherwise it is ``{kind, line, advice}``, where ``line`` is the log line that proves
it. Kinds, in order of precedence (within a kind, proof by a phase line or by frames beats proof by position, and
then the earliest proof wins):

- ``init_oom``: the KV budget is <= 0: ``Not enough memory. Please try to increase --mem-fraction-static``,
  ``Loaded weights leave no GPU memory for the KV cache``, ``Memory pool size is too small``, ``Not enough GPU
  memory for hybrid``, or ``max_total_tokens=... is larger than the profiled value -N`` (a negative profile);
- ``capture_oom``: SGLang's own ``Capture cuda graph failed: ... out of memory`` (it wins over an earlier bare OOM
  traceback of the same failure), or a CUDA/HIP OOM while a graph capture runs (between a ``Capture ... graph
  begin`` and its end on that rank) or in a traceback through the capture path (``in capture``,
  ``capture_one_batch_size``, a graph runner's ``__init__``; a graph *replay* does not count);
- ``weights_oom``: a CUDA/HIP OOM with positive evidence of the weight load, before the KV pool exists: a traceback
  through the model loader (``load_model``, ``load_weights``, ``model_loader/``), or a rank between its ``Load
  weight begin`` and ``Load weight end``;
- ``runtime_oom``: any other CUDA/HIP OOM: after ``ready``; in a traceback through the serving loop
  (``event_loop_*``, ``run_batch``, ``forward_thread_func``, ``forward_batch_generation``, ...), with or without a
  KV line before it; after the KV pool exists (draft load, warm-up); or with nothing that proves the phase
  (lowering --mem-fraction-static is the safe answer then);
- ``unbalanced_memory``: ``The memory capacity is unbalanced`` (an error in classic SGLang, a warning later: it
  only counts when the boot did not become ready);
- ``nccl_error``: ``NCCL error``, ``ncclInternalError``/``ncclSystemError``/..., ``NCCL WARN``,
  ``DistBackendError``;
- ``crash``: any other fatal marker, a ``Capture cuda graph failed`` that is not an OOM, or a traceback that ends
  the boot.
SGLang's own "out of memory" messages about the KV *pool* (``Decode out of memory``, ``alloc_req_slots runs
out of memory``) are not device OOMs and classify as ``crash``.

``oom``: when the proving line (or, for ``capture_oom`` and ``runtime_oom``, the nearest CUDA/HIP OOM line of the
boot; after ``ready`` only, in a boot that became ready) holds torch's allocator numbers, the failure also has
``"oom": {"tried_gib": float, "free_gib": float, "gpu": int | None}``: the allocation that failed and the free
memory of that GPU, in GiB (bytes / 2**30, unrounded), ``gpu`` the index torch names. Without both numbers on one
line there is no ``oom`` key (a message reflowed over several lines gives none). ``tried_gib - free_gib`` is what
was missing. Both torch wordings are read: 2.x ``Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15
GiB of which 1.23 GiB is free.`` and 1.x ``Tried to allocate 2.00 GiB (GPU 0; 79.15 GiB total capacity; ...; 1.23
GiB free; ...)``, sizes in ``bytes``/``B``/``KiB``/``MiB``/``GiB``/``TiB``.
"""
from __future__ import annotations

import re

from ansible_collections.llmserve.sglang.plugins.module_utils.boot_trust import findings as untrusted_findings
from ansible_collections.llmserve.sglang.plugins.module_utils.server_args import from_log_line as server_args_from_log_line

__all__ = [
    "StartupLogError",
    "FAILURE_KINDS",
    "parse_startup_log",
    "split_boots",
    "classify_failure",
]


class StartupLogError(ValueError):
    """The text holds no SGLang startup record at all (empty or unrelated text)."""


# --------------------------------------------------------------------------------------------------------------
# Line grammar
# --------------------------------------------------------------------------------------------------------------

# [2025-08-11 02:15:02] / [2026-02-26 16:41:05 TP1] / [2026-05-07 13:39:14 DP1 TP1 EP1] / [.. 12:00:00.123 TP0]
# Older SGLang printed time only ([22:30:52 TP0]); some excerpts drop the year ([07-01 15:20:44]).
_PREFIX = re.compile(
    r"\[(?:\d{4}-)?(?:\d\d-\d\d[ T])?\d\d:\d\d:\d\d(?:[.,]\d{1,6})?(?P<tags>(?: [A-Z][A-Z_]*\d+)*)\] ?"
)
_NUM = r"(-?\d+(?:\.\d+)?)"

_SERVER_ARGS = re.compile(r"server_args=ServerArgs\(")
_LW_BEGIN = re.compile(r"Load weight begin\. avail mem=" + _NUM + r" GB")
_LW_END = re.compile(r"Load weight end\.(?P<rest>.*)")
_INIT_BEGIN = re.compile(r"Init (?:torch distributed|parallel) begin")
_KV_DTYPE = re.compile(r"Using KV cache dtype: (\S+)")
_KV_ALLOC = re.compile(
    r"(?P<label>[\w\- ]*?)\s*KV Cache (?:is allocated|VA upper bound)\.\s*(?:dtype: (?P<dtype>[^,\s]+),\s*)?"
    r"(?:#tokens: (?P<tokens>\d+),\s*)?"
    r"(?:K size: (?P<k>[\d.]+) GB, V size: (?P<v>[\d.]+) GB|KV size: (?P<kv>[\d.]+) GB)"
)
_POOL_END = re.compile(r"Memory pool end\. avail mem=" + _NUM + r" GB")
_CAPTURE_BEGIN = re.compile(r"\bCapture\b(?P<name>[^.]*?)\bgraph begin\b", re.IGNORECASE)
_CAPTURE_END = re.compile(r"\bCapture\b(?P<name>[^.]*?)\bgraph end\b(?P<rest>.*)", re.IGNORECASE)
_CAPTURE_DEVICE = re.compile(r"\b(?:cuda|npu|cpu|xpu|hip|musa)\b", re.IGNORECASE)
_MAX_TOTAL = re.compile(r"^(?:\[gpu_id=\d+\] )?max_total_num_tokens=\d+")
_KEY_VALUE = re.compile(r"(\w+)=(-?\d+(?:\.\d+)?)")
_SWA = re.compile(r"use sliding window memory pool\. full_layer_tokens=(\d+), swa_layer_tokens=(\d+)",
                  re.IGNORECASE)
_SWA_POOL = re.compile(r"SWAKVPool mem usage: ([\d.]+) GB, swa size: (\d+), full size: (\d+)")
_AVAILABLE_MEM = re.compile(r"available_(?:gpu|cpu)_mem=" + _NUM + r" GB")
_READY = re.compile(r"The server is fired up and ready to roll!")
_MM_REDUCE = re.compile(r"Automatically reduce --mem-fraction-static to ([\d.]+) because this is a multimodal model")
_MAMBA = re.compile(r"Mamba Cache is allocated\.\s*(?:max_mamba_cache_size: (\d+),\s*)?conv_state size: ([\d.]+) ?GB,"
                    r"\s*ssm_state size: ([\d.]+) ?GB")
_FIELD = {
    "elapsed": re.compile(r"elapsed=" + _NUM + r" ?s\b"),
    "type": re.compile(r"type=([\w.]+)"),
    "dtype": re.compile(r"dtype=(torch\.\w+)"),
    "avail": re.compile(r"avail mem=" + _NUM + r" GB"),
    "usage": re.compile(r"mem usage=" + _NUM + r" GB"),
}
_DRAFT_CLASS = re.compile(r"eagle|draft|mtp|nextn", re.IGNORECASE)

# journalctl -o short / short-iso / short-precise prefixes: "Nov 30 00:01:02 host ident[pid]: ", and the service
# prefix of `docker compose logs`.
_JOURNAL_PREFIX = re.compile(
    r"^(?:[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d(?:\.\d+)?|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:[+-]\d\d:?\d\d|Z)?)"
    r" \S+ [^\s:\[]+(?:\[\d+\])?: "
    r"|^[A-Za-z0-9][\w.-]*[-_]\d+ +\| "  # docker compose logs: "worker-1  | "
)
# systemd, as journalctl prints it with or without its prefix ("-o cat" drops it).
_SYSTEMD_START = re.compile(r"(?:^|systemd\[\d+\]: )(?:Starting|Started) \S+\.service\b")
_SYSTEMD_END = re.compile(
    r"(?:(?:^|systemd\[\d+\]: )(?:Stopping|Stopped) \S+\.service\b)"
    r"|(?:\S+\.service: (?:Main process exited|Failed with result|Deactivated successfully|"
    r"Scheduled restart job|Killing process))"
)

# Failure evidence.
_INIT_OOM = re.compile(
    r"Not enough memory\. Please try to increase --mem-fraction-static"
    r"|Loaded weights leave no GPU memory for the KV cache"
    r"|Memory pool size is too small"
    r"|Not enough GPU memory for hybrid"
)
_NEGATIVE_PROFILE = re.compile(r"is larger than the profiled value (-\d+)\.")
_CAPTURE_FAILED = re.compile(r"Capture (?:cuda|CUDA) graph failed")
_DEVICE_OOM = re.compile(
    r"OutOfMemoryError|(?:CUDA|HIP|NPU|XPU|MUSA) out of memory|CUDA error: out of memory"
    r"|memory allocation failed with OOM"
)
# The numbers of torch's allocator message, read after the OOM marker. torch 2.x: "Tried to allocate 2.00 GiB. GPU 0
# has a total capacity of 79.15 GiB of which 1.23 GiB is free." (2.1 wrote "capacty"); torch 1.x: "Tried to allocate
# 2.00 GiB (GPU 0; 79.15 GiB total capacity; ...; 1.23 GiB free; ...)". Sizes <= 1 KiB are "N bytes".
_OOM_SIZE = r"(\d+(?:\.\d+)?) ?(bytes|B|KiB|MiB|GiB|TiB)\b"
_OOM_TRIED = re.compile(r"Tried to allocate " + _OOM_SIZE)
_OOM_FREE = re.compile(r"(?:of which|;) " + _OOM_SIZE + r" (?:is )?free\b")
_OOM_GPU = re.compile(r"\bGPU (\d+)(?: has a total|;)")
_GIB_PER_UNIT = {"bytes": 2.0 ** -30, "B": 2.0 ** -30, "KiB": 2.0 ** -20, "MiB": 2.0 ** -10, "GiB": 1.0,
                 "TiB": 2.0 ** 10}
_UNBALANCED = re.compile(r"The memory capacity is unbalanced")
_NCCL = re.compile(
    r"NCCL error|\bnccl(?:InternalError|SystemError|UnhandledCudaError|InvalidUsage|InvalidArgument|"
    r"RemoteError)\b|NCCL WARN|DistBackendError"
)
_FATAL = re.compile(
    r"hit an exception"  # Scheduler / TpModelWorkerClient / DetokenizerManager hit an exception
    r"|Rank \d+ scheduler is dead"
    r"|Initialization failed\. Please see the error messages above"
    r"|Failed to initialize scheduler rank"
    r"|Received sigquit from a child process"
    r"|SIGQUIT received"
    r"|Child process unexpectedly failed"
    r"|\bExit code: -?\d+"
)
_TRACEBACK = re.compile(r"Traceback \(most recent call last\)")
_EXCEPTION_LINE = re.compile(r"^\s*((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception))(?::|$)")
_FRAME_LINE = re.compile(r"^\s*File \"")
# Frames that prove the phase of an exception. Capture: the graph runners' capture path (a graph *replay* while
# serving runs through the same files, so their names alone do not count). Serving: the scheduler's loop and the
# worker thread that runs its batches. Weights: the model loader.
_CAPTURE_FRAME = re.compile(r"\bin (?:capture\w*|_capture\w*|\w*_capture|init_device_graphs|init_cuda_graphs|"
                            r"init_piecewise_cuda_graphs|warmup_and_capture)\b|graph_runner\.py\", line \d+, in __init__")
_SERVING_FRAME = re.compile(r"\bin (?:event_loop_\w+|run_batch|forward_thread_func_?|process_batch_result\w*|"
                            r"forward_batch_generation|recv_requests|handle_generate_request)\b")
_WEIGHTS_FRAME = re.compile(r"\bin (?:load_model|load_weights\w*|get_model|_load_weights\w*|load_weights_and_postprocess)\b"
                            r"|model_loader/")
_SGLANG_MARKER = re.compile(
    r"server_args=ServerArgs\(|Load weight (?:begin|end)\.|Init (?:torch distributed|parallel) (?:begin|end)"
    r"|KV Cache (?:is allocated|VA upper bound)|Memory pool end\.|Capture\b[^.]*\bgraph (?:begin|end|failed)"
    r"|max_total_num_tokens=|The server is fired up|sliding window memory pool|SWAKVPool"
    r"|sglang/|sglang\.(?:srt|launch_server)|sglang is using nccl",
    re.IGNORECASE,
)

FAILURE_KINDS = {
    "init_oom": (
        "The KV-cache budget A - P*(1-f) is <= 0: after the weights load nothing is left for the KV pool at this "
        "--mem-fraction-static. Raise --mem-fraction-static (or use more GPUs, a smaller/quantized model, or "
        "an fp8 KV cache)."
    ),
    "capture_oom": (
        "CUDA-graph capture ran out of GPU memory: the headroom P*(1-f) left outside the KV pool is too small. "
        "Lower --mem-fraction-static, or lower --cuda-graph-max-bs."
    ),
    "weights_oom": (
        "The GPU ran out of memory while loading the model weights, before the KV pool exists: "
        "--mem-fraction-static cannot help. Use more GPUs (a larger --tp-size), a smaller or quantized model, "
        "or free the GPUs of other processes."
    ),
    "runtime_oom": (
        "The GPU ran out of memory outside weight loading and graph capture (draft model, warm-up or serving): "
        "the headroom P*(1-f) is too small for the activations. Lower --mem-fraction-static."
    ),
    "unbalanced_memory": (
        "Free GPU memory differs by more than 10% between ranks: another process holds memory on some GPUs. "
        "Free those GPUs (see nvidia-smi) before starting; SGLang sizes every rank by the smallest."
    ),
    "nccl_error": (
        "Collective communication (NCCL) failed: check the driver, NCCL version, GPU topology/P2P and shared "
        "memory (run with NCCL_DEBUG=INFO). This is not a --mem-fraction-static problem."
    ),
    "crash": (
        "SGLang failed for a reason that is not a memory budget: read the quoted line and its traceback. "
        "Changing --mem-fraction-static will not fix it."
    ),
}
_PRECEDENCE = {"init_oom": 0, "capture_oom": 1, "weights_oom": 1, "runtime_oom": 1,
               "unbalanced_memory": 2, "nccl_error": 3, "crash": 4}


# --------------------------------------------------------------------------------------------------------------
# Records
# --------------------------------------------------------------------------------------------------------------

def _strip_journal(line):
    """The line without a journald prefix (``Nov 30 00:01:02 host python3[1234]: `` or its ISO form)."""
    match = _JOURNAL_PREFIX.match(line)
    return line[match.end():] if match else line


def _split_record(line):
    """Return (tag, message) of one log line.

    ``tag`` is the rank tag (``"TP0"``, ``"DP1 TP1 EP1"``, ``""`` for an untagged record) or ``None`` when the line
    carries no SGLang prefix; ``message`` is the text after the last prefix (otherwise the stripped line without a
    journald prefix).
    """
    last = None
    for last in _PREFIX.finditer(line):
        pass
    if last is None:
        return None, _strip_journal(line).strip()
    return last.group("tags").strip(), line[last.end():].strip()


def _proof(line):
    """A log line as quoted in ``failure.line``: stripped, without a journald prefix."""
    return _strip_journal(line).strip()


def _is_start_event(message):
    return bool(_INIT_BEGIN.search(message) or _LW_BEGIN.search(message))


def _has_sglang(line):
    return bool(_SGLANG_MARKER.search(line) or _INIT_OOM.search(line) or _CAPTURE_FAILED.search(line)
                or _FATAL.search(line))


def split_boots(lines):
    """Split log lines into boots, oldest first; see the module docstring ("Boots") for the rules.

    Only boots that hold at least one SGLang record are returned.
    """
    boots = []
    current, has_sglang, has_start, ended = [], False, False, False
    for raw in lines:
        _tag, message = _split_record(raw)
        # Each pattern is searched at most once a line: a journal of many restarts is mostly lines that match none.
        is_args = bool(_SERVER_ARGS.search(message))
        is_start = is_args or _is_start_event(message)
        new_boot = False
        if is_args:
            new_boot = has_start
        elif ".service" in raw and _SYSTEMD_START.search(raw):
            new_boot = has_sglang
        elif is_start:
            new_boot = ended
        if new_boot:
            boots.append((current, has_sglang))
            current, has_sglang, has_start, ended = [], False, False, False
        current.append(raw)
        if not has_sglang and _has_sglang(raw):
            has_sglang = True
        has_start = has_start or is_start
        if not ended and (_READY.search(message) or _FATAL.search(message)
                          or (has_sglang and ".service" in raw and _SYSTEMD_END.search(raw))):
            ended = True
    boots.append((current, has_sglang))
    return [b for b, sglang in boots if sglang]


# --------------------------------------------------------------------------------------------------------------
# Failures
# --------------------------------------------------------------------------------------------------------------

def _capture_name(name):
    """'' (classic target decode), 'piecewise', 'draft', 'draft extend', 'target decode', 'target verify', ..."""
    name = _CAPTURE_DEVICE.sub(" ", name)
    name = " ".join(name.lower().split())
    return name or "decode"


def _first_exception_after(lines, start):
    """The first Python exception line (``TypeError: ...``) at or after ``start``, stripped, or None."""
    for line in lines[start:start + 400]:
        _tag, message = _split_record(line)
        if _EXCEPTION_LINE.match(message) and not _TRACEBACK.search(message):
            return _proof(line)
    return None


def _oom_numbers(line):
    """``{tried_gib, free_gib, gpu}`` of a torch allocator OOM message on ``line``, or None without both sizes."""
    marker = _DEVICE_OOM.search(line)
    if not marker:
        return None
    rest = line[marker.end():]
    tried, free = _OOM_TRIED.search(rest), _OOM_FREE.search(rest)
    if not (tried and free):
        return None
    gpu = _OOM_GPU.search(rest)
    # A power-of-two factor: the GiB value is exactly the printed number, scaled.
    return {"tried_gib": float(tried.group(1)) * _GIB_PER_UNIT[tried.group(2)],
            "free_gib": float(free.group(1)) * _GIB_PER_UNIT[free.group(2)],
            "gpu": int(gpu.group(1)) if gpu else None}


def _nearest_oom_numbers(lines, index, after):
    """The numbers of the OOM line nearest to ``lines[index]`` (the earlier one on a tie) past index ``after``."""
    best = None
    for other, line in enumerate(lines):
        if other <= after or (best is not None and abs(other - index) >= best[0]):
            continue
        numbers = _oom_numbers(line)
        if numbers:
            best = (abs(other - index), numbers)
    return best[1] if best else None


def _oom_kind(ready, capturing, frames, loading, kv_allocated):
    """(kind, proven) of a device OOM: the phase the boot was in, and whether a phase line or the traceback's frames
    prove it (True) or only its position after the KV pool does (False)."""
    if ready:
        return "runtime_oom", True
    if capturing or frames == "capture":
        return "capture_oom", True
    if frames == "serving":
        return "runtime_oom", True
    if not kv_allocated and (frames == "weights" or loading):
        return "weights_oom", True
    # After the KV pool (a draft model, warm-up), or with nothing that says the weights were loading: --mem-fraction-
    # static may cure it, and lowering it is the safe way to find out.
    return "runtime_oom", False


def classify_failure(lines):
    """Classify the failure of one boot (a list of log lines); see the module docstring ("Failures").

    Returns ``None`` or ``{"kind": ..., "line": ..., "advice": ...}``, plus ``"oom": {...}`` when the numbers of
    the device OOM are known (module docstring, "Failures").
    """
    evidence = []  # (precedence, 0 proven by a phase line or frames / 1 by position, index, kind, line)
    kv_allocated = False
    capturing = set()  # ranks between a "Capture ... graph begin" and its "end"
    loading = set()  # ranks between a "Load weight begin" and its "end"
    ready_at = None
    terminal = False  # the boot ended: fatal marker, systemd stop/exit, or a device/budget OOM
    frames, after_frame = None, False  # the phase the current traceback's frames prove
    last_exception = -1  # the last Python exception line ("TypeError: ...") outside traceback frames
    weak_tracebacks = []  # tracebacks without a fatal marker: a failure only if nothing progresses after them
    last_progress = -1

    def add(kind, index, line, proven=True):
        evidence.append((_PRECEDENCE[kind], 0 if proven else 1, index, kind, _proof(line)))

    for index, raw in enumerate(lines):
        tag, message = _split_record(raw)
        rank = tag or ""
        # --- progress -----------------------------------------------------------------------------------------
        progress = True
        if _KV_ALLOC.search(message) or _POOL_END.search(message):
            kv_allocated = True
        elif _CAPTURE_BEGIN.search(message):
            capturing.add(rank)
        elif _CAPTURE_END.search(message):
            capturing.discard(rank)
        elif _READY.search(message):
            ready_at = index
        elif _LW_BEGIN.search(message):
            loading.add(rank)
        elif _LW_END.search(message):
            loading.discard(rank)
        elif not _MAX_TOTAL.search(message):
            progress = False
        if progress:
            last_progress = index
        # --- tracebacks: read the frames, skip their source lines ----------------------------------------------
        if _TRACEBACK.search(message):
            frames, after_frame = None, False
            if not _FATAL.search(message):
                weak_tracebacks.append(index)
        elif _FRAME_LINE.match(message):
            if _CAPTURE_FRAME.search(message):
                frames = "capture"
            elif frames != "capture" and _SERVING_FRAME.search(message):
                frames = "serving"
            elif frames is None and _WEIGHTS_FRAME.search(message):
                frames = "weights"
            after_frame = True
            continue
        elif after_frame:
            after_frame = False
            if not _EXCEPTION_LINE.match(message):
                continue  # the source line printed under a frame
        if _EXCEPTION_LINE.match(message):
            last_exception = index
        # --- evidence -----------------------------------------------------------------------------------------
        if _INIT_OOM.search(message) or _NEGATIVE_PROFILE.search(message):
            add("init_oom", index, raw)
            terminal = True
        elif _CAPTURE_FAILED.search(message):
            add("capture_oom" if _DEVICE_OOM.search(message) else "crash", index, raw)
            terminal = True
        elif _DEVICE_OOM.search(message):
            kind, proven = _oom_kind(ready_at is not None, capturing, frames, loading, kv_allocated)
            add(kind, index, raw, proven)
            terminal = True
        elif _UNBALANCED.search(message):
            add("unbalanced_memory", index, raw)
        elif _NCCL.search(message):
            add("nccl_error", index, raw)
        elif _FATAL.search(message):
            exception = _first_exception_after(lines, index + 1) if "hit an exception" in message else None
            add("crash", index, exception or raw)
            terminal = True
        elif _SYSTEMD_END.search(raw):
            terminal = True

    if ready_at is None:
        # A traceback or an exception with no fatal marker fails the boot only when the boot ends in it.
        for index in weak_tracebacks:
            if last_progress < index:
                exception = _first_exception_after(lines, index + 1)
                add("crash", index, exception or lines[index])
                terminal = True
        if last_exception > last_progress:
            add("crash", last_exception, lines[last_exception])
            terminal = True
    else:
        evidence = [e for e in evidence if e[2] > ready_at]
    if not terminal:
        # Unbalanced memory is only a warning in current SGLang, and NCCL warnings are noise, unless the boot died.
        evidence = [e for e in evidence if e[3] not in ("unbalanced_memory", "nccl_error")]
    if not evidence:
        return None
    _precedence, _position_only, index, kind, line = min(evidence)
    failure = {"kind": kind, "line": line, "advice": FAILURE_KINDS[kind]}
    oom = _oom_numbers(line)
    if oom is None and kind in ("capture_oom", "runtime_oom"):
        # The proof may be a bare "CUDA error: out of memory" while torch's message is on another line (rank).
        oom = _nearest_oom_numbers(lines, index, -1 if ready_at is None else ready_at)
    if oom is not None:
        failure["oom"] = oom
    return failure


# --------------------------------------------------------------------------------------------------------------
# Facts
# --------------------------------------------------------------------------------------------------------------

_RANK_KEYS = (
    "pre_load_free_gib", "post_load_free_gib", "weights_gib", "weights_type", "load_elapsed_s",
    "kv_tokens", "kv_size_gib", "kv_dtype", "memory_pool_end_free_gib", "cuda_graph_gib", "cuda_graphs",
    "post_capture_free_gib", "draft_pre_load_free_gib", "draft_weights_gib", "draft_weights_type",
    "draft_kv_tokens", "draft_kv_size_gib", "full_tokens", "swa_tokens", "mamba_cache_size", "mamba_size_gib",
)


def _new_rank(tag):
    rank = dict((key, None) for key in _RANK_KEYS)
    rank["tag"] = tag
    rank["cuda_graphs"] = {}
    rank["_loads"] = 0
    rank["_begins"] = 0
    rank["_kvs"] = 0
    return rank


def _float(text):
    return None if text is None else float(text)


def _min(values):
    values = [v for v in values if v is not None]
    return min(values) if values else None


def _max(values):
    values = [v for v in values if v is not None]
    return max(values) if values else None


def _dp_key(tag):
    for part in (tag or "").split():
        if part.startswith("DP"):
            return part
    return ""


def _rank_sort_key(tag):
    return [(re.sub(r"\d+$", "", p), int(re.sub(r"^\D+", "", p) or 0)) for p in tag.split()]


class _Boot:
    """What the lines of one boot said so far: per-rank records, DP replicas and boot-level values."""

    __slots__ = ("ranks", "replicas", "server_args", "kv_dtype_line", "ready", "fmt_current", "mm_reduced")

    def __init__(self):
        self.ranks = {}  # rank tag ("" untagged) -> _new_rank() dict
        self.replicas = {}  # DP tag ("" without DP) -> the first scheduler line's values of that replica
        self.server_args = {}
        self.kv_dtype_line = None  # "Using KV cache dtype: ..." (the first one)
        self.ready = False
        self.fmt_current = False  # a line only the current wording prints was seen
        self.mm_reduced = None  # "Automatically reduce --mem-fraction-static to X ... multimodal model" (SGLang 0.4.x)

    def rank(self, tag):
        """The record of rank ``tag`` (``None`` and ``""`` are the untagged rank), created on first use."""
        key = tag or ""
        if key not in self.ranks:
            self.ranks[key] = _new_rank(key)
        return self.ranks[key]


# Line handlers: handler(boot, tag, message, match) records what one matched line says into ``boot``.
# ``tag`` is the line's rank tag (None without an SGLang prefix), ``message`` the text after the prefix.

def _on_server_args(boot, _tag, message, _match):
    boot.server_args = server_args_from_log_line(message)  # the last one of the boot wins


def _on_ready(boot, _tag, _message, _match):
    boot.ready = True


def _on_load_begin(boot, tag, _message, match):
    rank = boot.rank(tag)
    rank["_begins"] += 1
    # A rank's second "Load weight begin" is the draft model's.
    if rank["_begins"] == 1:
        rank["pre_load_free_gib"] = float(match.group(1))
    elif rank["draft_pre_load_free_gib"] is None:
        rank["draft_pre_load_free_gib"] = float(match.group(1))


def _on_load_end(boot, tag, _message, match):
    rest = match.group("rest")
    boot.fmt_current = boot.fmt_current or "elapsed=" in rest
    rank = boot.rank(tag)
    rank["_loads"] += 1
    type_match = _FIELD["type"].search(rest)
    cls = type_match.group(1) if type_match else None
    avail = _FIELD["avail"].search(rest)
    usage = _FIELD["usage"].search(rest)
    elapsed = _FIELD["elapsed"].search(rest)
    # The second load of a rank, or a class that names a draft (Eagle, MTP, NextN), is the draft model's.
    is_draft = rank["_loads"] > 1 or bool(cls and _DRAFT_CLASS.search(cls))
    if not is_draft:
        rank["post_load_free_gib"] = float(avail.group(1)) if avail else None
        rank["weights_gib"] = float(usage.group(1)) if usage else None
        rank["weights_type"] = cls
        rank["load_elapsed_s"] = float(elapsed.group(1)) if elapsed else None
    elif rank["draft_weights_gib"] is None and rank["draft_weights_type"] is None:
        rank["draft_weights_gib"] = float(usage.group(1)) if usage else None
        rank["draft_weights_type"] = cls


def _on_kv_dtype(boot, _tag, _message, match):
    boot.kv_dtype_line = boot.kv_dtype_line or match.group(1)


def _on_kv_alloc(boot, tag, _message, match):
    rank = boot.rank(tag)
    rank["_kvs"] += 1
    if match.group("dtype"):
        boot.fmt_current = True  # only the current wording prints "dtype: " in the KV line
    size = (float(match.group("k")) + float(match.group("v"))) if match.group("k") else float(match.group("kv"))
    tokens = int(match.group("tokens")) if match.group("tokens") else None
    label = match.group("label") or ""
    if rank["_kvs"] == 1 and "draft" not in label.lower():
        rank["kv_tokens"], rank["kv_size_gib"] = tokens, round(size, 2)
        rank["kv_dtype"] = match.group("dtype")
    elif rank["draft_kv_size_gib"] is None:
        rank["draft_kv_tokens"], rank["draft_kv_size_gib"] = tokens, round(size, 2)


def _on_pool_end(boot, tag, _message, match):
    rank = boot.rank(tag)
    if rank["memory_pool_end_free_gib"] is None:
        rank["memory_pool_end_free_gib"] = float(match.group(1))


def _on_capture_end(boot, tag, _message, match):
    rank = boot.rank(tag)
    rest = match.group("rest")
    # current: "... CUDA graph end. elapsed=T s, ..."; classic: "... graph end. Time elapsed: T s. ..."
    if "elapsed=" in rest and "Time elapsed" not in rest:
        boot.fmt_current = True
    usage = _FIELD["usage"].search(rest)
    avail = _FIELD["avail"].search(rest)
    if usage:
        name = _capture_name(match.group("name"))
        rank["cuda_graphs"][name] = round(rank["cuda_graphs"].get(name, 0.0) + float(usage.group(1)), 2)
    if avail:
        rank["post_capture_free_gib"] = float(avail.group(1))


def _on_swa(boot, tag, _message, match):
    rank = boot.rank(tag)
    rank["full_tokens"], rank["swa_tokens"] = int(match.group(1)), int(match.group(2))


def _on_swa_pool(boot, tag, _message, match):
    rank = boot.rank(tag)
    rank["full_tokens"], rank["swa_tokens"] = int(match.group(3)), int(match.group(2))


def _on_mm_reduce(boot, _tag, _message, match):
    boot.mm_reduced = float(match.group(1))


def _on_mamba(boot, tag, _message, match):
    rank = boot.rank(tag)
    if rank["mamba_size_gib"] is None:  # a draft's own state pool (MTP) comes second
        rank["mamba_cache_size"] = int(match.group(1)) if match.group(1) else None
        rank["mamba_size_gib"] = round(float(match.group(2)) + float(match.group(3)), 2)


def _on_max_total(boot, tag, message, _match):
    values = {}
    for key, value in _KEY_VALUE.findall(message):
        values[key] = float(value) if "." in value else int(value)
    gpu_mem = _AVAILABLE_MEM.search(message)
    replica = {
        "tag": tag or "",
        "max_total_num_tokens": values.get("max_total_num_tokens"),
        "chunked_prefill_size": values.get("chunked_prefill_size"),
        "max_prefill_tokens": values.get("max_prefill_tokens"),
        "max_running_requests": values.get("max_running_requests"),
        "context_len": values.get("context_len"),
        "available_gpu_mem_gib": float(gpu_mem.group(1)) if gpu_mem else None,
    }
    boot.replicas.setdefault(_dp_key(tag), replica)  # the first scheduler line of each DP replica


# The grammar of the facts, in the order a line is tried: a line goes to the FIRST pattern that matches and to no
# other (a "Load weight end" line never counts as a KV or capture line, whatever else it holds).
_LINE_HANDLERS = (
    (_SERVER_ARGS, _on_server_args),  # server_args=ServerArgs(...)
    (_READY, _on_ready),  # The server is fired up and ready to roll!
    (_LW_BEGIN, _on_load_begin),  # Load weight begin. avail mem=P GB
    (_LW_END, _on_load_end),  # Load weight end. [elapsed=S s, ]type=C, ..., avail mem=A GB, mem usage=W GB.
    (_KV_DTYPE, _on_kv_dtype),  # Using KV cache dtype: torch.X
    (_KV_ALLOC, _on_kv_alloc),  # [label ]KV Cache is allocated. [dtype: D, ]#tokens: N, K size: .., V size: ..
    (_POOL_END, _on_pool_end),  # Memory pool end. avail mem=X GB
    (_CAPTURE_END, _on_capture_end),  # Capture <kind> graph end. ... mem usage=M GB ... avail mem=Z GB
    (_SWA, _on_swa),  # Use sliding window memory pool. full_layer_tokens=F, swa_layer_tokens=S
    (_SWA_POOL, _on_swa_pool),  # SWAKVPool mem usage: x GB, swa size: S, full size: F
    (_MAX_TOTAL, _on_max_total),  # max_total_num_tokens=N, chunked_prefill_size=C, ..., available_gpu_mem=X GB
    (_MM_REDUCE, _on_mm_reduce),  # Automatically reduce --mem-fraction-static to X because this is a multimodal model
    (_MAMBA, _on_mamba),  # Mamba Cache is allocated. [max_mamba_cache_size: K, ]conv_state size: x GB, ssm_state ..
)


def _boot_facts(lines):
    boot = _Boot()
    for raw in lines:
        tag, message = _split_record(raw)
        for pattern, handler in _LINE_HANDLERS:
            match = pattern.search(message)
            if match:
                handler(boot, tag, message, match)
                break
    return _aggregate(boot)


def _aggregate(boot):
    """The facts of a boot from its per-rank and per-replica records (module docstring, "Aggregation")."""
    rank_list = []
    for tag in sorted(boot.ranks, key=_rank_sort_key):
        rank = boot.ranks[tag]
        if rank["cuda_graphs"]:
            rank["cuda_graph_gib"] = round(sum(rank["cuda_graphs"].values()), 2)
        for private in ("_loads", "_begins", "_kvs"):
            rank.pop(private)
        rank_list.append(rank)

    replica_list = [boot.replicas[key] for key in sorted(boot.replicas, key=_rank_sort_key)]
    best = None
    for replica in replica_list:
        if replica["max_total_num_tokens"] is None:
            continue
        if best is None or replica["max_total_num_tokens"] < best["max_total_num_tokens"]:
            best = replica
    best = best or (replica_list[0] if replica_list else {})

    kv_dtype = boot.kv_dtype_line or next((r["kv_dtype"] for r in rank_list if r["kv_dtype"]), None)
    facts = {
        "format": "current" if boot.fmt_current else "classic",
        "pre_load_free_gib": _min(r["pre_load_free_gib"] for r in rank_list),
        "weights_gib": _max(r["weights_gib"] for r in rank_list),
        "post_load_free_gib": _min(r["post_load_free_gib"] for r in rank_list),
        "kv_tokens": _min(r["kv_tokens"] for r in rank_list),
        "kv_size_gib": _max(r["kv_size_gib"] for r in rank_list),
        "kv_dtype": kv_dtype,
        "memory_pool_end_free_gib": _min(r["memory_pool_end_free_gib"] for r in rank_list),
        "cuda_graph_gib": _max(r["cuda_graph_gib"] for r in rank_list),
        "post_capture_free_gib": _min(r["post_capture_free_gib"] for r in rank_list),
        "draft_weights_gib": _max(r["draft_weights_gib"] for r in rank_list),
        "draft_kv_tokens": _min(r["draft_kv_tokens"] for r in rank_list),
        "draft_kv_size_gib": _max(r["draft_kv_size_gib"] for r in rank_list),
        "swa_tokens": _min(r["swa_tokens"] for r in rank_list),
        "mamba_cache_size": _min(r["mamba_cache_size"] for r in rank_list),
        "mamba_size_gib": _max(r["mamba_size_gib"] for r in rank_list),
        "full_tokens": _min(r["full_tokens"] for r in rank_list),
        "max_total_num_tokens": best.get("max_total_num_tokens"),
        "max_running_requests": best.get("max_running_requests"),
        "context_len": best.get("context_len"),
        "chunked_prefill_size": best.get("chunked_prefill_size"),
        "max_prefill_tokens": best.get("max_prefill_tokens"),
        "available_gpu_mem_gib": _min(r["available_gpu_mem_gib"] for r in replica_list),
        "replicas": replica_list,
        "ready": boot.ready,
        "server_args": boot.server_args,
        "ranks": rank_list,
        "tp_size": len(rank_list),
    }
    facts.update(_fraction(boot))
    return facts


def _fraction(boot):
    """The --mem-fraction-static the pool was sized with, the one server_args printed, and where the first came from:
    SGLang 0.4.x printed server_args, then multiplied f by 0.9 for a multimodal model and said so in a line of its own."""
    logged = boot.server_args.get("mem_fraction_static") if boot.server_args else None
    logged = logged if isinstance(logged, (int, float)) and not isinstance(logged, bool) else None
    if boot.mm_reduced is not None:
        return {"mem_fraction_static": boot.mm_reduced, "mem_fraction_static_logged": logged,
                "mem_fraction_static_source": "multimodal_reduction"}
    return {"mem_fraction_static": logged, "mem_fraction_static_logged": logged,
            "mem_fraction_static_source": "server_args" if logged is not None else None}


def parse_startup_log(text):
    """Parse SGLang startup-log ``text`` and return the facts of its last boot (see the module docstring).

    Keys: ``format`` ('classic'|'current'), ``boots``, ``pre_load_free_gib``, ``weights_gib``,
    ``post_load_free_gib``, ``kv_tokens``, ``kv_size_gib``, ``kv_dtype``, ``memory_pool_end_free_gib``,
    ``cuda_graph_gib``, ``post_capture_free_gib``, ``draft_weights_gib``, ``draft_kv_tokens``,
    ``draft_kv_size_gib``, ``swa_tokens``, ``full_tokens``, ``max_total_num_tokens``, ``max_running_requests``,
    ``context_len``, ``chunked_prefill_size``, ``max_prefill_tokens``, ``available_gpu_mem_gib``, ``replicas``,
    ``ready``, ``failure``, ``server_args``, ``ranks``, ``tp_size``, ``mamba_cache_size``, ``mamba_size_gib``,
    ``mem_fraction_static`` (the value that sized the pool), ``mem_fraction_static_logged`` (server_args'),
    ``mem_fraction_static_source``, ``untrusted`` (boot_trust.findings of the log alone: ranks of one stage that
    report different weights). Values the log does not hold are ``None``.

    Raises ``StartupLogError`` when ``text`` is empty or holds no SGLang record.
    """
    if text is None or not str(text).strip():
        raise StartupLogError("the SGLang startup log is empty: there is no text to parse")
    lines = str(text).splitlines()
    boots = split_boots(lines)
    if not boots:
        sample = next((line.strip() for line in lines if line.strip()), "")[:120]
        raise StartupLogError(
            "no SGLang startup record in the text (%d lines, first: %r): expected lines such as "
            "'server_args=ServerArgs(...)', 'Load weight begin. avail mem=...' or 'KV Cache is allocated.'"
            % (len(lines), sample)
        )
    last = boots[-1]
    facts = _boot_facts(last)
    facts["boots"] = len(boots)
    facts["failure"] = classify_failure(last)
    facts["untrusted"] = untrusted_findings(facts)  # what the log alone shows; callers add the checkpoint's check
    return facts

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The failure of one SGLang boot, from its log lines (``classify_failure``). Pure and stdlib only.

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
from typing import Any, Sequence

from ansible_collections.llmserve.sglang.plugins.module_utils.startup.startup_records import (
    CAPTURE_BEGIN, CAPTURE_END, CAPTURE_FAILED, FATAL, INIT_OOM, KV_ALLOC, LW_BEGIN, LW_END, MAX_TOTAL, POOL_END, READY, SYSTEMD_END, proof, split_record)
_NEGATIVE_PROFILE = re.compile(r"is larger than the profiled value (-\d+)\.")
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


def _first_exception_after(lines: Sequence[str], start: int) -> str | None:
    """The first Python exception line (``TypeError: ...``) at or after ``start``, stripped, or None."""
    for line in lines[start:start + 400]:
        _tag, message = split_record(line)
        if _EXCEPTION_LINE.match(message) and not _TRACEBACK.search(message):
            return proof(line)
    return None


def _oom_numbers(line: str) -> dict[str, Any] | None:
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


def _nearest_oom_numbers(lines: Sequence[str], index: int, after: int) -> dict[str, Any] | None:
    """The numbers of the OOM line nearest to ``lines[index]`` (the earlier one on a tie) past index ``after``."""
    best: tuple[int, dict[str, Any]] | None = None
    for other, line in enumerate(lines):
        if other <= after or (best is not None and abs(other - index) >= best[0]):
            continue
        numbers = _oom_numbers(line)
        if numbers:
            best = (abs(other - index), numbers)
    return best[1] if best else None


def _oom_kind(ready: bool, capturing: set[str], frames: str | None, loading: set[str],
              kv_allocated: bool) -> tuple[str, bool]:
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


def classify_failure(lines: Sequence[str]) -> dict[str, Any] | None:
    """Classify the failure of one boot (a list of log lines); see the module docstring.

    Returns ``None`` or ``{"kind": ..., "line": ..., "advice": ...}``, plus ``"oom": {...}`` when the numbers of
    the device OOM are known.
    """
    scan = _Scan(lines)
    for index, raw in enumerate(lines):
        tag, message = split_record(raw)
        scan.progress(index, tag or "", message)
        if scan.in_traceback(index, message):
            continue
        scan.evidence(index, raw, message)
    return scan.verdict()


class _Scan(object):
    """One pass over a boot's lines: the phase each rank is in, the frames of the current traceback, and the
    evidence, each piece ``(precedence, 0 proven by a phase line or frames / 1 by position only, index, kind,
    line)``: the least wins."""

    def __init__(self, lines: Sequence[str]) -> None:
        self.lines = lines
        self.evidence_found: list[tuple[int, int, int, str, str]] = []
        self.kv_allocated = False
        self.capturing: set[str] = set()    # ranks between a "Capture ... graph begin" and its "end"
        self.loading: set[str] = set()      # ranks between a "Load weight begin" and its "end"
        self.ready_at: int | None = None
        self.terminal = False     # the boot ended: a fatal marker, a systemd stop or exit, a device or budget OOM
        self.frames: str | None = None   # the phase the current traceback's frames prove
        self.after_frame = False
        self.last_exception = -1  # the last Python exception line ("TypeError: ...") outside traceback frames
        # tracebacks without a fatal marker: a failure only if nothing progresses after
        self.weak_tracebacks: list[int] = []
        self.last_progress = -1

    def add(self, kind: str, index: int, line: str, proven: bool = True) -> None:
        self.evidence_found.append((_PRECEDENCE[kind], 0 if proven else 1, index, kind, proof(line)))

    def progress(self, index: int, rank: str, message: str) -> None:
        """The phase lines: the KV pool, graph capture, the weight load, ready."""
        if KV_ALLOC.search(message) or POOL_END.search(message):
            self.kv_allocated = True
        elif CAPTURE_BEGIN.search(message):
            self.capturing.add(rank)
        elif CAPTURE_END.search(message):
            self.capturing.discard(rank)
        elif READY.search(message):
            self.ready_at = index
        elif LW_BEGIN.search(message):
            self.loading.add(rank)
        elif LW_END.search(message):
            self.loading.discard(rank)
        elif not MAX_TOTAL.search(message):
            return
        self.last_progress = index

    def in_traceback(self, index: int, message: str) -> bool:
        """Reads a traceback's frames; True for the lines that are only frames or their source lines."""
        if _TRACEBACK.search(message):
            self.frames, self.after_frame = None, False
            if not FATAL.search(message):
                self.weak_tracebacks.append(index)
        elif _FRAME_LINE.match(message):
            if _CAPTURE_FRAME.search(message):
                self.frames = "capture"
            elif self.frames != "capture" and _SERVING_FRAME.search(message):
                self.frames = "serving"
            elif self.frames is None and _WEIGHTS_FRAME.search(message):
                self.frames = "weights"
            self.after_frame = True
            return True
        elif self.after_frame:
            self.after_frame = False
            if not _EXCEPTION_LINE.match(message):
                return True  # the source line printed under a frame
        if _EXCEPTION_LINE.match(message):
            self.last_exception = index
        return False

    def evidence(self, index: int, raw: str, message: str) -> None:
        """The line's evidence: the first row of _EVIDENCE whose pattern it matches decides."""
        for pattern, kind, terminal in _EVIDENCE:
            if pattern.search(message):
                if kind is None:
                    kind, proven = _oom_kind(self.ready_at is not None, self.capturing, self.frames, self.loading,
                                             self.kv_allocated)
                    self.add(kind, index, raw, proven)
                elif kind == "capture_failed":
                    self.add("capture_oom" if _DEVICE_OOM.search(message) else "crash", index, raw)
                elif kind == "crash":   # a scheduler that "hit an exception" names it a few lines below
                    exception = _first_exception_after(self.lines, index + 1) if "hit an exception" in message \
                        else None
                    self.add("crash", index, exception or raw)
                else:
                    self.add(kind, index, raw)
                self.terminal = self.terminal or terminal
                return
        if SYSTEMD_END.search(raw):
            self.terminal = True

    def verdict(self) -> dict[str, Any] | None:
        lines, evidence = self.lines, self.evidence_found
        if self.ready_at is None:
            # A traceback or an exception with no fatal marker fails the boot only when the boot ends in it.
            for index in self.weak_tracebacks:
                if self.last_progress < index:
                    self.add("crash", index, _first_exception_after(lines, index + 1) or lines[index])
                    self.terminal = True
            if self.last_exception > self.last_progress:
                self.add("crash", self.last_exception, lines[self.last_exception])
                self.terminal = True
        else:
            evidence = [e for e in evidence if e[2] > self.ready_at]
        if not self.terminal:
            # Unbalanced memory is only a warning in current SGLang, and NCCL warnings are noise, unless the boot died.
            evidence = [e for e in evidence if e[3] not in ("unbalanced_memory", "nccl_error")]
        if not evidence:
            return None
        _precedence, _position_only, index, kind, line = min(evidence)
        failure: dict[str, Any] = {"kind": kind, "line": line, "advice": FAILURE_KINDS[kind]}
        oom = _oom_numbers(line)
        if oom is None and kind in ("capture_oom", "runtime_oom"):
            # The proof may be a bare "CUDA error: out of memory" while torch's message is on another line (rank).
            oom = _nearest_oom_numbers(lines, index, -1 if self.ready_at is None else self.ready_at)
        if oom is not None:
            failure["oom"] = oom
        return failure


# What a line proves, tried in this order (the first pattern that matches decides): the kind (None: a device OOM,
# whose kind is the boot's phase; capture_failed: an OOM or a crash of the capture; crash: a fatal marker), and
# whether the boot ends there.
_EVIDENCE = (
    (INIT_OOM, "init_oom", True),
    (_NEGATIVE_PROFILE, "init_oom", True),
    (CAPTURE_FAILED, "capture_failed", True),
    (_DEVICE_OOM, None, True),
    (_UNBALANCED, "unbalanced_memory", False),
    (_NCCL, "nccl_error", False),
    (FATAL, "crash", True),
)

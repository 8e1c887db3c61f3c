# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The records of SGLang's startup log, shared by the facts (startup_log) and the failure diagnosis
(startup_failure): what a line says, where one boot ends and the next begins. Pure and stdlib only.

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

- ``server_args=ServerArgs(...)``: read by module_utils/service/server_args.py (without eval, secrets redacted)
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
"""

from __future__ import annotations

import re
from typing import Iterable

# [2025-08-11 02:15:02] / [2026-02-26 16:41:05 TP1] / [2026-05-07 13:39:14 DP1 TP1 EP1] / [.. 12:00:00.123 TP0]
# Older SGLang printed time only ([22:30:52 TP0]); some excerpts drop the year ([07-01 15:20:44]).
_PREFIX = re.compile(
    r"\[(?:\d{4}-)?(?:\d\d-\d\d[ T])?\d\d:\d\d:\d\d(?:[.,]\d{1,6})?(?P<tags>(?: [A-Z][A-Z_]*\d+)*)\] ?"
)
NUM = r"(-?\d+(?:\.\d+)?)"
SERVER_ARGS = re.compile(r"server_args=ServerArgs\(")
LW_BEGIN = re.compile(r"Load weight begin\. avail mem=" + NUM + r" GB")
LW_END = re.compile(r"Load weight end\.(?P<rest>.*)")
_INIT_BEGIN = re.compile(r"Init (?:torch distributed|parallel) begin")
KV_ALLOC = re.compile(
    r"(?P<label>[\w\- ]*?)\s*KV Cache (?:is allocated|VA upper bound)\.\s*(?:dtype: (?P<dtype>[^,\s]+),\s*)?"
    r"(?:#tokens: (?P<tokens>\d+),\s*)?"
    r"(?:K size: (?P<k>[\d.]+) GB, V size: (?P<v>[\d.]+) GB|KV size: (?P<kv>[\d.]+) GB)"
)
POOL_END = re.compile(r"Memory pool end\. avail mem=" + NUM + r" GB")
CAPTURE_BEGIN = re.compile(r"\bCapture\b(?P<name>[^.]*?)\bgraph begin\b", re.IGNORECASE)
CAPTURE_END = re.compile(r"\bCapture\b(?P<name>[^.]*?)\bgraph end\b(?P<rest>.*)", re.IGNORECASE)
CAPTURE_DEVICE = re.compile(r"\b(?:cuda|npu|cpu|xpu|hip|musa)\b", re.IGNORECASE)
MAX_TOTAL = re.compile(r"^(?:\[gpu_id=\d+\] )?max_total_num_tokens=\d+")
READY = re.compile(r"The server is fired up and ready to roll!")
# journalctl -o short / short-iso / short-precise prefixes: "Nov 30 00:01:02 host ident[pid]: ", and the service
# prefix of `docker compose logs`.
_JOURNAL_PREFIX = re.compile(
    r"^(?:[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d(?:\.\d+)?|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:[+-]\d\d:?\d\d|Z)?)"
    r" \S+ [^\s:\[]+(?:\[\d+\])?: "
    r"|^[A-Za-z0-9][\w.-]*[-_]\d+ +\| "  # docker compose logs: "worker-1  | "
)
# systemd, as journalctl prints it with or without its prefix ("-o cat" drops it).
_SYSTEMD_START = re.compile(r"(?:^|systemd\[\d+\]: )(?:Starting|Started) \S+\.service\b")
SYSTEMD_END = re.compile(
    r"(?:(?:^|systemd\[\d+\]: )(?:Stopping|Stopped) \S+\.service\b)"
    r"|(?:\S+\.service: (?:Main process exited|Failed with result|Deactivated successfully|"
    r"Scheduled restart job|Killing process))"
)
# Failure evidence.
INIT_OOM = re.compile(
    r"Not enough memory\. Please try to increase --mem-fraction-static"
    r"|Loaded weights leave no GPU memory for the KV cache"
    r"|Memory pool size is too small"
    r"|Not enough GPU memory for hybrid"
)
CAPTURE_FAILED = re.compile(r"Capture (?:cuda|CUDA) graph failed")
FATAL = re.compile(
    r"hit an exception"  # Scheduler / TpModelWorkerClient / DetokenizerManager hit an exception
    r"|Rank \d+ scheduler is dead"
    r"|Initialization failed\. Please see the error messages above"
    r"|Failed to initialize scheduler rank"
    r"|Received sigquit from a child process"
    r"|SIGQUIT received"
    r"|Child process unexpectedly failed"
    r"|\bExit code: -?\d+"
)
_SGLANG_MARKER = re.compile(
    r"server_args=ServerArgs\(|Load weight (?:begin|end)\.|Init (?:torch distributed|parallel) (?:begin|end)"
    r"|KV Cache (?:is allocated|VA upper bound)|Memory pool end\.|Capture\b[^.]*\bgraph (?:begin|end|failed)"
    r"|max_total_num_tokens=|The server is fired up|sliding window memory pool|SWAKVPool"
    r"|sglang/|sglang\.(?:srt|launch_server)|sglang is using nccl",
    re.IGNORECASE,
)


def _strip_journal(line: str) -> str:
    """The line without a journald prefix (``Nov 30 00:01:02 host python3[1234]: `` or its ISO form)."""
    match = _JOURNAL_PREFIX.match(line)
    return line[match.end():] if match else line


def split_record(line: str) -> tuple[str | None, str]:
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


def proof(line: str) -> str:
    """A log line as quoted in ``failure.line``: stripped, without a journald prefix."""
    return _strip_journal(line).strip()


def _is_start_event(message: str) -> bool:
    return bool(_INIT_BEGIN.search(message) or LW_BEGIN.search(message))


def _has_sglang(line: str) -> bool:
    return bool(_SGLANG_MARKER.search(line) or INIT_OOM.search(line) or CAPTURE_FAILED.search(line)
                or FATAL.search(line))


def split_boots(lines: Iterable[str]) -> list[list[str]]:
    """Split log lines into boots, oldest first; see the module docstring ("Boots") for the rules.

    Only boots that hold at least one SGLang record are returned.
    """
    boots: list[tuple[list[str], bool]] = []
    current: list[str] = []
    has_sglang, has_start, ended = False, False, False
    for raw in lines:
        _tag, message = split_record(raw)
        # Each pattern is searched at most once a line: a journal of many restarts is mostly lines that match none.
        is_args = bool(SERVER_ARGS.search(message))
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
        if not ended and (READY.search(message) or FATAL.search(message)
                          or (has_sglang and ".service" in raw and SYSTEMD_END.search(raw))):
            ended = True
    boots.append((current, has_sglang))
    return [b for b, sglang in boots if sglang]

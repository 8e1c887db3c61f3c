# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""SGLang's server arguments, in one place: read from a command line (``/proc/<pid>/cmdline``) and from the startup
log's ``server_args=ServerArgs(...)`` line, named the same way, secrets redacted by one policy, and the views the
collection needs of them: where the server answers (:func:`probe_url`), the ``--mem-fraction-static`` it runs
(:func:`mem_fraction_static`) and the memory-relevant subset the tuner's fingerprint hashes (:func:`memory_args`).

Pure and stdlib only. Names are SGLang's dataclass fields (``tp_size``); a flag (``--tp-size``), a kebab or upper
spelling and SGLang's short aliases (``--tp``) all map to them (:func:`canonical`).

Secrets: SGLang's own secret arguments (:data:`SECRET_ARGS`) never leave this module with their value. Wherever
args are read, a secret that is set becomes :data:`REDACTED`; one that is unset stays ``None``/absent, so that a
caller can still tell whether a key is configured.
"""
from __future__ import annotations

import re
from typing import Any, Iterable

from ansible_collections.llmserve.sglang.plugins.module_utils import checks

# SGLang prints these in its server_args line too (sgl-project/sglang#37457).
SECRET_ARGS = ("api_key", "admin_api_key", "ssl_keyfile_password")
REDACTED = "[REDACTED]"

# The server's environment variables that change how SGLang sizes the pool (read from a unit's configuration;
# kv_capacity_report.post_capture_sizing reads what they say).
SIZING_VARIABLES = ("SGLANG_ENABLE_POST_CAPTURE_KV_SIZING",)

# Other spellings of the same arguments (SGLang's short aliases, names people use).
ALIASES = {"tp": "tp_size", "tensor_parallel_size": "tp_size", "pp": "pp_size", "pipeline_parallel_size": "pp_size",
           "dp": "dp_size", "data_parallel_size": "dp_size", "context_len": "context_length",
           "speculative_algo": "speculative_algorithm"}

# SGLang's defaults (0.5.x server_args.py) for the args that change the memory picture; None = "SGLang decides".
# Why each counts: see module_utils/service/fingerprint.py. mem_fraction_static is not here: it is the tuner's output.
MEMORY_ARGS = {
    "tp_size": 1, "pp_size": 1, "dp_size": 1, "enable_dp_attention": False,
    "dtype": "auto", "quantization": None,
    "kv_cache_dtype": "auto", "page_size": 1, "context_length": None,
    "chunked_prefill_size": None, "max_prefill_tokens": 16384, "enable_mixed_chunk": False,
    "cuda_graph_max_bs": None, "cuda_graph_bs": None, "disable_cuda_graph": False,
    "speculative_algorithm": None, "speculative_draft_model_path": None, "speculative_num_steps": None,
    "speculative_eagle_topk": None, "speculative_num_draft_tokens": None,
    "enable_hierarchical_cache": False, "hicache_ratio": None, "hicache_size": None,
    "max_running_requests": None, "max_total_tokens": None,
}
# The state pool of hybrid linear-attention models (module_utils/capacity/kv_state.py). They count only when set, so a
# fingerprint taken before they were read stays the same for every server that does not set them.
STATE_POOL_ARGS = {
    "disable_radix_cache": False, "max_mamba_cache_size": None, "mamba_full_memory_ratio": None,
    "mamba_ssm_dtype": None,
}
_BOOL_ARGS = ("enable_dp_attention", "enable_mixed_chunk", "disable_cuda_graph", "enable_hierarchical_cache",
              "disable_radix_cache")
_INT_ARGS = ("tp_size", "pp_size", "dp_size", "page_size", "context_length", "chunked_prefill_size",
             "max_prefill_tokens", "cuda_graph_max_bs", "speculative_num_steps", "speculative_eagle_topk",
             "speculative_num_draft_tokens", "max_running_requests", "max_total_tokens", "max_mamba_cache_size")
_FLOAT_ARGS = ("hicache_ratio", "hicache_size", "mamba_full_memory_ratio")
_LOWER_ARGS = ("dtype", "quantization", "kv_cache_dtype", "mamba_ssm_dtype")
_SPEC_ARGS = ("speculative_draft_model_path", "speculative_num_steps", "speculative_eagle_topk",
              "speculative_num_draft_tokens")
_HICACHE_ARGS = ("hicache_ratio", "hicache_size")

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 30000


class ServerArgsError(checks.InvalidInput):
    """Server arguments that cannot be read: the message names the argument and the value."""


def canonical(name: Any) -> str:
    """SGLang's field name for a flag or key: ``--tp-size``, ``TP-SIZE``, ``tp`` -> ``tp_size``."""
    key = str(name).lstrip("-").replace("-", "_").lower()
    return ALIASES.get(key, key)


def redact(args: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``args`` whose secrets that are set read :data:`REDACTED`."""
    out = dict(args)
    for key in SECRET_ARGS:
        if out.get(key) is not None:
            out[key] = REDACTED
    return out


# A Hugging Face access token ("hf_" and 34 letters and digits), wherever a log shows one: the server may print a
# token the role never set (its own environment, a cached login).
HF_TOKEN_TEXT = re.compile(r"\bhf_[A-Za-z0-9]{30,}")
MASK = "********"


def redact_text(text: Any, secrets: Iterable[Any] = ()) -> str:
    """``text`` (a journal, an error message) with each of ``secrets`` that is set, and any Hugging Face token,
    masked: for what a server printed, which may hold anything it was given."""
    text = str(text)
    for secret in sorted((str(s) for s in secrets if s), key=len, reverse=True):
        text = text.replace(secret, MASK)
    return HF_TOKEN_TEXT.sub(MASK, text)


def from_argv(argv: Any) -> dict[str, Any]:
    """The server args of an SGLang command line (``/proc/<pid>/cmdline`` split at NUL), keyed by field name.

    Everything before the first ``--flag`` (the interpreter, ``-m sglang.launch_server``) is skipped; a flag without
    a value is ``True``, with one value a string, with several a list (``--cuda-graph-bs 1 2 4``); ``--flag=value``
    works too. Values stay text: the command line does not say their type. Secrets are redacted."""
    if not isinstance(argv, (list, tuple)):
        raise ServerArgsError("argv must be a list of words, got %s" % type(argv).__name__)
    args: dict[str, Any] = {}
    name: str | None = None
    for word in argv:
        word = str(word)
        if word.startswith("--") and len(word) > 2:
            flag, sep, value = word[2:].partition("=")
            name = canonical(flag)
            args[name] = value if sep else True
            if sep:
                name = None  # --flag=value takes no further words
        elif name is not None:
            current = args[name]
            if current is True:
                args[name] = word
            elif isinstance(current, list):
                current.append(word)
            else:
                args[name] = [current, word]
    return redact(args)


_SERVER_ARGS_LINE = re.compile(r"server_args=ServerArgs\(")


def from_log_line(text: str) -> dict[str, Any]:
    """The ``ServerArgs(...)`` repr in ``text`` (a whole log line is fine) as a dict, parsed without ``eval``.

    Returns ``{}`` when the text holds no ``server_args=ServerArgs(``. Values keep the types the repr shows (ints,
    floats, None, lists); objects that are not literals stay their raw text. Secrets are redacted."""
    match = _SERVER_ARGS_LINE.search(text)
    if not match:
        return {}
    return redact(_ReprParser(text, match.end()).keyword_arguments())


def probe_url(args: dict[str, Any]) -> str:
    """Where the server answers on its own host: ``--host`` (a wildcard address becomes the loopback one; an IPv6
    address is bracketed) and ``--port``, SGLang's defaults when absent."""
    host = str(args.get("host") or DEFAULT_HOST)
    if host in ("0.0.0.0", "::", ""):
        host = DEFAULT_HOST
    elif ":" in host:
        host = "[%s]" % host.strip("[]")
    return "http://%s:%s" % (host, args.get("port") or DEFAULT_PORT)


def mem_fraction_static(args: dict[str, Any], error: type[Exception] = ServerArgsError) -> float | None:
    """The ``--mem-fraction-static`` of ``args`` as a float in (0, 1), None when it is absent (SGLang's default)."""
    value = args.get("mem_fraction_static")
    if value is None:
        return None
    return checks.fraction("--mem-fraction-static", checks.parse_number("--mem-fraction-static", value, float, error),
                           error)


def _bs_list(value: Any, error: type[Exception]) -> list[int] | None:
    if isinstance(value, str):
        value = value.replace(",", " ").split()
    if not isinstance(value, (list, tuple)):
        raise error("server arg cuda_graph_bs must be a list of batch sizes, got %r" % (value,))
    sizes = sorted({checks.parse_number("server arg cuda_graph_bs", size, int, error) for size in value})
    return sizes or None


def normalise(name: str, value: Any, error: type[Exception] = ServerArgsError) -> Any:
    """One memory-relevant arg in the type the fingerprint hashes: booleans, ints, floats, a sorted batch-size list,
    lower-case dtypes, an upper-case speculative algorithm; text otherwise."""
    label = "server arg %s" % name
    if name in _BOOL_ARGS:
        if isinstance(value, str) and not value.strip():
            return True   # a bare flag (--enable-dp-attention) as some readers give it
        return checks.parse_bool(label, value, error)
    if name in _INT_ARGS:
        return checks.parse_number(label, value, int, error)
    if name in _FLOAT_ARGS:
        return checks.parse_number(label, value, float, error)
    if name == "cuda_graph_bs":
        return _bs_list(value, error)
    text = str(value).strip()
    if name in _LOWER_ARGS:
        return text.lower()
    if name == "speculative_algorithm":
        return text.upper() or None
    return text


def memory_args(args: Any, error: type[Exception] = ServerArgsError) -> dict[str, Any]:
    """The memory-relevant args of ``args`` (keys in any spelling :func:`canonical` reads), every one present, an
    absent or None one replaced by SGLang's default, the rest dropped; the state-pool args only when set. Speculative settings count only with an
    algorithm, the hierarchical cache's ratio and size only when it is enabled."""
    if args is None:
        args = {}
    if not isinstance(args, dict):
        raise error("server_args must be a dict of SGLang flags, got %s" % type(args).__name__)
    out = dict(MEMORY_ARGS)
    for raw_key, value in args.items():
        name = canonical(raw_key)
        if value is None or (name not in MEMORY_ARGS and name not in STATE_POOL_ARGS):
            continue
        value = normalise(name, value, error)
        if name in MEMORY_ARGS or value != STATE_POOL_ARGS[name]:
            out[name] = value
    if out["speculative_algorithm"] is None:
        out.update({name: None for name in _SPEC_ARGS})
    if not out["enable_hierarchical_cache"]:
        out.update({name: None for name in _HICACHE_ARGS})
    return out


# --------------------------------------------------------------------------------------------------------------
# ServerArgs(...) without eval
# --------------------------------------------------------------------------------------------------------------

class _ReprParser(object):
    """A small recursive-descent reader for the Python literal repr that a dataclass prints.

    Strings, ints, floats, None/True/False, lists, tuples, dicts and sets are decoded; anything else (objects
    such as ``AttentionConfig(...)``, ``<Enum.X: 1>``, ``PosixPath('...')``, ``inf``) is kept as its raw text.
    A truncated repr (journald line limits, ``...`` elisions) yields what was read up to that point.
    """

    _NUMBER = re.compile(r"-?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")
    _NAME = re.compile(r"[A-Za-z_][\w.]*")
    _KEYWORD = re.compile(r"([A-Za-z_]\w*)\s*=")
    _PAIRS = {"(": ")", "[": "]", "{": "}", "<": ">"}
    _ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "'": "'", '"': '"', "0": "\0"}
    _CONSTANTS = {"None": None, "True": True, "False": False}

    def __init__(self, text: str, pos: int) -> None:
        self.text = text
        self.pos = pos

    def _peek(self) -> str:
        while self.pos < len(self.text) and self.text[self.pos] in " \t\r\n":
            self.pos += 1
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def _raw_until_balanced(self, start: int) -> str:
        """Raw text from ``start`` to the end of the balanced construct that begins there."""
        depth, i = 0, start
        quote: str | None = None
        closers = set(self._PAIRS.values())
        while i < len(self.text):
            ch = self.text[i]
            if quote:
                if ch == "\\":
                    i += 2
                    continue
                if ch == quote:
                    quote = None
            elif ch in "'\"":
                quote = ch
            elif ch in self._PAIRS:
                depth += 1
            elif ch in closers:
                if depth == 0:
                    break
                depth -= 1
            elif ch == "," and depth == 0:
                break
            i += 1
        self.pos = i
        return self.text[start:i].strip()

    def _string(self) -> str:
        quote = self.text[self.pos]
        i = self.pos + 1
        out: list[str] = []
        while i < len(self.text):
            ch = self.text[i]
            if ch == "\\" and i + 1 < len(self.text):
                nxt = self.text[i + 1]
                if nxt in self._ESCAPES:
                    out.append(self._ESCAPES[nxt])
                    i += 2
                    continue
                if nxt == "x" and i + 3 < len(self.text):
                    try:
                        out.append(chr(int(self.text[i + 2:i + 4], 16)))
                        i += 4
                        continue
                    except ValueError:
                        pass
                out.append(ch)
                i += 1
                continue
            if ch == quote:
                self.pos = i + 1
                return "".join(out)
            out.append(ch)
            i += 1
        raise ValueError("unterminated string")

    def value(self) -> Any:
        ch = self._peek()
        if not ch:
            raise ValueError("unexpected end")
        start = self.pos
        if ch in "'\"":
            return self._string()
        if ch in "[(":
            return self._sequence("]" if ch == "[" else ")")
        if ch == "{":
            return self._mapping()
        match = self._NUMBER.match(self.text, self.pos)
        if match and (match.end() == len(self.text) or self.text[match.end()] in " ,)]}:\t\r\n"):
            self.pos = match.end()
            token = match.group(0)
            return int(token) if re.match(r"-?\d+$", token) else float(token)
        name = self._NAME.match(self.text, self.pos)
        if (name and name.group(0) in self._CONSTANTS
                and self.text[name.end():name.end() + 1] in ("", " ", ",", ")", "]", "}", ":")):
            self.pos = name.end()
            return self._CONSTANTS[name.group(0)]
        return self._raw_until_balanced(start)

    def _sequence(self, closer: str) -> list[Any]:
        self.pos += 1
        items: list[Any] = []
        while True:
            ch = self._peek()
            if not ch:
                raise ValueError("unterminated sequence")
            if ch == closer:
                self.pos += 1
                return items
            items.append(self.value())
            ch = self._peek()
            if ch == ",":
                self.pos += 1
            elif ch != closer:
                raise ValueError("expected , or %s" % closer)

    def _mapping(self) -> Any:
        self.pos += 1
        items: dict[str, Any] = {}
        is_set: bool | None = None
        while True:
            ch = self._peek()
            if not ch:
                raise ValueError("unterminated mapping")
            if ch == "}":
                self.pos += 1
                return sorted(items, key=str) if is_set else items
            key = self.value()
            key = key if isinstance(key, str) else str(key)
            if self._peek() == ":":
                self.pos += 1
                items[key] = self.value()
                is_set = False
            else:
                items[key] = None
                is_set = True if is_set is None else is_set
            ch = self._peek()
            if ch == ",":
                self.pos += 1
            elif ch != "}":
                raise ValueError("expected , or }")

    def keyword_arguments(self) -> dict[str, Any]:
        """Read ``name=value, ...)`` up to the closing parenthesis; stop quietly on anything malformed."""
        result: dict[str, Any] = {}
        while True:
            ch = self._peek()
            if not ch or ch == ")":
                return result
            if self.text.startswith("...", self.pos):  # an elided repr: ServerArgs(model_path='x', ..., y=1)
                self.pos += 3
                if self._peek() not in (",", ")", ""):
                    continue
            else:
                name = self._KEYWORD.match(self.text, self.pos)
                if not name:
                    return result
                self.pos = name.end()
                try:
                    result[name.group(1)] = self.value()
                except ValueError:
                    return result
            ch = self._peek()
            if ch == ",":
                self.pos += 1
            elif ch != ")":
                return result

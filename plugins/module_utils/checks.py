# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Input checks shared by the pure core (the KV model, the search, the fingerprint, the tuner).

Each check returns the value in its plain Python type or raises ``error`` (a ValueError subclass of the caller's,
so that each layer keeps its own exception) with a message that names the field and quotes the value. Booleans are
never numbers here: ``True`` as a GPU count or a fraction is a caller's mistake, not 1.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:   # typing.TypeGuard is Python 3.10 and later; the hosts' 3.9 never evaluates the annotations
    from typing import TypeGuard


class InvalidInput(ValueError):
    """A value that the core cannot work with; the message names the field and the value."""


def is_number(value: Any) -> TypeGuard[float]:
    """A finite int or float that is not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def is_integer(value: Any) -> TypeGuard[int]:
    """An int that is not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def number(name: str, value: Any, error: type[Exception] = InvalidInput, minimum: float | None = None,
           above: float | None = None, maximum: float | None = None) -> float:
    """``value`` as a float: finite, not a bool, and within the bounds given (minimum and maximum inclusive,
    above exclusive)."""
    if not is_number(value):
        raise error("%s must be a finite number, got %r" % (name, value))
    value = float(value)
    if minimum is not None and value < minimum:
        raise error("%s must be >= %s, got %r" % (name, minimum, value))
    if above is not None and value <= above:
        raise error("%s must be > %s, got %r" % (name, above, value))
    if maximum is not None and value > maximum:
        raise error("%s must be <= %s, got %r" % (name, maximum, value))
    return value


def integer(name: str, value: Any, error: type[Exception] = InvalidInput, minimum: int | None = None,
            allow_none: bool = False) -> Any:
    """``value`` as an int (not a bool, not a float), at least ``minimum``; None passes with ``allow_none``."""
    if value is None and allow_none:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise error("%s must be an integer, got %r" % (name, value))
    if minimum is not None and value < minimum:
        raise error("%s must be >= %d, got %d" % (name, minimum, value))
    return int(value)


def fraction(name: str, value: Any, error: type[Exception] = InvalidInput) -> float:
    """A --mem-fraction-static-like value: a float strictly between 0 and 1."""
    value = number(name, value, error)
    if not 0 < value < 1:
        raise error("%s must be in (0, 1), got %r" % (name, value))
    return value


def parse_number(name: str, value: Any, kind: type = float, error: type[Exception] = InvalidInput) -> Any:
    """A number read from text (a command line, a log, a YAML string) or given as one: ``kind`` int or float.
    An int must be integral ("8" and 8.0 pass, "8.5" does not)."""
    if isinstance(value, bool):
        raise error("%s must be a number, got %r" % (name, value))
    try:
        parsed = float(value.strip() if isinstance(value, str) else value)
    except (TypeError, ValueError):
        raise error("%s must be a number, got %r" % (name, value)) from None
    if not math.isfinite(parsed):
        raise error("%s must be finite, got %r" % (name, value))
    if kind is int:
        if not parsed.is_integer():
            raise error("%s must be an integer, got %r" % (name, value))
        return int(parsed)
    return parsed


_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0")


def parse_bool(name: str, value: Any, error: type[Exception] = InvalidInput) -> bool:
    """A boolean given as one, as 0/1, or as text (true/false, yes/no, on/off)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in _TRUE:
        return True
    if isinstance(value, str) and value.strip().lower() in _FALSE:
        return False
    raise error("%s must be a boolean, got %r" % (name, value))


def file_name(name: str, value: Any, error: type[Exception] = InvalidInput) -> str:
    """``value`` (an inventory host name, a unit) as one file name that stays inside the directory it is joined to:
    text without ``/`` or NUL, not ``.`` or ``..``, not empty. Refused otherwise, never rewritten: two hosts must not
    share a file."""
    if not isinstance(value, str) or value in ("", ".", "..") or "/" in value or "\0" in value:
        raise error("%s %r cannot name a file inside a directory (a '/', a NUL, '.' or '..'): rename it in the "
                    "inventory" % (name, value))
    return value

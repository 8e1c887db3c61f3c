# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A urllib opener built at its first request, not at import: on Python 3.12 and later urllib's HTTPS handler loads
the CA bundle when it is made (40 ms here), which every module importing a module_utils file that holds an opener
would pay on every call, HTTP or not."""
from __future__ import annotations

import urllib.request
from typing import Any


class LazyOpener:
    """``urllib.request.build_opener(*handlers)``, made when :meth:`open` is first called."""

    def __init__(self, *handlers: urllib.request.BaseHandler | type[urllib.request.BaseHandler]) -> None:
        self._handlers = handlers
        self._opener: urllib.request.OpenerDirector | None = None

    def open(self, *args: Any, **kwargs: Any) -> Any:
        if self._opener is None:
            self._opener = urllib.request.build_opener(*self._handlers)
        return self._opener.open(*args, **kwargs)

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What every part of the KV model shares: its error class and the byte units.

The KV model is SGLang's KV-cache arithmetic, read from SGLang's released packages (PyPI wheels) 0.4.10,
0.5.5.post3, 0.5.6, 0.5.6.post2, 0.5.7 ... 0.5.23; the code paths mirrored are named where they are used. Each part
is pure and stdlib only (no I/O, no torch, no ``packaging``: it runs in modules on managed hosts too), one layer
on the ones before it:

- ``kv_versions``: SGLang version numbers and the eras of its memory code.
- ``kv_shape``: what the KV cache depends on, read from a Hugging Face config.json.
- ``kv_cell``: the bytes one token takes in the pool (KV cache dtype, attention kind, speculative drafts).
- ``kv_pool``: the budget A - P * (1 - f), the tokens it holds, and the inverse (which f gives how many tokens).
- ``kv_defaults``: the --mem-fraction-static SGLang picks when it is not given.
- ``kv_capacity_report``: everything at once for one server (the kv_capacity module), with the what-ifs.
"""
from __future__ import annotations

from ansible_collections.llmserve.sglang.plugins.module_utils import checks

# SGLang prints GiB (bytes / 2**30) as "GB".
GIB = 2 ** 30
MIB = 2 ** 20


class KvModelError(checks.InvalidInput):
    """A bad input to the KV model: the message names the field and the value."""

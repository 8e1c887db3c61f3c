# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The ``sglang`` package of a simulated host: ``python -m sglang.launch_server`` runs sglang-sim.

``sglang.__version__`` is the SGLang version the host pretends to have (host.json ``sglang_version``), read when
first asked for, so ``pip show``/``import sglang`` checks see the same version the server logs. Importing this
package never fails: without a readable host file the version is the simulator's default.
"""
from __future__ import annotations

DEFAULT_VERSION = "0.5.9"


def _host_version() -> str:
    try:
        from sglang_sim.hostspec import load_host  # pylint: disable=import-outside-toplevel
        return load_host().sglang_version
    except Exception:  # pylint: disable=broad-except
        return DEFAULT_VERSION


def __getattr__(name):
    if name == "__version__":
        return _host_version()
    raise AttributeError("module 'sglang' has no attribute %r" % name)

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The ``sglang`` package of a simulated host: ``python -m sglang.launch_server`` runs sglang-sim.

This package is the template of the stand-in distribution ``sglang``: tools/sglang_sim/build_standins.py makes one
wheel of it per simulated SGLang version (``Version: 0.5.9``, ``Requires-Dist: sglang-sim``), which pip installs
as it installs SGLang. ``sglang.__version__`` is the installed distribution's version, as SGLang's own is, and the
simulated server runs that version (sglang_sim.hostspec.sglang_version); only where no ``sglang`` distribution is
installed (run from the source tree) is it the host's ``sglang_version`` (host.json). Read when first asked for;
importing this package never fails: without a distribution or a readable host file it is the simulator's default.
"""
from __future__ import annotations

DEFAULT_VERSION = "0.5.9"


def _version() -> str:
    try:
        from sglang_sim.hostspec import sglang_version  # pylint: disable=import-outside-toplevel
        return sglang_version()
    except Exception:  # pylint: disable=broad-except
        pass
    try:  # the simulator is missing (installed with --no-deps): the distribution's version alone
        from importlib import metadata  # pylint: disable=import-outside-toplevel
        return metadata.version("sglang")
    except Exception:  # pylint: disable=broad-except
        return DEFAULT_VERSION


def __getattr__(name):
    if name == "__version__":
        return _version()
    raise AttributeError("module 'sglang' has no attribute %r" % name)

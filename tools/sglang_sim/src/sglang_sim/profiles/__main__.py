# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""``python -m sglang_sim.profiles ...``: same as ``sglang-sim-profile``."""
from __future__ import annotations

import sys

from sglang_sim.profiles import main

if __name__ == "__main__":
    sys.exit(main())

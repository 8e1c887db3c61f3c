# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""``python -m sglang.launch_server <flags>``: the same command line as SGLang's, served by sglang-sim."""
from __future__ import annotations

import sys

from sglang_sim.server import main

if __name__ == "__main__":
    sys.exit(main())

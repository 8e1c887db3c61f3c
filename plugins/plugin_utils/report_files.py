# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Controller-side: the fleet summaries' files (kv_tune_summary, rollout_summary)."""
from __future__ import annotations

import os
import tempfile


def write_if_changed(path, text, check_mode=False):
    """Write ``text`` to ``path`` atomically unless it holds it already (in check mode: only say so); whether it
    wrote (would write)."""
    try:
        with open(path, encoding="utf-8") as handle:
            if handle.read() == text:
                return False
    except FileNotFoundError:
        pass
    if check_mode:
        return True
    directory = os.path.dirname(path)
    os.makedirs(directory, mode=0o755, exist_ok=True)
    handle, tmp = tempfile.mkstemp(dir=directory, prefix=".summary.")
    with os.fdopen(handle, "w", encoding="utf-8") as out:
        out.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
    return True

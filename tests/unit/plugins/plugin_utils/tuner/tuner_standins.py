# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the tuner's tests share: the role's default settings, and a server on 8 RTX PRO 6000 (its fingerprint and the
boot of its running start, P 94.04 GiB, A 21.71 GiB)."""
from __future__ import annotations

DEFAULT_SETTINGS = {"unit": "sglang.service", "start": None, "cap": 0.98, "resolution": 0.005, "safety_gib": 1.0,
                    "budget": 6, "min_tokens": None, "force": False, "ready_timeout": 1800, "ready_interval": 5,
                    "stress_fill_ratio": 0.95, "stress_duration": 120, "confirm_timeout": 2640}
FP = {"gpu": {"name": "NVIDIA RTX PRO 6000", "count": 8, "memory_total_mib": 97887},
      "versions": {"driver": "580.1", "cuda": "13.0", "sglang": "0.5.9"}, "model": {"path": "/models/m"},
      "server_args": {"tp_size": 8}}
BOOT = {"pre_load_free_gib": 94.04, "post_load_free_gib": 21.71, "max_total_num_tokens": 159282}

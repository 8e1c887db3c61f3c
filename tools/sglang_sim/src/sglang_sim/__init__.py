# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang-sim: a stand-in for an SGLang server on NVIDIA GPUs, for hosts without a GPU.

Two things are simulated, and only because no GPU is there: the GPUs' memory (a host property read from
``host.json``) and the SGLang server process (same flags, log lines, endpoints, memory arithmetic and failures).
Everything else a deployment touches (systemd, journald, HTTP, files) is real. Python standard library only.
"""

__version__ = "0.1.0"

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""startup/startup_records.py: a log line split into its rank tag and message, and a journal into starts."""
from __future__ import annotations

from pathlib import Path

import pytest

from ansible_collections.llmserve.sglang.plugins.module_utils.startup import startup_records as sr

LOGS = Path(__file__).resolve().parents[4] / "fixtures" / "logs"


def text(name: str) -> str:
    return (LOGS / name).read_text()


@pytest.mark.parametrize("line, tag, message", [
    ("[2026-03-01 10:00:01 TP0] Load weight end.", "TP0", "Load weight end."),
    ("[2026-03-01 10:00:01 DP1 TP1 EP1] KV Cache is allocated.", "DP1 TP1 EP1", "KV Cache is allocated."),
    ("[2026-03-01 10:00:01] The server is fired up and ready to roll!", "", "The server is fired up and ready to roll!"),
    ("Nov 30 00:01:02 gpu1 python3[1234]: [10:00:01 TP3] Capture cuda graph end.", "TP3", "Capture cuda graph end."),
    ("Nov 30 00:01:02 gpu1 python3[1234]: Traceback (most recent call last):", None, "Traceback (most recent call last):"),
    ("  plain text  ", None, "plain text"),
])
def test_a_line_is_its_rank_tag_and_its_message(line, tag, message):
    assert sr.split_record(line) == (tag, message)


def test_a_failure_is_quoted_without_the_journals_prefix():
    assert sr.proof("2026-11-30T00:01:02.5+00:00 gpu1 python3[1234]: RuntimeError: CUDA out of memory. ") == \
        "RuntimeError: CUDA out of memory."


def test_a_restart_by_systemd_begins_a_new_start_and_a_start_without_sglang_is_none():
    first = ["Nov 30 00:01:00 gpu1 systemd[1]: Started sglang.service - SGLang.",
             "Nov 30 00:01:02 gpu1 python3[10]: [2026-11-30 00:01:02 TP0] Load weight begin. avail mem=94.04 GB"]
    second = ["Nov 30 00:02:00 gpu1 systemd[1]: Started sglang.service - SGLang.",
              "Nov 30 00:02:02 gpu1 python3[11]: [2026-11-30 00:02:02 TP0] Load weight begin. avail mem=94.04 GB"]
    assert sr.split_boots(first + second) == [first, second]
    assert sr.split_boots(["Nov 30 00:01:00 gpu1 systemd[1]: Started sglang.service - SGLang."]) == []


def test_draft_init_does_not_start_a_boot():
    assert len(sr.split_boots(text("classic_tp1_llama31_8b_eagle3_h100.log").splitlines())) == 1
    assert len(sr.split_boots(text("field_kimi_k25_rtx6000_tp8_eagle3.log").splitlines())) == 1

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The real config.json files (tests/fixtures/configs, sources in SOURCES.md) the KV model's tests share."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

CONFIGS = Path(__file__).resolve().parents[3] / "fixtures" / "configs"


def config(name):
    return json.loads((CONFIGS / name).read_text())


@pytest.fixture(scope="module")
def deepseek():
    return config("deepseek-v3.json")


@pytest.fixture(scope="module")
def kimi():
    return config("kimi-k2.5-int4.json")


@pytest.fixture(scope="module")
def llama8b():
    return config("llama-3.1-8b.json")


@pytest.fixture(scope="module")
def llama70b():
    return config("llama-3.1-70b.json")


@pytest.fixture(scope="module")
def qwen35():
    return config("qwen3.5-9b.json")

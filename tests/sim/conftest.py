# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Fixtures for the simulator tests: a simulated host in a temporary directory, servers stopped after each test."""
from __future__ import annotations

import itertools

import pytest

import simlib


@pytest.fixture
def make_sim(tmp_path):
    """make_sim(profile, **host.json overrides) -> simlib.Sim; every server started through it is stopped after."""
    sims = []
    counter = itertools.count()

    def make(profile="field", **overrides):
        sim = simlib.Sim(str(tmp_path / ("host%d" % next(counter))), simlib.profile_host(profile, **overrides))
        sims.append(sim)
        return sim

    yield make
    for sim in sims:
        for server in sim.servers:
            server.stop()

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""checks.py: every input check names the field and the value it refused."""
from __future__ import annotations

import math

import pytest

from ansible_collections.llmserve.sglang.plugins.module_utils import checks


class OwnError(ValueError):
    pass


@pytest.mark.parametrize("value, finite_number, integer", [
    (1, True, True), (0.5, True, False), (True, False, False), (math.inf, False, False), (math.nan, False, False),
    ("1", False, False), (None, False, False)])
def test_what_counts_as_a_number(value, finite_number, integer):
    assert (checks.is_number(value), checks.is_integer(value)) == (finite_number, integer)


def test_a_number_within_its_bounds():
    assert checks.number("x", 2, minimum=2, maximum=2) == 2.0 and isinstance(checks.number("x", 2), float)
    for value, bounds, message in ((True, {}, "x must be a finite number, got True"),
                                   (1, {"minimum": 2}, "x must be >= 2, got 1.0"),
                                   (2, {"above": 2}, "x must be > 2, got 2.0"),
                                   (3, {"maximum": 2}, "x must be <= 2, got 3.0")):
        with pytest.raises(OwnError, match="^%s$" % message):
            checks.number("x", value, OwnError, **bounds)


def test_an_integer_and_a_fraction():
    assert checks.integer("n", 3, minimum=1) == 3 and checks.integer("n", None, allow_none=True) is None
    for value in (3.0, True, None):
        with pytest.raises(checks.InvalidInput, match="n must be an integer"):
            checks.integer("n", value)
    with pytest.raises(checks.InvalidInput, match="n must be >= 1, got 0"):
        checks.integer("n", 0, minimum=1)
    assert checks.fraction("f", 0.9) == 0.9
    for value in (0, 1, 1.5):
        with pytest.raises(checks.InvalidInput, match=r"f must be in \(0, 1\)"):
            checks.fraction("f", value)


@pytest.mark.parametrize("value, kind, expected", [
    ("8", int, 8), (8.0, int, 8), (" 0.91 ", float, 0.91), (2, float, 2.0)])
def test_a_number_read_from_text(value, kind, expected):
    found = checks.parse_number("n", value, kind)
    assert found == expected and isinstance(found, kind)


@pytest.mark.parametrize("value, kind, message", [
    ("8.5", int, "must be an integer"), ("eight", float, "must be a number"), (True, float, "must be a number"),
    ("inf", float, "must be finite"), (None, float, "must be a number")])
def test_text_that_is_no_number_is_refused(value, kind, message):
    with pytest.raises(checks.InvalidInput, match=message):
        checks.parse_number("n", value, kind)


@pytest.mark.parametrize("value, expected", [
    (True, True), (0, False), ("yes", True), (" Off ", False), ("1", True), ("false", False)])
def test_a_boolean_as_ansible_writes_one(value, expected):
    assert checks.parse_bool("b", value) is expected


def test_a_boolean_that_is_none_of_those_is_refused():
    with pytest.raises(checks.InvalidInput, match="b must be a boolean, got 'maybe'"):
        checks.parse_bool("b", "maybe")


@pytest.mark.parametrize("value", ["", ".", "..", "a/b", "a\0b", None])
def test_a_name_that_would_leave_its_directory_is_refused_not_rewritten(value):
    with pytest.raises(checks.InvalidInput, match="cannot name a file inside a directory"):
        checks.file_name("The inventory host name", value)


def test_a_plain_name_is_kept_as_it_is():
    assert checks.file_name("host", "gpu-01.example") == "gpu-01.example"

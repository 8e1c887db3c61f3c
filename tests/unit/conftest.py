# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Fixtures shared by the unit tests."""
from __future__ import annotations

import multiprocessing
import os
import shutil
import tempfile

import pytest


@pytest.fixture
def root_dir():
    """A directory only root can write, every component up to / too (under /run: /tmp is writable by anyone), for
    the files root must trust. Needs root (the tests that use it are skipped without)."""
    if os.geteuid() != 0 or not os.path.isdir("/run"):
        pytest.skip("needs root and /run")
    path = tempfile.mkdtemp(prefix="llmserve-unit-", dir="/run")
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path)


def _in_child(seconds, function, *args):
    """function(*args) in a forked child: ("ok", its result), ("error", the message of what it raised) or ("hung",
    None) when it has not returned after ``seconds`` (then killed): for reads that must never block."""
    context = multiprocessing.get_context("fork")
    queue = context.Queue()

    def child():
        try:
            queue.put(("ok", function(*args)))
        except BaseException as exc:   # noqa: B036  carried to the parent, whatever it is
            queue.put(("error", str(exc)))

    process = context.Process(target=child)
    process.start()
    process.join(seconds)
    if process.is_alive():
        process.kill()
        process.join()
        return "hung", None
    return queue.get(timeout=5)


@pytest.fixture
def in_child():
    """_in_child, for tests."""
    return _in_child

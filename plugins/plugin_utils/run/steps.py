# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The step protocol between the tuner's run (this room) and the kv_tune action that performs it.

The run is a generator: it yields a step, the action performs it and sends back the answer, and the generator's
return value is the result. A step is a plain dict, made only by the constructors here:

- :func:`call`: one of the collection's modules on the host; the answer is its result. A failure that is not
  ``may_fail`` ends the run (the action raises a :class:`RunFailed`).
- :func:`say`: a progress line for the operator (a call may carry one too, said before it); no answer.
- :func:`tune_unit`: one unit's :class:`unit_run.UnitRun`, which the action runs with the cleanup it owns (the lock,
  an armed trial); the answer is its result. Only :func:`host.host_steps` yields it.
- the ``nodes`` steps (:func:`join` .. :func:`posted`): the other nodes of a server that spans hosts, over the
  controller; plugin_utils/node_channel.py's NodeLink performs them.
"""
from __future__ import annotations

from collections.abc import Generator
from typing import Any, Optional, TypeVar

Step = dict[str, Any]
Answer = Any
T = TypeVar("T")
# A run, or a part of one: yields steps, is sent their answers, returns its result.
Steps = Generator[Step, Answer, T]


class RunFailed(Exception):
    """The run of a unit cannot go on; the message says why and what was left on the host."""


def call(module: str, args: dict[str, Any], may_fail: bool = False, say: Optional[str] = None) -> Step:
    """Run ``module`` on the host with ``args``; its result is the answer."""
    step: Step = {"call": module, "args": args, "may_fail": may_fail}
    if say is not None:
        step["say"] = say
    return step


def say(line: str) -> Step:
    """A line for the operator."""
    return {"say": line}


def tune_unit(unit: str, args: dict[str, Any], label: str, info: Optional[dict[str, Any]],
              neighbours: dict[str, Any], tuned: dict[str, Any]) -> Step:
    """Run ``unit``'s search (its UnitRun) with the action's cleanup; its result is the answer."""
    return {"tune_unit": unit, "args": args, "label": label, "info": info, "neighbours": neighbours, "tuned": tuned}


# -- the nodes of a server that spans hosts ------------------------------------------------------------------------

def join(ranks: list[int], timeout: float, what: str) -> Step:
    """Node 0: wait for the hello of every node in ``ranks``; the answer is their hellos."""
    return {"nodes": "join", "ranks": ranks, "timeout": timeout, "what": what}


def tell(message: dict[str, Any]) -> Step:
    """Node 0: post the next step for the other nodes; the answer is its number."""
    return {"nodes": "tell", "message": message}


def answers(number: int, ranks: list[int], timeout: float, what: str) -> Step:
    """Node 0: wait for every node's answer to step ``number``; the answer is their answers."""
    return {"nodes": "answers", "n": number, "ranks": ranks, "timeout": timeout, "what": what}


def hello(message: dict[str, Any]) -> Step:
    """Another node: say it is there, and what it found."""
    return {"nodes": "hello", "message": message}


def next_step(number: int, timeout: float, what: str) -> Step:
    """Another node: wait for node 0's step ``number``; the answer is that step."""
    return {"nodes": "next", "n": number, "timeout": timeout, "what": what}


def answer(number: int, message: dict[str, Any]) -> Step:
    """Another node: its answer to step ``number``."""
    return {"nodes": "answer", "n": number, "message": message}


def posted(number: int) -> Step:
    """Another node: whether node 0 posted step ``number`` yet (the answer; it does not wait)."""
    return {"nodes": "posted", "n": number}

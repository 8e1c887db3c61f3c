# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What one unit's run is given (:class:`UnitContext`) and what it learns as it goes (:class:`UnitState`): the two
objects every part of the run (unit_run.UnitRun's phases) shares, instead of one class's attributes."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:
    from ansible_collections.llmserve.sglang.plugins.plugin_utils.run.calls import UnitCalls

Info = dict[str, Any]   # a kv_fingerprint result


@dataclass(frozen=True)
class UnitContext:
    """``host`` is the inventory host, ``label`` names the unit in every line; ``args`` the action's arguments for
    this unit; ``tuned`` unit -> result of the host's units tuned before it; ``outcome_of(host)`` what another host's
    kv_tune registered (a class's canary), None when it has nothing; ``clock()`` the time as the reports write it;
    ``lock_held``: ``run_id`` is a caller's that holds the unit's lock already (rollout.yml), which this run renews but
    does not release."""
    host: str
    label: str
    args: dict[str, Any]
    check_mode: bool
    run_id: str
    controller: str
    clock: Callable[[], str]
    tuned: dict[str, Any] = field(default_factory=dict)
    outcome_of: Callable[[str], Optional[dict[str, Any]]] = lambda _host: None
    lock_held: bool = False

    @property
    def unit(self) -> str:
        return self.args["unit"]


@dataclass
class UnitState:
    """The run's findings. ``settings`` are check_settings' of the arguments (narrowed by a near miss)."""
    url: str
    settings: dict[str, Any] = field(default_factory=dict)
    info: Optional[Info] = None     # its kv_fingerprint result, given by the caller or read first
    neighbours: dict[str, Info] = field(default_factory=dict)   # the host's units that share its GPUs
    gpus: Optional[list[int]] = None    # the unit's (and its neighbours') GPUs; None: unknown, every GPU counts
    checkpoint: Optional[int] = None    # the model checkpoint's bytes (kv_fingerprint), None when unknown
    invocation_id: Optional[str] = None   # the start of the server measured in place
    locked: bool = False    # this run holds the unit's lock (the action releases it whatever happens)
    changed: bool = False
    # the search
    missed: Optional[float] = None   # the value that missed under real traffic on this fingerprint (headroom watch)
    first_other: dict[int, int] = field(default_factory=dict)   # GPU -> bytes other processes held at the first look
    first_unlisted: dict[int, int] = field(default_factory=dict)   # GPU -> bytes no process was listed for then
    # what pool_model.pool_residual_gib needs of the unit: config, server arguments, SGLang version, environment
    pool_inputs: Optional[tuple[Any, Any, Any, Any]] = None   # None: not judged
    pool_reference: Optional[float] = None   # that figure at the run's first trusted start
    sizing: str = "A - P x (1 - f)"   # how SGLang sizes the pool: its formula, or after CUDA-graph capture
    seen_boots: list[dict[str, Any]] = field(default_factory=list)   # the startup logs read (kv_tune_pin_tokens)
    class_tokens: Optional[int] = None   # a member of a class: its canary's verified pool
    cap: Optional[int] = None   # the pool cap the last commit pinned (kv_tune_pin_tokens)
    no_cap_said: bool = False   # why a pin caps no pool, said once
    # a server that spans hosts
    node: Optional[dict[str, Any]] = None   # this unit's part in it (multinode.node_of)
    ranks: Optional[list[int]] = None   # node 0 once the others joined: their ranks
    boots: Optional[dict[str, Any]] = None   # node 0: the others' startup facts as they joined
    # node 0: every other node's last start was its pin's, on what is on disk now, and its unit is stopped
    others_failed_last: bool = False
    nodes_lower_to: Optional[float] = None   # node 0: the lowest value another node's watch asks to verify
    start_moved: list[str] = field(default_factory=list)   # the other nodes: what moved while their server started


class Part(object):
    """A part of the run: the context, the state and the unit's calls it shares with the others."""

    def __init__(self, ctx: UnitContext, state: UnitState, calls: UnitCalls) -> None:
        self.ctx, self.state, self.calls = ctx, state, calls

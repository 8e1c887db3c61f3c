# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""run/steps.py: each step is the dict plugins/action/kv_tune.py and plugin_utils/node_channel.py read."""
from __future__ import annotations

from ansible_collections.llmserve.sglang.plugins.plugin_utils.run import steps


def test_a_call_and_a_line():
    expected = {"call": "kv_stress", "args": {"duration": 40}, "may_fail": False}
    assert steps.call("kv_stress", {"duration": 40}) == expected
    assert steps.call("kv_trial", {}, may_fail=True, say="why")["say"] == "why"
    assert steps.say("gpu1: done") == {"say": "gpu1: done"}


def test_a_unit_to_tune():
    assert steps.tune_unit("a.service", {"unit": "a.service"}, "gpu1/a", None, {}, {}) == {
        "tune_unit": "a.service", "args": {"unit": "a.service"}, "label": "gpu1/a", "info": None, "neighbours": {},
        "tuned": {}}


def test_the_messages_to_the_other_nodes_name_their_kind():
    made = [steps.join([1], 60, "w"), steps.tell({"do": "done"}), steps.answers(3, [1], 60, "w"),
            steps.hello({"rank": 1}), steps.next_step(2, 60, "w"), steps.answer(2, {"ok": True}), steps.posted(4)]
    assert [step["nodes"] for step in made] == ["join", "tell", "answers", "hello", "next", "answer", "posted"]
    # what NodeLink.perform reads of each
    assert made[2]["n"] == 3 and made[4]["n"] == 2 and made[5]["n"] == 2 and made[6]["n"] == 4
    assert made[0]["ranks"] == [1] and made[1]["message"] == {"do": "done"}


def test_a_run_that_cannot_go_on_is_an_exception_with_its_reason():
    assert str(steps.RunFailed("why")) == "why" and issubclass(steps.RunFailed, Exception)

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""plugin_utils/fleet/rollout_classes.py: per_class inside the rollout, a class formed as the batches go."""
from __future__ import annotations

import pytest

from ansible_collections.llmserve.sglang.plugins.plugin_utils.fleet import rollout_classes
from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner.class_values import class_value


def tuned(unit, digest, value, tokens=440000):
    """A unit's kv_tune outcome that pinned ``value`` under ``digest``."""
    return {"unit": unit, "status": "tuned", "changed": True,
            "result": {"fingerprint_hash": digest, "after": {"mem_fraction_static": value, "tokens": tokens}}}


def fingerprints(*units):
    """kv_fingerprint's registered loop over the host's units: (unit, digest) each."""
    return [{"item": unit, "fingerprint_hash": digest, "gpu_memory": []} for unit, digest in units]


def test_a_server_whose_new_fingerprint_an_earlier_batch_tuned_verifies_that_value():
    plan = rollout_classes.class_plan("h3", fingerprints(("sglang.service", "NEW")),
                                      {"h1": tuned("sglang.service", "NEW", 0.86), "h2": None})
    entry = plan["units"]["sglang.service"]
    assert (entry["role"], entry["value"], plan["canary"]) == ("member", 0.86, False)
    assert class_value(entry) == 0.86
    assert plan["lines"] == ["h3: member of class NEW: h1 holds the class's pin 0.86"]


def test_the_first_server_of_a_new_fingerprint_searches():
    # h1 re-tuned under another fingerprint (another model, other GPUs); h2 found no value, h4 failed: neither says
    # anything of a class
    earlier = {"h1": tuned("sglang.service", "OTHER", 0.86),
               "h2": {"unit": "sglang.service", "status": "no_stable_value", "result": {"fingerprint_hash": "NEW"}},
               "h4": {"failed": True, "msg": "boom"}}
    plan = rollout_classes.class_plan("h3", fingerprints(("sglang.service", "NEW")), earlier)
    assert plan["units"]["sglang.service"]["role"] == "canary" and plan["canary"] is True
    assert class_value(plan["units"]["sglang.service"]) is None


def test_the_servers_of_one_host_with_one_fingerprint_search_once():
    # the first searches; the second verifies its value in the same kv_tune run (canary_host is this host)
    plan = rollout_classes.class_plan("h1", fingerprints(("sglang@a.service", "NEW"), ("sglang@b.service", "NEW")), {})
    a, b = plan["units"]["sglang@a.service"], plan["units"]["sglang@b.service"]
    assert a["role"] == "canary"
    assert (b["role"], b["canary_host"], b["canary_unit"]) == ("member", "h1", "sglang@a.service")
    assert class_value(b, tuned("sglang@a.service", "NEW", 0.86)) == 0.86


@pytest.mark.parametrize("outcome, expected", [
    # a host's outcome with several units: each unit that ends verified
    ({"units": {"sglang@a.service": tuned("sglang@a.service", "NEW", 0.86),
                "sglang@b.service": {"status": "unchanged", "fingerprint_hash": "NEW",
                                     "pin": {"mem_fraction_static": 0.855}},
                "sglang@c.service": {"failed": True, "msg": "boom"}}},
     {"sglang@a.service": 0.86, "sglang@b.service": 0.855}),
    (tuned("sglang.service", "NEW", 0.86), {"sglang.service": 0.86}),
    ({"unit": "sglang.service", "status": "unchanged", "fingerprint_hash": "NEW", "pin": None}, {}),
    (None, {}),
])
def test_what_an_earlier_hosts_re_tune_verified(outcome, expected):
    found = rollout_classes.verified_units(outcome)
    assert {unit: entry["pin"]["mem_fraction_static"] for unit, entry in found.items()} == expected
    assert all(entry["fingerprint_hash"] == "NEW" for entry in found.values())


def test_the_host_itself_is_never_its_own_earlier_batch():
    # a value of its own (an outcome already registered) is no class's verified value for itself
    plan = rollout_classes.class_plan("h1", fingerprints(("sglang.service", "NEW")),
                                      {"h1": tuned("sglang.service", "NEW", 0.86)})
    assert plan["units"]["sglang.service"]["role"] == "canary"

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""service/host_units.py: the host's units, the GPUs each holds, their neighbours and their results."""
from __future__ import annotations

import pytest

from ansible_collections.llmserve.sglang.plugins.module_utils.service import host_units


def gpu(index, server_bytes):
    return {"index": index, "total_bytes": 80 * 2 ** 30, "reserved_bytes": 0, "server_bytes": server_bytes,
            "other_bytes": 0, "other_processes": []}


def test_a_units_gpus_are_those_its_processes_use():
    assert host_units.unit_gpus([gpu(0, 5), gpu(1, 5), gpu(2, 0), gpu(3, 0)]) == [0, 1]
    assert host_units.unit_gpus([gpu(0, 0)]) is None and host_units.unit_gpus(None) is None


@pytest.mark.parametrize("gpu_sets, expected", [
    ({"a": [0, 1, 2, 3], "b": [4, 5, 6, 7]}, {"a": [], "b": []}),
    ({"a": [0, 1, 2, 3], "b": None}, {"a": ["b"], "b": ["a"]}),   # b's GPUs unknown: it may hold any of a's
    ({"a": [0, 1, 2, 3], "b": [3, 4]}, {"a": ["b"], "b": ["a"]}),
    ({"a": [0, 1], "b": [4], "c": [0, 1, 5], "d": [5]}, {"a": ["c"], "b": [], "c": ["a", "d"], "d": ["c"]}),
])
def test_units_that_share_a_gpu_are_each_others_neighbours(gpu_sets, expected):
    assert host_units.neighbours(gpu_sets) == expected


UUIDS = ["GPU-%d%d%d%d0000-aaaa" % (i, i, i, i) for i in range(8)]


@pytest.mark.parametrize("args, environment, expected", [
    ({}, {}, [0]),
    ({"tp_size": "4", "base_gpu_id": "4"}, {}, [4, 5, 6, 7]),
    ({"tp_size": "4", "gpu_id_step": "2", "base_gpu_id": "1"}, {}, [1, 3, 5, 7]),
    ({"tp_size": "2", "dp_size": "2"}, {}, [0, 1, 2, 3]),                            # each replica on the next GPUs
    ({"tp_size": "4", "dp_size": "4", "enable_dp_attention": True}, {}, [0, 1, 2, 3]),   # DP within the TP group
    ({"tp_size": "16", "nnodes": "2", "node_rank": "1"}, {}, list(range(8))),       # this node's half
    ({"tp_size": "2", "pp_size": "2"}, {}, [0, 1, 2, 3]),
    ({"tp_size": "4"}, {"CUDA_VISIBLE_DEVICES": "4,5,6,7"}, [4, 5, 6, 7]),
    ({"tp_size": "2", "base_gpu_id": "1"}, {"CUDA_VISIBLE_DEVICES": "7, 3,5"}, [3, 5]),
    ({"tp_size": "2"}, {"CUDA_VISIBLE_DEVICES": "GPU-66660000-aaaa,GPU-2222"}, [2, 6]),   # UUIDs, a unique prefix
    ({"tp_size": "8", "base_gpu_id": "4"}, {}, None),                                # past the host's 8 GPUs
    ({"tp_size": "2"}, {"CUDA_VISIBLE_DEVICES": "1,-1,2"}, None),                   # CUDA stops at -1
    ({"tp_size": "2"}, {"CUDA_VISIBLE_DEVICES": "GPU-,3"}, None),                   # a prefix of every UUID
    ({"tp_size": "1"}, {"CUDA_VISIBLE_DEVICES": "MIG-0d1c2b3a-1111"}, None),        # not this function's to guess
    ({"tp_size": "two"}, {}, None),
])
def test_the_gpus_a_unit_is_given_come_from_its_configuration(args, environment, expected):
    assert host_units.configured_gpus(args, environment, UUIDS) == expected


def test_labels_and_report_names_of_several_units():
    assert host_units.target_label("gpu1", "sglang@a.service") == "gpu1/sglang@a"
    assert host_units.report_name("gpu1/sglang@a") == "gpu1_sglang@a"


def unit_result(label, status, **extra):
    return dict({"status": status, "label": label, "line": "%s: %s" % (label, status), "changed": status == "tuned"},
                **extra)


def test_a_host_with_several_units_fails_when_one_unit_does_and_names_it():
    both = host_units.combine_units("h", {"sglang@a.service": unit_result("h/sglang@a", "tuned"),
                                          "sglang@b.service": unit_result("h/sglang@b", "unchanged")})
    assert both["status"] == "tuned" and both["changed"] and "msg" not in both
    assert both["line"] == "h/sglang@a: tuned\nh/sglang@b: unchanged"
    same = host_units.combine_units("h", {"a": unit_result("h/a", "unchanged"), "b": unit_result("h/b", "unchanged")})
    assert same["status"] == "unchanged" and not same["changed"]
    one_failed = host_units.combine_units("h", {"a": unit_result("h/a", "tuned"),
                                                "b": {"failed": True, "msg": "b: boom", "label": "h/b"}})
    assert one_failed["status"] == "failed" and one_failed["msg"] == "h: 1 of 2 units not tuned: b: boom"
    unstable = host_units.combine_units("h", {"a": unit_result("h/a", "no_stable_value", msg="h/a: none held")})
    assert unstable["status"] == "no_stable_value"
    check = host_units.combine_units("h", {"a": unit_result("h/a", "would_tune"), "b": unit_result("h/b", "unchanged")})
    assert check["status"] == "would_tune"


@pytest.mark.parametrize("gpu_memory, expected", [
    (None, None),
    ([{"index": 0, "server_bytes": 5, "other_bytes": 2 ** 33}, {"index": 1, "server_bytes": 0, "other_bytes": 2 ** 33}],
     8.0),
    ([{"index": 0, "server_bytes": 0, "other_bytes": 2 ** 30}, {"index": 1, "server_bytes": 0, "other_bytes": 2 ** 30}],
     2.0),
    ([{"index": 0, "server_bytes": 5, "other_bytes": 0}], 0.0),
])
def test_other_processes_memory_on_the_units_gpus(gpu_memory, expected):
    assert host_units.other_gib(gpu_memory) == expected


def test_memory_outside_a_unit_and_its_neighbours():
    mine = [dict(gpu(0, 60), other_bytes=52), dict(gpu(1, 60), other_bytes=2)]
    neighbour = [gpu(0, 50), gpu(1, 0), gpu(2, 70)]
    assert host_units.outside_bytes(mine, [neighbour]) == {0: 2, 1: 2}
    assert host_units.outside_bytes(mine) == {0: 52, 1: 2} and host_units.outside_bytes(None, [None]) == {}

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""sglang-sim-smi read by the collection's own nvidia-smi probe (module_utils/host/nvidia_smi.py)."""
from __future__ import annotations

import os

import simlib

from ansible_collections.llmserve.sglang.plugins.module_utils.host.nvidia_smi import parse_csv, probe_nvidia_smi
from ansible_collections.llmserve.sglang.plugins.module_utils.startup.startup_log import parse_startup_log

MIB = 2 ** 20
FIXTURES = os.path.join(simlib.REPO, "tests", "fixtures", "nvidia_smi")


def test_idle_host_through_gpu_probe(make_sim):
    sim = make_sim("field", faults={"gpu_occupied_mib": {"2": 2048}})
    result = probe_nvidia_smi(sim.smi_runner())
    assert result["driver_version"] == "580.95.05" and result["cuda_driver_version"] == "13.0"
    gpus = result["gpus"]
    assert [gpu["index"] for gpu in gpus] == list(range(8))
    assert len({gpu["uuid"] for gpu in gpus}) == 8
    for gpu in gpus:
        assert gpu["name"] == "NVIDIA RTX PRO 6000 Blackwell Server Edition"
        assert gpu["memory_total_bytes"] == 97887 * MIB and gpu["memory_reserved_bytes"] == 540 * MIB
        assert gpu["persistence_mode"] is True and gpu["mig_mode"] == "disabled"
        occupied = 2048 if gpu["index"] == 2 else 0
        assert gpu["memory_used_bytes"] == occupied * MIB
        assert gpu["memory_free_bytes"] == (97887 - 540 - occupied) * MIB
        assert len(gpu["compute_processes"]) == (1 if occupied else 0)


def test_running_server_through_gpu_probe(make_sim):
    sim = make_sim("field")
    server = sim.start(simlib.launch_args("field"))
    assert server.wait_ready(), server.log
    facts = parse_startup_log(server.log)
    gpus = probe_nvidia_smi(sim.smi_runner())["gpus"]
    for gpu, rank in zip(gpus, facts["ranks"]):
        # What the server logged as free after start is what nvidia-smi shows free (to the MiB rounding).
        assert abs(gpu["memory_free_bytes"] / 2 ** 30 - rank["post_capture_free_gib"]) < 0.02
        processes = gpu["compute_processes"]
        assert [process["pid"] for process in processes] == [server.proc.pid]
        assert processes[0]["name"] == "sglang::scheduler_TP%d" % gpu["index"]
        assert processes[0]["used_memory_bytes"] == gpu["memory_used_bytes"]
    server.stop()
    assert not sim.state_files()
    assert all(gpu["memory_used_bytes"] == 0 for gpu in probe_nvidia_smi(sim.smi_runner())["gpus"])


def test_two_servers_on_one_host_each_have_their_gpus(make_sim):
    """sglang@a on GPUs 0-3 and sglang@b on 4-7: nvidia-smi shows each server on its own GPUs, and a third server
    started on a's GPUs finds a's memory taken, as CUDA would."""
    sim = make_sim("h100-llama70b")
    first = sim.start(simlib.launch_args("h100-llama70b", tp_size=4, base_gpu_id=0))
    second = sim.start(simlib.launch_args("h100-llama70b", tp_size=4, base_gpu_id=4))
    assert first.wait_ready(), first.log
    assert second.wait_ready(), second.log
    assert len(sim.state_files()) == 2
    gpus = probe_nvidia_smi(sim.smi_runner())["gpus"]
    owners = [[process["pid"] for process in gpu["compute_processes"]] for gpu in gpus]
    assert owners == [[first.proc.pid]] * 4 + [[second.proc.pid]] * 4
    idle = parse_startup_log(first.log)["ranks"][0]["pre_load_free_gib"]
    third = sim.start(simlib.launch_args("h100-llama70b", tp_size=4, base_gpu_id=0, mem_fraction_static=0.3))
    assert third.wait_exit(30) is not None
    held = gpus[0]["memory_used_bytes"] / 2 ** 30
    crowded = parse_startup_log(third.log)["ranks"][0]["pre_load_free_gib"]
    assert abs((idle - crowded) - held) < 0.05, (idle, crowded, held)
    second.stop()
    assert sim.state_files() == [os.path.join(sim.state_dir, "gpus-%d.json" % first.proc.pid)]
    first.stop()


def test_state_of_a_killed_server_is_ignored(make_sim):
    sim = make_sim("single-gpu")
    server = sim.start(simlib.launch_args("single-gpu"))
    assert server.wait_ready(), server.log
    server.proc.kill()
    server.proc.wait(10)
    assert sim.state_files() == [os.path.join(sim.state_dir, "gpus-%d.json" % server.proc.pid)]
    assert probe_nvidia_smi(sim.smi_runner())["gpus"][0]["memory_used_bytes"] == 0


def test_invalid_field_is_nvidia_smis_error(make_sim):
    done = make_sim("single-gpu").run("sglang_sim.smi", ["--query-gpu=index,device_minor", "--format=csv"])
    with open(os.path.join(FIXTURES, "query_gpu_invalid_field.txt"), encoding="utf-8") as handle:
        assert done.stdout == handle.read()
    assert done.returncode == 2


def test_csv_header_units_and_list(make_sim):
    sim = make_sim("h200-deepseek-v3")
    done = sim.run("sglang_sim.smi", ["--query-gpu=index,name,memory.total,memory.free,power.limit", "--format=csv"])
    lines = done.stdout.splitlines()
    assert lines[0] == "index, name, memory.total [MiB], memory.free [MiB], power.limit [W]"
    assert lines[1] == "0, NVIDIA H200, 143771 MiB, 143155 MiB, 700.00 W"
    rows = parse_csv(done.stdout)
    assert len(rows) == 8 and rows[7]["index"] == "7"
    listing = sim.run("sglang_sim.smi", ["-L"]).stdout.splitlines()
    assert len(listing) == 8 and listing[0].startswith("GPU 0: NVIDIA H200 (UUID: GPU-")


def test_plain_table_has_the_real_layout(make_sim):
    table = make_sim("h200-deepseek-v3").run("sglang_sim.smi", []).stdout.splitlines()
    with open(os.path.join(FIXTURES, "table_h200_580_device.txt"), encoding="utf-8") as handle:
        real = handle.read().splitlines()
    # Same frame, headers and column widths as a real R580 table (the first GPU block and the process box).
    assert [len(line) for line in table[1:12]] == [len(line) for line in real[1:12]]
    assert table[2] == real[2] and table[4:8] == real[4:8]
    assert table[8].startswith("|   0  NVIDIA H200 ") and table[9].endswith("/ 143771MiB |      0%      Default |")
    assert table[-8:] == real[-8:]      # the blank line and the (empty) process box

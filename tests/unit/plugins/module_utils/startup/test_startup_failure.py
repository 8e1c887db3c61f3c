# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""startup/startup_failure.py: what a failed start was, by the phase in which it died, on real logs."""
from __future__ import annotations

from pathlib import Path

import pytest

from ansible_collections.llmserve.sglang.plugins.module_utils.startup import startup_failure as sf


LOGS = Path(__file__).resolve().parents[4] / "fixtures" / "logs"


def text(name: str) -> str:
    return (LOGS / name).read_text()


OOM_LINE = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.93 GiB. GPU 0 has a total capacity "
            "of 79.14 GiB of which 3.79 GiB is free.")


def _boot_until(name: str, stop: str) -> list:
    lines = text(name).splitlines()
    return lines[:next(i for i, line in enumerate(lines) if stop in line) + 1]


def test_weights_oom_during_load():
    lines = _boot_until("classic_tp1_qwen25_7b_h100.log", "Load weight begin")
    lines += ["[2025-08-11 21:33:46] Scheduler hit an exception: Traceback (most recent call last):",
              '  File "/sgl/python/sglang/srt/model_loader/loader.py", line 1, in load_model', "    x()", OOM_LINE]
    failure = sf.classify_failure(lines)
    assert failure["kind"] == "weights_oom" and failure["line"] == OOM_LINE
    assert "cannot help" in failure["advice"]


def test_oom_during_capture_without_the_wrapper_message():
    lines = _boot_until("classic_tp1_qwen25_7b_h100.log", "Capture cuda graph begin")
    lines += ["[2025-08-11 21:33:49] Scheduler hit an exception: Traceback (most recent call last):", OOM_LINE]
    assert sf.classify_failure(lines)["kind"] == "capture_oom"


def test_oom_after_kv_outside_capture_is_runtime_oom():
    # classic EAGLE loads the draft after the target's KV pool: an OOM there is cured by a lower f
    lines = _boot_until("classic_tp1_llama31_8b_eagle3_h100.log", "Load weight begin. avail mem=59.60 GB")
    lines += ["[2025-08-11 02:18:38] Scheduler hit an exception: Traceback (most recent call last):",
              '  File "/sgl/python/sglang/srt/model_loader/loader.py", line 1, in load_model', "    x()", OOM_LINE]
    assert sf.classify_failure(lines)["kind"] == "runtime_oom"


def test_explicit_capture_failed_line_beats_an_earlier_bare_oom():
    # DeepSeek-V3.2: the indexer's OOM traceback (no capture frame in the excerpt, no KV line), then SGLang's own
    # "Capture cuda graph failed": the explicit phase line wins over the position of the first OOM.
    lines = _boot_until("classic_tp1_qwen25_7b_h100.log", "Load weight end")
    lines += ["Traceback (most recent call last):",
              '  File "/sgl/python/sglang/srt/layers/attention/nsa/nsa_indexer.py", line 1, in forward_cuda',
              "    q_fp8 = q.new_empty(shape)", OOM_LINE,
              "[2025-08-11 21:33:49] Scheduler hit an exception: Traceback (most recent call last):",
              "Exception: Capture cuda graph failed: " + OOM_LINE.split(": ", 1)[1]]
    failure = sf.classify_failure(lines)
    assert failure["kind"] == "capture_oom" and failure["line"].startswith("Exception: Capture cuda graph failed")
    assert failure["oom"] == {"tried_gib": 4.93, "free_gib": 3.79, "gpu": 0}


SERVING_LOOP = ['  File "/sgl/python/sglang/srt/managers/scheduler.py", line 1, in event_loop_overlap',
                "    batch_result = self.run_batch(batch)",
                '  File "/sgl/python/sglang/srt/managers/scheduler.py", line 2, in run_batch',
                "    ) = self.tp_worker.forward_batch_generation(model_worker_batch)",
                '  File "/sgl/python/sglang/srt/managers/tp_worker_overlap_thread.py", line 3, in forward_thread_func_',
                "    self.forward_thread_func_()"]


def test_oom_in_the_serving_loop_without_a_kv_line_is_runtime_oom():
    # an excerpt: only the scheduler's traceback, whose frames are the serving loop's
    lines = ["[2025-08-11 21:40:00] Scheduler hit an exception: Traceback (most recent call last):"] + SERVING_LOOP
    lines += [OOM_LINE, "[2025-08-11 21:40:00] Received sigquit from a child process. It usually means the child failed."]
    failure = sf.classify_failure(lines)
    assert failure["kind"] == "runtime_oom" and failure["line"] == OOM_LINE
    # the same frames after the weights loaded, before any KV line: still the serving loop
    loaded = _boot_until("classic_tp1_qwen25_7b_h100.log", "Load weight end")
    assert sf.classify_failure(loaded + lines)["kind"] == "runtime_oom"


def test_weights_oom_needs_the_load_phase_or_loader_frames():
    loaded = _boot_until("classic_tp1_qwen25_7b_h100.log", "Load weight end")
    bare = ["[2025-08-11 21:33:47] Scheduler hit an exception: Traceback (most recent call last):", OOM_LINE]
    # after the load ended, with no frame: not the weights
    assert sf.classify_failure(loaded + bare)["kind"] == "runtime_oom"
    # the loader's frames prove it, even without any load line
    loader = ['  File "/sgl/python/sglang/srt/model_executor/model_runner.py", line 1, in load_model',
              "    self.model = get_model(...)"]
    assert sf.classify_failure(bare[:1] + loader + bare[1:])["kind"] == "weights_oom"


def test_a_graph_replay_frame_is_not_capture():
    replay = ['  File "/sgl/python/sglang/srt/model_executor/cuda_graph_runner.py", line 9, in replay',
              "    self.graphs[bs].replay()"]
    lines = ["[2025-08-11 21:40:00] Scheduler hit an exception: Traceback (most recent call last):"]
    lines += SERVING_LOOP + replay + [OOM_LINE]
    assert sf.classify_failure(lines)["kind"] == "runtime_oom"


def test_pool_too_small_and_classic_message():
    assert sf.classify_failure(["AssertionError: Memory pool size is too small"])["kind"] == "init_oom"
    line = ("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: "
            "mem_fraction_static=0.835")
    assert sf.classify_failure([line]) == {"kind": "init_oom", "line": line,
                                           "advice": sf.FAILURE_KINDS["init_oom"]}


def test_capture_failed_without_oom_is_a_crash():
    line = "Exception: Capture cuda graph failed: RuntimeError: CUDA error: an illegal memory access was encountered"
    assert sf.classify_failure([line])["kind"] == "crash"


def test_kv_pool_exhaustion_is_not_a_device_oom():
    failure = sf.classify_failure(["[2025-03-20 01:00:00 TP0] Scheduler hit an exception: Traceback (most recent call "
                                   "last):", "RuntimeError: Decode out of memory. Try to lower your batch size."])
    assert failure["kind"] == "crash"


# torch 2.x, as the simulator prints it (tools/sglang_sim logs.cuda_oom_message), cut after the free memory
TORCH2_OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
              "79.15 GiB of which 1.23 GiB is free. Including non-PyTorch memory, this process has 77.91 GiB memory "
              "in use.")


# torch 1.x
TORCH1_OOM = ("RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 1; 79.15 GiB total capacity; "
              "76.50 GiB already allocated; 1.23 GiB free; 77.00 GiB reserved in total by PyTorch)")


def test_oom_numbers_torch2_wording():
    failure = sf.classify_failure([TORCH2_OOM])
    # nothing proves the weight load: the safe kind (lower f)
    assert failure["kind"] == "runtime_oom" and failure["line"] == TORCH2_OOM
    assert failure["oom"] == {"tried_gib": 2.0, "free_gib": 1.23, "gpu": 0}


def test_oom_numbers_torch1_wording():
    failure = sf.classify_failure([TORCH1_OOM])
    assert failure["oom"] == {"tried_gib": 20.0 / 1024, "free_gib": 1.23, "gpu": 1}


@pytest.mark.parametrize("tried, free, tried_gib, free_gib", [
    ("672.00 MiB", "200.75 MiB", 672.0 / 2 ** 10, 200.75 / 2 ** 10),
    ("5.00 KiB", "3.00 GiB", 5.0 / 2 ** 20, 3.0),
    ("512 bytes", "0 bytes", 512.0 / 2 ** 30, 0.0),
    ("1024 B", "0.00 KiB", 2.0 ** -20, 0.0),
    ("1.50 TiB", "2.00 GiB", 1536.0, 2.0),
])
def test_oom_numbers_units(tried, free, tried_gib, free_gib):
    line = ("torch.OutOfMemoryError: HIP out of memory. Tried to allocate %s. GPU 3 has a total capacity of 191.98 "
            "GiB of which %s is free." % (tried, free))
    assert sf.classify_failure([line])["oom"] == {"tried_gib": tried_gib, "free_gib": free_gib, "gpu": 3}


def test_oom_numbers_of_a_capture_oom_wrapper_line():
    lines = _boot_until("classic_tp1_qwen25_7b_h100.log", "Capture cuda graph begin")
    wrapper = "Exception: Capture cuda graph failed: " + TORCH2_OOM.split(": ", 1)[1]
    failure = sf.classify_failure(lines + [wrapper])
    assert failure["kind"] == "capture_oom" and failure["line"] == wrapper
    assert failure["oom"] == {"tried_gib": 2.0, "free_gib": 1.23, "gpu": 0}


def test_oom_numbers_from_the_nearest_oom_line():
    # the proof is a bare "CUDA error: out of memory"; torch's message of another rank follows it
    lines = _boot_until("classic_tp1_qwen25_7b_h100.log", "Capture cuda graph begin")
    bare = "RuntimeError: CUDA error: out of memory"
    far = TORCH2_OOM.replace("GPU 0", "GPU 2")
    near = TORCH1_OOM
    failure = sf.classify_failure(lines + [bare, "x", near, "y", "z", far])
    assert failure["kind"] == "capture_oom" and failure["line"] == bare
    assert failure["oom"] == {"tried_gib": 20.0 / 1024, "free_gib": 1.23, "gpu": 1}


@pytest.mark.parametrize("line", [
    "RuntimeError: CUDA error: out of memory",
    "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: "
    "mem_fraction_static=0.835",
    # XPU's wording names no free memory
    "torch.OutOfMemoryError: XPU out of memory. Tried to allocate 20.00 MiB (GPU 0; 15.11 GiB total capacity; "
    "14.72 GiB already allocated; 14.75 GiB reserved in total by PyTorch)",
])
def test_failure_without_oom_numbers_has_no_oom_key(line):
    failure = sf.classify_failure([line])
    assert failure is not None and "oom" not in failure
    assert set(failure) == {"kind", "line", "advice"}


def test_capture_oom_inside_the_dsa_indexer_docker_compose_fragment():
    # the indexer's OOM comes first, with no capture frame in sight; SGLang's explicit line follows (real fragment,
    # docker compose prefixes)
    failure = sf.classify_failure(text("capture_oom_dsa_indexer_glm52_h200_tp8_fragment.log").splitlines())
    assert failure["kind"] == "capture_oom"
    assert failure["line"].startswith("Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 1.50")
    assert failure["oom"] == {"tried_gib": 1.5, "free_gib": 488.19 / 1024, "gpu": 5}

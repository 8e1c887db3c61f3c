# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Measure the capacity engine: how fast and in how much memory the log grammar reads a long journal, how fast
the formula answers, and how close it comes to the #tokens SGLang logged in real startup logs.

    .venv/bin/python bench/bench_engine.py            # prints Markdown; `make bench` writes bench/results.md
"""
from __future__ import annotations

import json
import platform
import sys
import time
import tracemalloc
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / ".venv" / "collections"))

# pylint: disable=wrong-import-position
from ansible_collections.llmserve.sglang.plugins.module_utils.kv_capacity_report import capacity  # noqa: E402
from ansible_collections.llmserve.sglang.plugins.module_utils.kv_pool import mem_fraction_for_tokens  # noqa: E402
from ansible_collections.llmserve.sglang.plugins.module_utils.kv_shape import model_shape  # noqa: E402
from ansible_collections.llmserve.sglang.plugins.module_utils.startup_log import parse_startup_log  # noqa: E402

FIXTURES = REPO / "tests" / "fixtures"
FIELD_LOG = FIXTURES / "logs" / "field_kimi_k25_rtx6000_tp8_eagle3.log"
KIMI = json.loads((FIXTURES / "configs" / "kimi-k2.5-int4.json").read_text())

# log, config, SGLang version (see tests/unit/plugins/module_utils/test_real_log_predictions.py)
PREDICTION_CASES = [
    ("v058_tp8_kimi_k25_mi355x_capture_crash.log", "kimi-k2.5-int4.json", "0.5.8", "real, MLA TP8, 8x MI355X"),
    ("classic_tp8_grok2_fp8_h100_ready.log", "grok-2-attention.json", "0.5.2", "real, GQA TP8, 8x H100"),
    ("field_kimi_k25_rtx6000_tp8_eagle3.log", "kimi-k2.5-int4.json", "0.5.9",
     "field case (reconstructed), MLA TP8 + EAGLE-3"),
]


def best_of(n, fn):
    best = None
    for _round in range(n):
        start = time.perf_counter()
        fn()
        elapsed = time.perf_counter() - start
        best = elapsed if best is None else min(best, elapsed)
    return best


def journal(boots: int) -> str:
    # A journal of many restarts of the 8-rank field server: the parser must find and read only the last one.
    one = FIELD_LOG.read_text()
    return "".join("Nov 30 00:00:%02d host systemd[1]: Started sglang.service.\n%s" % (i % 60, one)
                   for i in range(boots))


def bench_parse(boots: int) -> dict:
    text = journal(boots)
    seconds = best_of(3, lambda: parse_startup_log(text))
    tracemalloc.start()
    facts = parse_startup_log(text)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert facts["boots"] == boots and facts["kv_tokens"] == 159277
    mib = len(text.encode()) / 2 ** 20
    return {"boots": boots, "lines": text.count("\n"), "mib": mib, "seconds": seconds,
            "mib_per_s": mib / seconds, "peak_mib": peak / 2 ** 20}


def bench_formula() -> dict:
    shape = model_shape(KIMI)
    n = 2000
    per_capacity = best_of(3, lambda: [capacity(shape, 0.88, 94.04, 21.71, tp_size=8, sglang_version="0.5.9",
                                                target_tokens=250000) for _call in range(n)]) / n
    per_inverse = best_of(3, lambda: [mem_fraction_for_tokens(250000, 70272, 94.04, 21.71)
                                      for _call in range(n)]) / n
    return {"capacity_us": per_capacity * 1e6, "inverse_us": per_inverse * 1e6}


def bench_predictions() -> list:
    rows = []
    for log, config, version, what in PREDICTION_CASES:
        facts = parse_startup_log((FIXTURES / "logs" / log).read_text())
        args = facts["server_args"]
        result = capacity(json.loads((FIXTURES / "configs" / config).read_text()), args["mem_fraction_static"],
                          facts["pre_load_free_gib"], facts["post_load_free_gib"], tp_size=args.get("tp_size") or 1,
                          kv_cache_dtype=args.get("kv_cache_dtype") or "auto", page_size=args.get("page_size") or 1,
                          speculative_algorithm=args.get("speculative_algorithm"), sglang_version=version,
                          observed=facts)
        rows.append((log, what, result["observed_tokens"], result["predicted_tokens"],
                     result["prediction_error_pct"]))
    return rows


def main() -> None:
    print("# Capacity engine: measured\n")
    print("Machine: %s, Python %s, %s. Command: `make bench`.\n"
          % (platform.machine(), platform.python_version(), platform.platform(terse=True)))
    print("## Startup-log grammar on a long journal (the last of N boots of an 8-rank server)\n")
    print("| boots | lines | MiB | seconds (best of 3) | MiB/s | peak Python memory MiB |")
    print("|---:|---:|---:|---:|---:|---:|")
    for boots in (1, 100, 1000):
        r = bench_parse(boots)
        print("| {boots:,} | {lines:,} | {mib:.2f} | {seconds:.4f} | {mib_per_s:.1f} | {peak_mib:.1f} |".format(**r))
    f = bench_formula()
    print("\n## Formula\n")
    print("`capacity()` for the field case: %.1f us a call; `mem_fraction_for_tokens()`: %.1f us a call."
          % (f["capacity_us"], f["inverse_us"]))
    print("\n## Prediction against real startup logs\n")
    print("| log | what | SGLang logged #tokens | formula | error |")
    print("|---|---|---:|---:|---:|")
    for log, what, observed, predicted, err in bench_predictions():
        print("| `%s` | %s | %s | %s | %+.4f%% |" % (log, what, format(observed, ","), format(predicted, ","), err))


if __name__ == "__main__":
    main()

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Measure the capacity engine: how fast and in how much memory the log grammar reads a long journal, and how
fast the formula answers (its accuracy: bench_prediction.py).

    .venv/bin/python bench/bench_engine.py            # `make bench-engine`; writes bench/results/engine.*
"""
from __future__ import annotations

import json
import sys
import time
import tracemalloc

import benchlib

REPO = benchlib.REPO
sys.path.insert(0, str(REPO / ".venv" / "collections"))

# pylint: disable=wrong-import-position
from ansible_collections.llmserve.sglang.plugins.module_utils.capacity.kv_capacity_report import capacity  # noqa: E402
from ansible_collections.llmserve.sglang.plugins.module_utils.capacity.kv_pool import mem_fraction_for_tokens  # noqa: E402
from ansible_collections.llmserve.sglang.plugins.module_utils.capacity.kv_shape import model_shape  # noqa: E402
from ansible_collections.llmserve.sglang.plugins.module_utils.startup.startup_log import parse_startup_log  # noqa: E402

FIXTURES = REPO / "tests" / "fixtures"
FIELD_LOG = FIXTURES / "logs" / "field_kimi_k25_rtx6000_tp8_eagle3.log"
KIMI = json.loads((FIXTURES / "configs" / "kimi-k2.5-int4.json").read_text())


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


def figure(parses):
    import matplotlib   # pylint: disable=import-outside-toplevel
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt   # pylint: disable=import-outside-toplevel
    fig, axis = plt.subplots(figsize=(6, 3.5))
    axis.loglog([r["mib"] for r in parses], [r["seconds"] for r in parses], marker="o")
    axis.set_xlabel("journal MiB (the last of N boots of an 8-rank server)")
    axis.set_ylabel("seconds to read the last boot")
    fig.suptitle("Startup-log grammar on long journals")
    return fig


def main() -> None:
    parses = [bench_parse(boots) for boots in (1, 100, 1000)]
    formula = bench_formula()
    text = ["# Capacity engine: measured\n\n",
            "Machine: %s. Command: `make bench-engine`.\n\n" % benchlib.machine(),
            "## Startup-log grammar on a long journal (the last of N boots of an 8-rank server)\n\n",
            benchlib.table(["boots", "lines", "MiB", "seconds (best of 3)", "MiB/s", "peak Python memory MiB"],
                           [["{boots:,}".format(**r), "{lines:,}".format(**r), "%.2f" % r["mib"],
                             "%.4f" % r["seconds"], "%.1f" % r["mib_per_s"], "%.1f" % r["peak_mib"]]
                            for r in parses], "rrrrrr"),
            "\n## Formula\n\n",
            "`capacity()` for the field case: %.1f us a call; `mem_fraction_for_tokens()`: %.1f us a call.\n"
            % (formula["capacity_us"], formula["inverse_us"]),
            "\nThe formula's predictions against real startup logs: `make bench-prediction` "
            "(bench/results/prediction.md).\n"]
    benchlib.save("engine", "".join(text), {"machine": benchlib.machine(), "parse": parses, "formula": formula},
                  figure(parses))


if __name__ == "__main__":
    main()

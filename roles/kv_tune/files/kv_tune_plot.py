# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Plot one host's KV tuning report (<host>.json written by the kv_tune role): KV tokens and the least free GPU
memory under load against --mem-fraction-static, every trial marked by its outcome. Runs on the controller.

    python3 kv_tune_plot.py REPORT.json OUT.png   (the role runs it with ansible-playbook's own Python)
"""
from __future__ import annotations

import json
import sys

MARKERS = {"stable": ("o", "tab:green"), "init_oom": ("v", "tab:purple"), "startup_oom": ("X", "tab:red"),
           "runtime_oom": ("X", "tab:red"), "timeout": ("s", "tab:orange"), "crash": ("D", "tab:brown"),
           "unverified": ("P", "tab:gray"), "untrusted": ("P", "tab:olive")}


def plot(report: dict, out: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib import pyplot

    trials = report["trials"]
    figure, tokens_axis = pyplot.subplots(figsize=(8, 4.5), dpi=110)
    free_axis = tokens_axis.twinx()
    free_label = "least free under load"
    for trial in trials:
        marker, colour = MARKERS.get(trial["outcome"], ("o", "grey"))
        if trial.get("tokens") is not None:
            tokens_axis.scatter(trial["f"], trial["tokens"], marker=marker, color=colour, s=60, zorder=3)
            tokens_axis.annotate("%d %s" % (trial["n"], trial["outcome"]), (trial["f"], trial["tokens"]),
                                 textcoords="offset points", xytext=(6, 6), fontsize=8)
        else:
            tokens_axis.axvline(trial["f"], color=colour, linestyle=":", linewidth=1)
            tokens_axis.annotate("%d %s" % (trial["n"], trial["outcome"]), (trial["f"], 0),
                                 textcoords="offset points", xytext=(4, 10), fontsize=8, rotation=90)
        if trial.get("min_free_gib") is not None:
            free_axis.scatter(trial["f"], trial["min_free_gib"], marker="_", color="tab:blue", s=200, zorder=3,
                              label=free_label)
            free_label = None
    safety = report["settings"]["safety_gib"]
    free_axis.axhline(safety, color="tab:blue", linestyle="--", linewidth=1, label="safety margin %.2f GiB" % safety)
    after = report["after"]["mem_fraction_static"]
    if after is not None:
        tokens_axis.axvline(after, color="tab:green", linewidth=1.5, alpha=0.5, label="pinned %.3f" % after)
    tokens_axis.set_xlabel("--mem-fraction-static")
    tokens_axis.set_ylabel("KV tokens (pool)")
    free_axis.set_ylabel("least free GPU memory under load (GiB)", color="tab:blue")
    tokens_axis.margins(x=0.2)
    tokens_axis.set_ylim(bottom=0)
    free_axis.set_ylim(bottom=0)
    tokens_axis.set_title("%s %s: %s -> %s, %d restart(s)" % (
        report["host"], report["unit"], report["before"]["mem_fraction_static"], after, report["restarts"]))
    lines = tokens_axis.get_legend_handles_labels()
    more = free_axis.get_legend_handles_labels()
    tokens_axis.legend(lines[0] + more[0], lines[1] + more[1], loc="lower left", fontsize=8)
    tokens_axis.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(out)


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        sys.stderr.write("usage: kv_tune_plot.py REPORT.json OUT.png\n")
        return 2
    with open(argv[1], encoding="utf-8") as handle:
        report = json.load(handle)
    try:
        plot(report, argv[2])
    except ImportError as exc:
        sys.stderr.write("matplotlib is not installed on the controller (%s)\n" % exc)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

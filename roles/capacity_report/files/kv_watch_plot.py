# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Plot one unit's headroom under real traffic (<host>-watch.json written by the capacity_report role from
kv_watch_facts): per window of the watch, the least free GPU memory and the peak token usage, with the pin's margin,
the least free memory its verification left under the stress load and the time of the pin drawn in; OOM lines and
restarts marked.
Runs on the controller.

    python3 kv_watch_plot.py WATCH.json OUT.png   (the role runs it with ansible-playbook's own Python)
"""
from __future__ import annotations

import calendar
import datetime
import json
import sys
import time


def pin_time(text):
    """The Unix time of the tuner's ``2026-12-05T10:00:00Z`` (a number as it is); None when it is neither."""
    if isinstance(text, (int, float)):
        return float(text)
    try:
        return calendar.timegm(time.strptime(str(text), "%Y-%m-%dT%H:%M:%SZ"))
    except ValueError:
        return None


def plot(watch: dict, out: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib import dates, pyplot

    windows = [window for window in watch["recent"] if window.get("end")]
    when = [datetime.datetime.fromtimestamp(window["end"], datetime.timezone.utc) for window in windows]
    figure, free_axis = pyplot.subplots(figsize=(9, 4.5), dpi=110)
    usage_axis = free_axis.twinx()
    usage_axis.fill_between(when, [(window.get("peaks") or {}).get("token_usage") or 0 for window in windows],
                            step="pre", color="tab:orange", alpha=0.25, label="peak token usage")
    usage_axis.set_ylim(0, 1.05)
    usage_axis.set_ylabel("token usage (sglang:token_usage)")
    free = [window.get("least_free_gib") for window in windows]
    free_axis.step(when, [float("nan") if value is None else value for value in free], where="pre",
                   color="tab:blue", label="least free GPU memory")
    pin = watch.get("pin") or {}
    margin = (pin.get("settings") or {}).get("safety_gib")
    if margin is not None:
        free_axis.axhline(margin, color="tab:red", linestyle="--", linewidth=1, label="the pin's margin")
    if pin.get("verified_min_free_gib") is not None:
        free_axis.axhline(pin["verified_min_free_gib"], color="tab:green", linestyle=":", linewidth=1,
                          label="least free under the stress load when verified")
    for stamp, window in zip(when, windows):
        if window.get("oom_lines") or len(window.get("invocations") or []) > 1:
            free_axis.axvline(stamp, color="tab:red", linewidth=0.8, alpha=0.6)
    pinned = pin_time(pin.get("time"))
    if pinned is not None and when and pinned >= windows[0].get("start", windows[0]["end"]):
        free_axis.axvline(datetime.datetime.fromtimestamp(pinned, datetime.timezone.utc), color="black",
                          linestyle="-.", linewidth=1, label="pinned (the verdict counts what follows)")
    free_axis.set_ylim(bottom=0)
    free_axis.set_ylabel("GiB")
    locator = dates.AutoDateLocator()
    free_axis.xaxis.set_major_locator(locator)
    free_axis.xaxis.set_major_formatter(dates.ConciseDateFormatter(locator))
    title = "%s: %s at %s, verdict %s" % (watch.get("host"), watch.get("unit"),
                                          pin.get("mem_fraction_static"), watch.get("verdict"))
    free_axis.set_title(title, fontsize=10)
    lines, labels = free_axis.get_legend_handles_labels()
    more_lines, more_labels = usage_axis.get_legend_handles_labels()
    free_axis.legend(lines + more_lines, labels + more_labels, fontsize=8, loc="lower left")
    figure.tight_layout()
    figure.savefig(out)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    with open(argv[0], encoding="utf-8") as handle:
        plot(json.load(handle), argv[1])
    return 0


if __name__ == "__main__":
    sys.exit(main())

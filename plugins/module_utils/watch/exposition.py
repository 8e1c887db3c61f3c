# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The headroom watch's verdict and numbers as Prometheus metrics (``llmserve_kv_*``), for node_exporter's textfile
collector: what to export (:func:`samples`, from the pin, the windows and the verdict on them) and the file that
carries it (:func:`write_textfile`, through prometheus_client's own atomic writer).

The watch writes the file at the end of each window (roles/sglang_service, sglang_service_kv_watch_textfile_dir).
Its verdict is the watch's view: the windows against the pin, without the server's journal (root reads the OOM and
retraction lines; the watch cannot, the journal holds the API key). kv_watch_facts gives the verdict with them.

Stdlib only (prometheus_client is imported by :func:`write_textfile` when it is called); the only I/O is the file's.
"""
from __future__ import annotations

from typing import Any

from ansible_collections.llmserve.sglang.plugins.module_utils import checks
from ansible_collections.llmserve.sglang.plugins.module_utils.service import kv_pin
from ansible_collections.llmserve.sglang.plugins.module_utils.watch.settings import WatchError, unit_stem
from ansible_collections.llmserve.sglang.plugins.module_utils.watch.verdict import verdict as watch_verdict

PREFIX = "llmserve_kv_"
# Every verdict the gauge llmserve_kv_verdict has a series for (1 for the current one, 0 for the others), so that an
# alert can test one and a dashboard can show which; ``no_pin``: the unit has no pin to judge.
VERDICTS = ("near_miss", "headroom", "ok", "not_enough_traffic", "no_pin")
# name -> help; each is a gauge with the label ``unit`` (and ``verdict`` for the first).
METRICS = {
    "verdict": "The headroom watch's verdict on the unit's pin (1 for the current verdict, 0 for the others).",
    "least_free_gib": "Least free GPU memory under real traffic since the pin, GiB.",
    "margin_gib": "The margin the pin was verified with (kv_tune_safety_gib), GiB.",
    "spare_steps": "Grid steps of free memory over the margin at a full pool (negative: steps a near miss lowers).",
    "full_pool_hours": "Hours at a full pool (token usage at or above the watch's full usage) since the pin.",
    "pinned_mem_fraction_static": "The pinned --mem-fraction-static.",
    "verified_pool_tokens": "The KV pool (tokens) the pin was verified with.",
    "pool_tokens": "The running server's KV pool (max_total_num_tokens) in the watch's last window.",
    "watch_last_sample_timestamp_seconds": "End of the watch's last window, Unix time.",
    "watch_window_seconds": "Length of the watch's windows, seconds.",
    "watch_up": "1 when the watch's last window read the server's /metrics and its GPUs at least once, else 0.",
}


def _number(value: Any) -> float | None:
    return float(value) if checks.is_number(value) else None


def _spare_steps(result: dict[str, Any] | None) -> float | None:
    evidence = (result or {}).get("evidence") or {}
    if (result or {}).get("verdict") == "near_miss":
        return -float(evidence.get("lower_steps") or 0)
    return _number(evidence.get("spare_steps"))


def samples(unit: str, pin: dict[str, Any] | None, records: list[dict[str, Any]], window_seconds: float,
            **verdict_settings: Any) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """The metrics of ``unit``: name (without the prefix) -> {labels: value}, each labelled by the unit; a number
    nobody knows yet (no pin, no window) is left out rather than exported as 0. ``pin`` is the unit's entry in the
    tuner's fact file (None: no pin), ``records`` the watch's windows, oldest first; ``verdict_settings`` those of
    verdict.verdict (full_usage, headroom_hours, headroom_steps, storm_retractions). Raises WatchError on a setting
    out of its range or a pin the verdict cannot judge."""
    unit_label = ("unit", unit)
    result = watch_verdict(pin, records, **verdict_settings) if pin else None
    current = result["verdict"] if result else "no_pin"
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {
        "verdict": {(unit_label, ("verdict", name)): 1.0 if name == current else 0.0 for name in VERDICTS}}
    evidence = (result or {}).get("evidence") or {}
    last = records[-1] if records else {}
    errors = last.get("errors") or {}
    read = bool(last) and (last.get("serving_samples") or 0) > (errors.get("metrics") or 0) \
        and (last.get("samples") or 0) > (errors.get("gpus") or 0)
    values = {
        "least_free_gib": _number(evidence.get("least_free_gib")),
        "margin_gib": _number(evidence.get("margin_gib")),
        "spare_steps": _spare_steps(result),
        "full_pool_hours": _number(evidence.get("full_hours")),
        "pinned_mem_fraction_static": _number((pin or {}).get("mem_fraction_static")),
        "verified_pool_tokens": _number((pin or {}).get("tokens")),
        "pool_tokens": _number(last.get("pool_tokens")),
        "watch_last_sample_timestamp_seconds": _number(last.get("end")),
        "watch_window_seconds": float(window_seconds),
        "watch_up": 1.0 if read else 0.0,
    }
    for name, value in values.items():
        if value is not None:
            out[name] = {(unit_label,): value}
    return out


def unit_samples(unit: str, fact_text: str | None, fact_path: str, records: list[dict[str, Any]],
                 window_seconds: float, **verdict_settings: Any) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """:func:`samples` with the pin read from the fact file's text (None: no file, so no pin). Raises WatchError on a
    fact file that cannot be read as the tuner writes it."""
    try:
        pin = kv_pin.read_facts(fact_text, fact_path).get(unit) if fact_text else None
    except kv_pin.PinError as exc:
        raise WatchError(str(exc)) from None
    return samples(unit, pin, records, window_seconds, **verdict_settings)


def textfile_name(unit: str) -> str:
    """The watch's file in the textfile directory: llmserve_kv_sglang.prom, llmserve_kv_sglang-a.prom for
    sglang@a.service (node_exporter reads every *.prom of the directory)."""
    return "llmserve_kv_%s.prom" % unit_stem(unit)


def write_textfile(path: str, metrics: dict[str, dict[tuple[tuple[str, str], ...], float]]) -> None:
    """``metrics`` (:func:`samples`') as a Prometheus text file at ``path``, replaced atomically (a temporary file
    renamed over it: node_exporter never reads half a file). Raises OSError when it cannot be written."""
    # The host's python3-prometheus-client, imported only where the watch writes metrics.
    from prometheus_client import CollectorRegistry, Gauge, write_to_textfile  # pylint: disable=import-outside-toplevel

    registry = CollectorRegistry()
    for name, series in metrics.items():
        label_names = [label for label, _value in next(iter(series))]
        gauge = Gauge(PREFIX + name, METRICS[name], label_names, registry=registry)
        for labels, value in series.items():
            gauge.labels(**dict(labels)).set(value)
    write_to_textfile(path, registry)

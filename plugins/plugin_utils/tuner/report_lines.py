# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the tuner says: the progress and result lines, the fleet summary's rows and the Markdown report."""
from __future__ import annotations

from typing import Any, Iterable

from ansible_collections.llmserve.sglang.plugins.module_utils.capacity import kv_search


def token_count(tokens: Any) -> str:
    return "?" if tokens is None else "{:,}".format(int(tokens))


def fraction_text(value: float | None, resolution: float | None = None, text: str | None = None) -> str:
    if text is not None:
        return text
    if value is None:
        return "?"
    if resolution and kv_search.on_grid(value, resolution):
        return kv_search.value_text(value, resolution)
    return kv_search.value_text(value)


def unchanged_line(host: str, unit: str, pin: dict[str, Any]) -> str:
    return ("%s: %s keeps %s (%s KV tokens%s), pinned %s: fingerprint unchanged."
            % (host, unit, fraction_text(pin.get("mem_fraction_static"), pin.get("settings", {}).get("resolution"),
                                         pin.get("text")),
               token_count(pin.get("tokens")), ", capped there" if pin.get("max_total_tokens") else "",
               pin.get("time", "?")))


def watch_note(watch: dict[str, Any] | None) -> str:
    """What the headroom watch says of a pin that holds (kv_fingerprint's ``watch``), as a sentence to append; "" without
    a watch or a verdict."""
    if not watch:
        return ""
    if watch.get("error"):
        return " The headroom watch cannot be read: %s." % watch["error"]
    if watch.get("proposal"):
        return " Proposal: %s." % watch["proposal"]
    if watch.get("verdict"):
        return " Under real traffic: %s (%s)." % (watch["verdict"], "; ".join(watch.get("reasons") or []))
    return ""


def watch_summary(watch: dict[str, Any] | None) -> dict[str, Any] | None:
    """What the fleet summary, the report and set_stats keep of the headroom watch (kv_fingerprint's ``watch``): the
    verdict, its reasons and numbers, and what it asked for or proposes; None without a watch."""
    if not watch:
        return None
    evidence = watch.get("evidence") or {}
    keep = ("windows", "full_hours", "least_free_gib", "least_free_full_gib", "margin_gib", "step_gib", "spare_steps",
            "proposed_value", "lower_to", "retractions", "oom_lines", "token_usage_peak", "others_peak_gib")
    return {"verdict": watch.get("verdict"), "reasons": watch.get("reasons"), "retune": watch.get("retune"),
            "proposal": watch.get("proposal"), "pool_tokens": watch.get("pool_tokens"), "error": watch.get("error"),
            "evidence": {key: evidence[key] for key in keep if key in evidence}}


def result_line(result: dict[str, Any]) -> str:
    """``host: 0.880 -> 0.910, KV 159,282 -> 202,389 tokens (+27%), 1 restart``."""
    before, after = result["before"], result["after"]
    resolution = result["settings"]["resolution"]
    gain = ""
    if before.get("tokens") and after.get("tokens"):
        gain = " (%+.0f%%)" % (100.0 * (after["tokens"] - before["tokens"]) / before["tokens"])
    note = {"tuned": "", "no_stable_value": " (NO STABLE VALUE: last-known-good kept)"}.get(
        result["status"], " (FAILED: %s)" % result.get("error"))
    verify = result.get("verify")
    if verify:
        note += (", the class's value held" if verify["held"] else
                 ", the class's value %s did not hold: searched on its own" % fraction_text(verify["value"], resolution))
    if after.get("max_total_tokens"):
        note += ", the pool capped at %s tokens from the next start" % token_count(after["max_total_tokens"])
    return ("%s: %s -> %s, KV %s -> %s tokens%s, %d restart%s%s"
            % (result["host"], fraction_text(before.get("mem_fraction_static"), resolution, before.get("text")),
               fraction_text(after.get("mem_fraction_static"), resolution, after.get("text")), token_count(before.get("tokens")),
               token_count(after.get("tokens")), gain, result["restarts"], "" if result["restarts"] == 1 else "s", note))


def summary_rows(outcomes: dict[str, Any], pending: Iterable[str] = ()) -> list[dict[str, Any]]:
    """The fleet summary: one row per host of ``outcomes`` (host -> the kv_tune task's registered result, None when
    the host never got there: unreachable, failed earlier, or in a batch that has not run: ``pending``). An unchanged
    host keeps what its last tune found."""
    rows: list[dict[str, Any]] = []
    for host in sorted(outcomes):
        res = outcomes[host] or {}
        status = res.get("status")
        if res.get("follower_of"):
            rows.append({"host": host, "status": status, "after": res.get("value"), "line": res.get("line"),
                         "follower_of": res["follower_of"]})
        elif not res and host in pending:
            rows.append({"host": host, "status": "not tuned: its batch has not run",
                         "line": "%s: NOT STARTED (a later batch; the run stops at a batch with a failed host)"
                                 % host})
        elif status == "unchanged":
            pin = res.get("pin") or {}
            rows.append({"host": host, "status": "unchanged", "after": pin.get("mem_fraction_static"),
                         "tokens_after": pin.get("tokens"), "restarts": 0, "tuned_at": pin.get("time"),
                         "watch": res.get("watch"),
                         "line": "%s: unchanged, keeps %s (%s KV tokens) pinned %s%s"
                                 % (host, fraction_text(pin.get("mem_fraction_static"),
                                                        (pin.get("settings") or {}).get("resolution"), pin.get("text")),
                                    token_count(pin.get("tokens")), pin.get("time", "?"),
                                    _watch_words(res.get("watch")))})
        elif status in ("tuned", "no_stable_value", "failed") and res.get("result"):
            result = res["result"]
            verify = result.get("verify")
            rows.append({"host": host, "status": status, "before": result["before"]["mem_fraction_static"],
                         "after": result["after"]["mem_fraction_static"], "tokens_before": result["before"]["tokens"],
                         "tokens_after": result["after"]["tokens"], "restarts": result["restarts"],
                         "tuned_at": result["time"], "watch": res.get("watch"),
                         "line": result_line(result) + ("; why: %s" % res["why"] if (res.get("watch") or {}).get("retune")
                                                        and res.get("why") == res["watch"]["retune"] else ""),
                         "search": "search" if verify is None else "verified" if verify["held"] else "fallback"})
        elif status in ("reset", "would_reset"):
            rows.append({"host": host, "status": status, "line": res.get("line")})
        elif status == "would_tune":
            rows.append({"host": host, "status": "would be tuned (check mode)", "why": res.get("why"),
                         "line": "%s: would be tuned (%s)" % (host, res.get("why"))})
        else:
            why = res.get("msg") if res.get("failed") else None
            rows.append({"host": host, "status": "not tuned: failed or unreachable, left on its last-known-good value",
                         "error": why, "line": "%s: NOT TUNED (%s; left on its last-known-good value)"
                                               % (host, why or "failed or unreachable")})
    return rows


def _watch_words(watch: dict[str, Any] | None) -> str:
    """``; under real traffic: headroom (proposal: ...)`` for a summary row, "" without a watch verdict."""
    if not watch or not (watch.get("verdict") or watch.get("error")):
        return ""
    if watch.get("error"):
        return "; the headroom watch cannot be read"
    return "; under real traffic: %s%s" % (watch["verdict"],
                                           " (proposal: %s)" % watch["proposal"] if watch.get("proposal") else "")


def restarts_line(rows: Iterable[dict[str, Any]]) -> str:
    """What the run cost: ``restarts: 7 in all (searches 4 on 2 hosts, verifications 3 on 3 hosts, ...)``."""
    spent: dict[str, tuple[int, int]] = {}
    for row in rows:
        if row.get("restarts") is not None and row["status"] != "unchanged":
            kind = {"search": "searches", "verified": "verifications", "fallback": "failed verifications and "
                    "searches"}[row.get("search", "search")]
            count, hosts = spent.get(kind, (0, 0))
            spent[kind] = (count + row["restarts"], hosts + 1)
    total = sum(count for count, _hosts in spent.values())
    parts = ["%s %d on %d host%s" % (kind, count, hosts, "" if hosts == 1 else "s")
             for kind, (count, hosts) in sorted(spent.items())]
    return "restarts: %d in all%s" % (total, " (%s)" % ", ".join(parts) if parts else "")


def failed_row(row: dict[str, Any]) -> bool:
    """Whether a summary row is a host the run failed, found no stable value for, or could not reach (each stays on
    its last-known-good value)."""
    return row["status"] in ("failed", "no_stable_value") or row["status"].startswith("not tuned: failed")


def restarts_total(rows: Iterable[dict[str, Any]]) -> int:
    """The restarts a run cost (a host whose pin held cost none)."""
    return sum(row.get("restarts") or 0 for row in rows if row["status"] != "unchanged")


def report_markdown(result: dict[str, Any]) -> str:
    """<host>.md: what was decided, the trials, the fingerprint."""
    res = result["settings"]["resolution"]
    fp = result.get("fingerprint") or {}
    gpu, model, versions = fp.get("gpu") or {}, fp.get("model") or {}, result.get("versions") or {}
    lines = [
        "# KV tuning of %s (%s)" % (result["host"], result["unit"]), "",
        "%s: **%s**, because %s." % (result["time"], result["status"].replace("_", " "), result["why"]), "",
    ]
    if result.get("error"):
        lines += ["Error: %s" % result["error"], ""]
    lines += [
        "| | --mem-fraction-static | KV tokens |", "|---|---:|---:|",
        "| before | %s | %s |" % (fraction_text(result["before"]["mem_fraction_static"], res, result["before"].get("text")),
                                  token_count(result["before"]["tokens"])),
        "| after | %s | %s |" % (fraction_text(result["after"]["mem_fraction_static"], res, result["after"].get("text")),
                                 token_count(result["after"]["tokens"])),
        "",
        "%d restart(s); the search ended: %s." % (result["restarts"], result["search"].get("reason") or "-"),
        "Settings: cap %s, resolution %s, safety %s GiB, budget %s trials, load %s of the pool for %s s." % tuple(
            result["settings"][k] for k in ("cap", "resolution", "safety_gib", "budget", "stress_fill_ratio",
                                            "stress_duration")),
        "", "## Trials", "",
        "| # | f | restart | outcome | KV tokens | min free under load (GiB) | peak tokens held | requests "
        "| ready after (s) | why |",
        "|---:|---:|:---:|---|---:|---:|---:|---:|---:|---|",
    ]
    for t in result["trials"]:
        why = (t.get("why") or "").replace("|", "/")
        lines.append("| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            t["n"], t["text"], "yes" if t["restart"] else "no", t["outcome"],
            "-" if t["tokens"] is None else token_count(t["tokens"]),
            "-" if t["min_free_gib"] is None else "%.2f" % t["min_free_gib"],
            "-" if t.get("peak_tokens_held") is None else token_count(t["peak_tokens_held"]),
            t.get("requests_completed", 0), t.get("ready_s") if t.get("ready_s") is not None else "-",
            why[:157] + "..." if len(why) > 160 else why))
    lines += [
        "", "## Fingerprint `%s`" % (result.get("fingerprint_hash") or "")[:16], "",
        "GPUs: %s x %s (%s MiB);" % (gpu.get("count"), gpu.get("name"), gpu.get("memory_total_mib")),
        "driver %s, CUDA %s, SGLang %s;" % (versions.get("driver"), versions.get("cuda"), versions.get("sglang")),
        "model %s (config sha256 %s)." % (model.get("path"), (model.get("config_sha256") or "-")[:16]), "",
    ]
    return "\n".join(lines)

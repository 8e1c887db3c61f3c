# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""llmserve-fleet: one of the collection's playbooks on an inventory, watched as a table of hosts.

The command (package cli/, console script llmserve-fleet) runs tune_kv.yml, rollout.yml or site.yml through
ansible-runner and reads its event stream: the tasks each host starts, the tuner's progress lines
(plugin_utils/tuner/progress_lines.py) and trial lines, each host's result, and at the end what the run handed on with
set_stats. On a terminal the table is redrawn in place; otherwise a plain line is printed whenever a host's row
changes. At the end it writes the fleet report (Markdown, JSON, PNG) and exits non-zero, naming them, when a host
failed or was left on its last-known-good value. Ctrl-C stops ansible-playbook; the hosts caught in a trial go back
to their last-known-good value by themselves (the tuner's revert, or the host's revert timer), and it says which.

FleetView (the rows from the events), render_table, plain_line and fleet_report are pure; main() does the I/O.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import signal
import sys
import tempfile
import threading
import time
from typing import Any, Callable

from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner.progress_lines import parse_line, shown_value as value_text

PLAYBOOKS = {"tune": "llmserve.sglang.tune_kv", "rollout": "llmserve.sglang.rollout", "site": "llmserve.sglang.site"}
# What a task of the playbooks puts a host in, before the tuner's own progress lines say more.
TASK_PHASES = (("Kv tune | Does the unit need tuning", "probe"), ("Kv tune | Tune the unit", "tuning"),
               ("Rollout | ", "rollout"), ("Nvidia driver | ", "driver"), ("Sglang service | ", "service"),
               ("Sglang | ", "sglang"))
# The phases of a trial in progress: a host stopped there goes back to its last-known-good value by itself.
MID_TRIAL = ("restarting", "loading", "ready", "under load", "verified")
FINAL = ("pinned", "unchanged", "failed", "reverted", "done")
TRIAL_LINE = re.compile(r"^(?P<label>.+?): trial \d+/\d+ f=(?P<value>[0-9.]+)\b.*?, (?P<tokens>[0-9,]+) KV tokens, "
                        r"min free under load (?P<free>[0-9.]+) GiB")
COLUMNS = ("host", "class", "phase", "value", "KV tokens", "min free GiB", "restarts", "elapsed")


class Row(object):
    def __init__(self, label: str, now: float) -> None:
        self.label, self.started, self.updated = label, now, now
        self.cls: str | None = None
        self.value: str | None = None
        self.tokens: int | None = None
        self.free: float | None = None
        self.detail: str | None = None
        self.error: str | None = None
        self.phase, self.restarts = "waiting", 0
        self.ended: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"host": self.label, "class": self.cls, "phase": self.phase, "value": self.value,
                "tokens": self.tokens, "min_free_gib": self.free, "restarts": self.restarts, "error": self.error,
                "elapsed_s": round((self.ended or self.updated) - self.started, 1)}


class FleetView(object):
    """The rows of a run, from ansible-runner's events. ``clock`` gives seconds; ``changed`` collects the labels
    whose row changed since the caller last emptied it."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.rows: dict[str, Row] = {}
        self.changed: list[str] = []
        self.started = clock()
        self.stats: dict[str, Any] = {}

    def row(self, label: str) -> Row:
        if label not in self.rows:
            self.rows[label] = Row(label, self.clock())
        return self.rows[label]

    def _set(self, label: str, **values: Any) -> None:
        row, now = self.row(label), self.clock()
        if values.get("phase") == "restarting" and row.phase != "restarting":
            row.restarts += 1
        # The clock of a host stops when it reaches an end, and runs again if it leaves it (a later play).
        if "phase" in values and (values["phase"] in FINAL) != (row.phase in FINAL):
            row.ended = now if values["phase"] in FINAL else None
        moved = any(getattr(row, key) != value for key, value in values.items())
        for key, value in values.items():
            setattr(row, key, value)
        row.updated = now
        if moved and label not in self.changed:
            self.changed.append(label)

    def feed(self, event: dict[str, Any]) -> None:
        """One event of ansible-runner (a dict as its event_handler gets it)."""
        kind, data = event.get("event"), event.get("event_data") or {}
        for line in (event.get("stdout") or "").splitlines():
            self._line(line)
        host = data.get("host")
        if kind == "runner_on_start" and host and host != "localhost":
            phase = next((phase for prefix, phase in TASK_PHASES if (data.get("task") or "").startswith(prefix)), None)
            row = self.row(host)
            if phase and (row.phase not in MID_TRIAL + FINAL or phase == "probe"):
                self._set(host, phase=phase, detail=None)
        elif kind == "runner_on_ok" and host and host != "localhost":
            self._ok(host, data.get("res") or {})
        elif kind in ("runner_on_failed", "runner_on_unreachable") and host and not data.get("ignore_errors"):
            why = (data.get("res") or {}).get("msg")
            self._set(host, phase="failed", detail=None,
                      error="unreachable: %s" % why if kind == "runner_on_unreachable" else why)
        elif kind == "playbook_on_stats":
            self.stats = data.get("artifact_data") or {}
            self._final(self.stats)

    def _line(self, line: str) -> None:
        progress = parse_line(line)
        if progress:
            values = {"phase": progress["phase"], "detail": progress["detail"],
                      "value": progress["value"] or self.row(progress["label"]).value}
            if progress["phase"] == "restarting":   # tokens and headroom are the new value's once it is loaded
                values.update(tokens=None, free=None)
            self._set(progress["label"], **values)
            return
        trial = TRIAL_LINE.match(line.strip())
        if trial:
            self._set(trial["label"], tokens=int(trial["tokens"].replace(",", "")), free=float(trial["free"]))

    def _ok(self, host: str, res: dict[str, Any]) -> None:
        cls = (res.get("ansible_facts") or {}).get("kv_tune_class")
        if cls:
            self._set(host, cls=("%s %s" % (cls.get("role"), cls.get("class") or "")).strip())
        units: Any = res.get("units") if isinstance(res.get("units"), dict) and len(res["units"]) > 1 else {"": res}
        if "" not in units:   # a host with several servers: a row each, not one for the host
            self.rows.pop(host, None)
        for unit, found in units.items():
            status = found.get("status")
            if status not in ("tuned", "unchanged"):
                continue
            label = found.get("label") or host if unit else host
            if status == "unchanged":
                pin = found.get("pin") or {}
                self._set(label, phase="unchanged", value=_text(pin.get("mem_fraction_static")),
                          tokens=pin.get("tokens"), detail=None)
            else:
                after = (found.get("result") or {}).get("after") or {}
                self._set(label, phase="pinned", value=_text(after.get("mem_fraction_static")),
                          tokens=after.get("tokens"), detail=None)

    def _final(self, stats: dict[str, Any]) -> None:
        """What the run handed on (llmserve_kv_tune, llmserve_rollout) settles each row."""
        handed: Any
        for handed in (stats.get("llmserve_kv_tune"), stats.get("llmserve_rollout")):
            for entry in (handed or {}).get("hosts", []):
                failed = entry["host"] in handed.get("failed", [])
                values = {"phase": "failed" if failed else _final_phase(entry["status"]), "detail": None}
                if entry.get("after") is not None and not isinstance(entry["after"], dict):
                    values["value"] = _text(entry["after"])
                if entry.get("tokens_after") is not None:
                    values["tokens"] = entry["tokens_after"]
                if entry.get("restarts") is not None:
                    values["restarts"] = entry["restarts"]
                if failed and not self.row(entry["host"]).error:   # the host's own failure says more
                    values["error"] = entry.get("error") or entry.get("status")
                self._set(entry["host"], **values)

    def failed(self) -> list[str]:
        """The hosts the run failed or left on their last-known-good value."""
        handed: list[Any] = [self.stats.get(key) for key in ("llmserve_kv_tune", "llmserve_rollout") if self.stats.get(key)]
        named = {host for found in handed for host in found.get("failed", [])}
        return sorted(named | {label for label, row in self.rows.items() if row.phase == "failed"})

    def mid_trial(self) -> list[Row]:
        """The hosts caught in a trial (a stop now leaves them to go back by themselves)."""
        return [row for row in self.rows.values() if row.phase in MID_TRIAL]


# Control characters (C0, DEL, C1) in what hosts report: shown escaped, never sent to the operator's terminal.
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def printable(text: Any) -> str:
    """``text`` safe to print: each control character as its escape (``\\x1b``); a newline and a tab too, so that a
    row stays one line."""
    return CONTROL.sub(lambda found: "\\x%02x" % ord(found.group()), str(text))


def _text(value: Any) -> str | None:
    return None if value is None else value_text(value)


def _final_phase(status: str) -> str:
    return {"tuned": "pinned", "upgraded": "done"}.get(status, "unchanged" if status == "unchanged" else status)


def _cells(row: Row, now: float) -> list[str]:
    elapsed = int((row.ended or now) - row.started)
    phase = row.phase + (" (%s)" % row.detail if row.detail else "")
    return [printable(cell) for cell in (
        row.label, row.cls or "-", phase, row.value or "-", "{:,}".format(row.tokens) if row.tokens else "-",
        "%.2f" % row.free if row.free is not None else "-", str(row.restarts),
        "%dm%02ds" % (elapsed // 60, elapsed % 60))]


def _shown_first(row: Row) -> tuple[int, str]:
    """Hosts at work first, then failed ones, then the rest (those that ended well), each in name order."""
    return (0 if row.phase not in FINAL else 1 if row.phase == "failed" else 2, row.label)


def render_table(view: FleetView, title: str, now: float, max_rows: int | None = None) -> str:
    """The whole screen: a title line with the counts, then one row per host; with ``max_rows`` (a terminal's
    height) and more hosts than that, the hosts at work and the failed ones, and a last line that counts the
    others."""
    ordered = sorted(view.rows.values(), key=_shown_first) if max_rows else \
        [view.rows[label] for label in sorted(view.rows)]
    hidden = ordered[max(1, max_rows - 1):] if max_rows and len(ordered) > max_rows else []
    shown = ordered[:len(ordered) - len(hidden)]
    rows = [_cells(row, now) for row in shown]
    widths = [max([len(column)] + [len(cells[i]) for cells in rows]) for i, column in enumerate(COLUMNS)]
    counts: dict[str, int] = {}
    for row in view.rows.values():
        counts[row.phase] = counts.get(row.phase, 0) + 1
    spent = int(now - view.started)
    tally = ", ".join("%d %s" % (count, phase) for phase, count in sorted(counts.items())) or "starting"
    head = "%s - %d host(s), %s - %dm%02ds" % (
        printable(title), len(view.rows), printable(tally), spent // 60, spent % 60)
    lines = [head, "  ".join(column.ljust(widths[i]) for i, column in enumerate(COLUMNS))]
    lines += ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(cells)).rstrip() for cells in rows]
    if hidden:
        more: dict[str, int] = {}
        for row in hidden:
            more[row.phase] = more.get(row.phase, 0) + 1
        lines.append("... and %d more: %s" % (len(hidden), ", ".join(
            "%d %s" % (count, printable(phase)) for phase, count in sorted(more.items()))))
    return "\n".join(lines)


def plain_line(row: Row, now: float) -> str:
    """A row as one line, for output that is not a terminal."""
    cells = _cells(row, now)
    return "%s %s: %s%s%s%s, %s restart(s), %s%s" % (
        time.strftime("%H:%M:%S"), cells[0], cells[2], " %s" % cells[3] if row.value else "",
        ", %s KV tokens" % cells[4] if row.tokens else "", ", min free %s GiB" % cells[5] if row.free is not None
        else "", cells[6], cells[7], " - %s" % _short(row.error) if row.phase == "failed" and row.error else "")


def _short(text: Any, limit: int = 160) -> str:
    text = printable(" ".join(str(text).split()))
    return text if len(text) <= limit else text[:limit - 3] + "..."


def fleet_report(view: FleetView, title: str, out_dir: str, exit_code: int,
                 now: float) -> list[str]:
    """fleet.json, fleet.md and, when matplotlib is there and tokens are known, fleet.png in ``out_dir``; the
    paths written."""
    os.makedirs(out_dir, exist_ok=True)
    rows = [view.rows[label].as_dict() for label in sorted(view.rows)]
    before = {entry["host"]: entry.get("tokens_before")
              for entry in (view.stats.get("llmserve_kv_tune") or {}).get("hosts", [])}
    for row in rows:
        row["tokens_before"] = before.get(row["host"])
    data: dict[str, Any] = {"title": title, "exit_code": exit_code, "failed": view.failed(), "hosts": rows, "handed_on": view.stats}
    written = [os.path.join(out_dir, "fleet.json"), os.path.join(out_dir, "fleet.md")]
    with open(written[0], "w", encoding="utf-8") as out:
        out.write(json.dumps(data, indent=2, sort_keys=True) + "\n")
    with open(written[1], "w", encoding="utf-8") as out:
        out.write("# %s\n\n```\n%s\n```\n\n%s\n" % (printable(title), render_table(view, title, now), (
            "Failed or left on the last-known-good value: %s." % ", ".join(map(printable, data["failed"])))
            if data["failed"]
            else "Every host ended on a verified value."))
    png = _plot(rows, title, os.path.join(out_dir, "fleet.png"))
    return written + ([png] if png else [])


def _plot(rows: list[dict[str, Any]], title: str, path: str) -> str | None:
    known = [row for row in rows if row["tokens"]]
    if not known:
        return None
    try:
        import matplotlib
        matplotlib.use("Agg")
        from matplotlib import pyplot
    except ImportError:
        return None
    figure, axes = pyplot.subplots(figsize=(max(6, 1.2 * len(known) + 2), 4))
    places = range(len(known))
    axes.bar([x - 0.2 for x in places], [row["tokens_before"] or 0 for row in known], 0.4, label="before")
    axes.bar([x + 0.2 for x in places], [row["tokens"] for row in known], 0.4, label="after")
    for x, row in zip(places, known):
        axes.annotate("%d restart(s)" % row["restarts"], (x, row["tokens"]), ha="center", va="bottom", fontsize=8)
    axes.set_xticks(list(places), [row["host"] for row in known], rotation=30, ha="right")
    axes.set_ylabel("KV tokens")
    axes.set_title(title)
    axes.legend()
    figure.tight_layout()
    figure.savefig(path)
    pyplot.close(figure)
    return path


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="llmserve-fleet", description=(
        "Run one of llmserve.sglang's playbooks on an inventory and watch every host: a table redrawn in place on a "
        "terminal, plain lines otherwise; the fleet report at the end; exit 2 when a host failed or was left on its "
        "last-known-good value."))
    parser.add_argument("playbook", choices=sorted(PLAYBOOKS), help="tune: tune_kv.yml, rollout: rollout.yml, "
                                                                    "site: site.yml")
    parser.add_argument("-i", "--inventory", required=True, help="the inventory (file or directory)")
    parser.add_argument("-e", "--extra-vars", action="append", default=[],
                        help="key=value, YAML or JSON, or @file, as ansible-playbook's -e (may be repeated; passed on in "
                             "order, checked first)")
    parser.add_argument("--vault-password-file", help="as ansible-playbook's")
    parser.add_argument("--report-dir", default="fleet_reports",
                        help="where the fleet report and the tuner's reports go (default: fleet_reports)")
    parser.add_argument("--plain", action="store_true", help="plain lines even on a terminal")
    parser.add_argument("--list-hosts", action="store_true",
                        help="only list the hosts each play would run on, as ansible-playbook --list-hosts; no table")
    return parser.parse_args(argv)


class ExtraVarsError(ValueError):
    """An ``-e`` that ansible-playbook would refuse or read otherwise than meant: the message names it."""


def check_extra_vars(items: list[str], cwd: str) -> list[str]:
    """The ``-e`` arguments as ansible-playbook reads them (``key=value`` words, YAML or JSON, ``@file``), each
    checked before anything runs with Ansible's own parsers, and passed on unchanged but for ``@file`` made
    absolute against ``cwd``. A ``@file`` is only checked to be a readable file: it may be vault-encrypted."""
    from ansible.errors import AnsibleError
    from ansible.parsing.dataloader import DataLoader
    from ansible.parsing.splitter import parse_kv

    checked: list[str] = []
    for item in items:
        if item.startswith("@"):
            path = os.path.join(cwd, os.path.expanduser(item[1:]))
            if not os.path.isfile(path) or not os.access(path, os.R_OK):
                raise ExtraVarsError("-e %s: no readable file %s" % (item, path))
            checked.append("@" + path)
            continue
        if not item.strip():
            raise ExtraVarsError("-e with nothing in it")
        if item[0] in "/.":
            raise ExtraVarsError("-e %s: a file's name needs '@' before it (-e @%s)" % (item, item))
        try:
            data = DataLoader().load(item) if item[0] in "[{" else parse_kv(item)
        except AnsibleError as exc:
            raise ExtraVarsError("-e %s: not valid YAML or JSON: %s" % (item, " ".join(str(exc).split())[:200]))
        if not isinstance(data, dict):
            raise ExtraVarsError("-e %s: not a mapping of variables (ansible-playbook refuses it)" % item)
        if "_raw_params" in data and item[0] not in "[{":
            raise ExtraVarsError("-e %s: %r is not key=value; quote a value with spaces (-e 'key=\"a b\"')"
                                 % (item, data["_raw_params"]))
        checked.append(item)
    return checked


def runner_cmdline(defaults: dict[str, Any], extra_vars: list[str], options: list[str]) -> str | None:
    """ansible-playbook's arguments after the playbook: the command's own defaults first, so that the operator's
    ``-e`` (in their order) override them as ansible-playbook's later ``-e`` does, then ``options``."""
    words = (["-e", json.dumps(defaults, sort_keys=True)] if defaults else []) + options
    for item in extra_vars:
        words += ["-e", item]
    return " ".join(shlex.quote(word) for word in words) or None


def forget_secrets(private: str) -> None:
    """What ansible-runner keeps of a run holds its whole command line (``artifacts/*/command``, with every ``-e``
    value: an API key given with -e) and, where it wrote them, its inputs (``env/``): gone, so that a kept directory
    holds the events and the output only."""
    shutil.rmtree(os.path.join(private, "env"), ignore_errors=True)
    artifacts = os.path.join(private, "artifacts")
    for ident in os.listdir(artifacts) if os.path.isdir(artifacts) else []:
        command = os.path.join(artifacts, ident, "command")
        if os.path.isfile(command):
            os.unlink(command)


def main(argv: list[str] | None = None) -> int:
    """The console command; its exit code."""
    import ansible_runner

    args = _arguments(argv)
    tty = sys.stdout.isatty() and not args.plain and not args.list_hosts
    report_dir = os.path.abspath(args.report_dir)
    try:
        extra_vars = check_extra_vars(args.extra_vars, os.getcwd())
    except ExtraVarsError as exc:
        sys.stderr.write("llmserve-fleet: %s; nothing was run\n" % exc)
        return 2
    title = "llmserve-fleet %s on %s" % (args.playbook, args.inventory)
    view, lock, stopped = FleetView(), threading.Lock(), threading.Event()

    def handle(event: dict[str, Any]) -> bool:
        with lock:
            view.feed(event)
        return True

    def interrupt(_signum: int, _frame: Any) -> None:
        stopped.set()

    previous = signal.signal(signal.SIGINT, interrupt)
    private = tempfile.mkdtemp(prefix="llmserve-fleet-")
    thread, runner = _run_playbook(ansible_runner.run_async, args, extra_vars, report_dir, private, handle,
                                   stopped.is_set)
    try:
        _follow(thread, view, lock, title, tty)
    finally:
        signal.signal(signal.SIGINT, previous)
        forget_secrets(private)
    if args.list_hosts:
        sys.stdout.write(runner.stdout.read())
        shutil.rmtree(private, ignore_errors=True)
        return runner.rc
    now = time.monotonic()
    if tty:
        sys.stdout.write("\x1b[H\x1b[2J" + render_table(view, title, now) + "\n")
    code = _interrupted(view) if stopped.is_set() else _finished(view, runner)
    for path in fleet_report(view, title, report_dir, code, now):
        print("fleet report: %s" % path)
    if code == 0:
        shutil.rmtree(private, ignore_errors=True)
    else:
        print("ansible-runner's artifacts of this run (its events and output): %s" % private)
    return code


def _run_playbook(run_async: Callable[..., Any], args: argparse.Namespace, extra_vars: list[str], report_dir: str,
                  private: str, handle: Callable[[dict[str, Any]], bool],
                  cancelled: Callable[[], bool]) -> tuple[threading.Thread, Any]:
    """ansible-runner's (thread, runner) of the playbook ``args`` name, started in ``private`` with the command's
    defaults and the checked ``extra_vars``; every event goes to ``handle``, and ``cancelled`` stops it."""
    defaults = {"tune": {"kv_tune_report_dir": report_dir},
                "rollout": {"rollout_report_dir": report_dir}}.get(args.playbook, {})
    options = (["--vault-password-file", os.path.abspath(args.vault_password_file)] if args.vault_password_file
               else []) + (["--list-hosts"] if args.list_hosts else [])
    cmdline = runner_cmdline(defaults, extra_vars, options)
    # The ansible-playbook installed beside this command (a virtualenv that is not activated) first.
    path = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", os.defpath)])
    return run_async(
        # ansible-playbook runs where this command runs: the same ansible.cfg, collections and relative paths.
        private_data_dir=private, project_dir=os.getcwd(), playbook=PLAYBOOKS[args.playbook],
        inventory=os.path.abspath(args.inventory),
        # Nothing written under env/: the -e values (secrets among them) live only on ansible-playbook's command line.
        cmdline=cmdline, suppress_env_files=True, quiet=True, event_handler=handle, cancel_callback=cancelled,
        envvars={"ANSIBLE_NOCOLOR": "1", "PATH": path})


def _follow(thread: threading.Thread, view: FleetView, lock: threading.Lock, title: str, tty: bool) -> None:
    """Until the run's ``thread`` ends: the table redrawn in place on a terminal (``tty``) when a row changed or a
    second passed, else a plain line for each row that changed."""
    said = 0.0
    while thread.is_alive():
        thread.join(0.5)
        with lock:
            now = time.monotonic()
            if tty:
                if view.changed or now - said >= 1.0:
                    # A fleet taller than the terminal: the hosts at work and the failed ones, the rest counted.
                    height = shutil.get_terminal_size().lines - 3
                    sys.stdout.write("\x1b[H\x1b[2J" + render_table(view, title, now, max(height, 5)) + "\n")
                    sys.stdout.flush()
                    said = now
            else:
                for label in view.changed:
                    print(plain_line(view.rows[label], now), flush=True)
            view.changed = []


def _interrupted(view: FleetView) -> int:
    """Says which hosts Ctrl-C caught in a trial; the exit code of an interrupted run."""
    caught = view.mid_trial()
    print("interrupted: ansible-playbook was stopped. %s" % (
        "In a trial, each going back to its last-known-good value by itself (the tuner's revert, else the "
        "host's revert timer, kv_tune_confirm_timeout): %s." % ", ".join(
            printable("%s (%s %s)" % (row.label, row.phase, row.value or "")) for row in caught)
        if caught else "No host was in a trial."))
    return 130


def _finished(view: FleetView, runner: Any) -> int:
    """Says which hosts failed or were left on their last-known-good value, or how ansible-playbook ended otherwise;
    the exit code of a run that ended: 2 when a host failed, else ansible-playbook's."""
    failed = view.failed()
    code = 2 if failed else (0 if runner.rc == 0 else runner.rc or 1)
    if failed:
        print("failed or left on the last-known-good value: %s" % ", ".join(map(printable, failed)))
        for label in failed:
            if label in view.rows and view.rows[label].error:
                print("  %s: %s" % (printable(label), _short(view.rows[label].error)))
    elif code:
        print("ansible-playbook exited %s (%s)" % (runner.rc, runner.status))
    return code

# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Controller-side: what the fleet summaries (kv_tune_summary, rollout_summary) share - the hosts' registered
results, which hosts have not had their turn yet, the summary file, and where reports go by default; and the files
of one host's tune (kv_tune_report)."""
from __future__ import annotations

import json
import os
import tempfile
from typing import Any, Callable, Collection, Iterable, Mapping, cast

import yaml

from ansible.errors import AnsibleActionFail

from ansible_collections.llmserve.sglang.plugins.plugin_utils.plain import plain


def registered_outcomes(hostvars: Any, hosts: Iterable[str], result_var: str) -> dict[str, Any]:
    """host -> the result each host of ``hosts`` registered as ``result_var`` (plain types), None where it has none;
    localhost is skipped."""
    outcomes: dict[str, Any] = {}
    for host in hosts:
        if host == "localhost":
            continue
        outcome = hostvars[host].get(result_var) if host in hostvars else None
        outcomes[host] = plain(dict(outcome)) if outcome is not None else None
    return outcomes


def pending_hosts(task_vars: Mapping[str, Any], hosts: Iterable[str], later: Collection[str] = ()) -> set[str]:
    """Hosts that have not had their turn yet: ``later`` (a later play of the playbook takes them) or a later serial
    batch of this play, unless this play already dropped them (failed, unreachable)."""
    play_all = task_vars.get("ansible_play_hosts_all") or []
    active = task_vars.get("ansible_play_hosts") or []
    batch = task_vars.get("ansible_play_batch") or []
    dropped = set(play_all) - set(active)
    return {host for host in hosts if host not in dropped
            and (host in later or (host in active and host not in batch))}


def write_summary(path: str, rows: Any, check_mode: bool = False) -> bool:
    """The rows as JSON in ``path``, unless it holds them already; whether it wrote (would write)."""
    return bool(write_files([(path, json.dumps(rows, indent=4, sort_keys=True) + "\n")], check_mode))


def write_if_changed(path: str, text: str, check_mode: bool = False) -> bool:
    """Write ``text`` to ``path`` atomically unless it holds it already (in check mode: only say so); whether it
    wrote (would write)."""
    try:
        with open(path, encoding="utf-8") as handle:
            if handle.read() == text:
                return False
    except FileNotFoundError:
        pass
    if check_mode:
        return True
    directory = os.path.dirname(path)
    os.makedirs(directory, mode=0o755, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix="." + os.path.basename(path) + ".")
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
    return True


HOST_VARS_HEADER = "---\n# Written by llmserve.sglang.kv_tune; the host's drop-ins and fact are authoritative.\n"


def tune_report_files(items: Iterable[dict[str, Any]], report_dir: str, host_vars_dir: str = "",
                      host_dir: str | None = None) -> list[tuple[str, str]]:
    """[(path, text)] of one host's kv_tune reports (host_units.report_items): <name>.json and <name>.md in
    ``report_dir``; with ``host_vars_dir``, the pins of the units tuned to a new value in
    ``host_vars_dir``/``host_dir``/kv_tune.yml (``host_dir``: the host's name, checked to name one directory)."""
    files: list[tuple[str, str]] = []
    for item in items:
        files.append((os.path.join(report_dir, item["name"] + ".json"),
                      json.dumps(item["result"], indent=4, sort_keys=True) + "\n"))
        files.append((os.path.join(report_dir, item["name"] + ".md"), item.get("report") or ""))
    pinned = [item for item in items if item["status"] == "tuned"]
    if host_vars_dir and pinned:
        entries: dict[str, Any] = {}
        for item in pinned:
            result = item["result"]
            entries[item["unit"]] = {"mem_fraction_static": result["after"]["mem_fraction_static"],
                                     "tokens": result["after"]["tokens"],
                                     "fingerprint_hash": result.get("fingerprint_hash"), "tuned_at": result.get("time")}
        text = HOST_VARS_HEADER + yaml.safe_dump({"kv_tune_pinned": entries}, default_flow_style=False,
                                                 sort_keys=False)
        # the caller names the host's directory whenever it names host_vars_dir
        files.append((os.path.join(host_vars_dir, cast(str, host_dir), "kv_tune.yml"), text))
    return files


def write_files(files: Iterable[tuple[str, str]], check_mode: bool = False) -> list[str]:
    """write_if_changed for each (path, text); the paths written (that would be written)."""
    written: list[str] = []
    for path, text in files:
        try:
            if write_if_changed(path, text, check_mode):
                written.append(path)
        except OSError as exc:
            raise AnsibleActionFail("cannot write %s: %s" % (path, exc))
    return written


def workflow_stats(rows: list[dict[str, Any]], report_dir: str, failed: Callable[[dict[str, Any]], Any],
                   environ: Mapping[str, str] | None = None, **more: Any) -> dict[str, Any]:
    """What a run hands on to what runs next (set_stats: ansible-runner's artifact_data, the variables of an AWX
    workflow's next job): each row as in the summary file (a host's, or a server's), the number of rows of each
    status, the hosts ``failed`` says failed (each once), where the reports are, and ``more``.

    ``report_dir`` is where this run wrote them. Under ansible-runner's streaming mode (AWX's execution nodes:
    ``transmit | worker | process``) that is the worker's directory, gone with it; ``process`` unpacks the job's
    artifacts into a directory of its own. So ``report_artifacts`` also gives the reports' place inside the job's
    artifacts directory (``environ``'s AWX_ISOLATED_DATA_DIR), wherever they were unpacked; None when they are not
    in it (a ``kv_tune_report_dir`` of the user's, or no ansible-runner)."""
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["status"]] = counts.get(row["status"], 0) + 1
    artifacts = (environ or {}).get(RUNNER_ARTIFACTS_ENV)
    inside = None
    if artifacts:
        relative = os.path.relpath(os.path.normpath(report_dir), os.path.normpath(artifacts))
        inside = relative if relative != os.pardir and not relative.startswith(os.pardir + os.sep) else None
    return dict(more, hosts=rows, counts=counts, failed=list(dict.fromkeys(row["host"] for row in rows if failed(row))),
                report_dir=report_dir, report_artifacts=inside)


def handed_on(name: str | None, stats: Any) -> dict[str, Any]:
    """The part of an action's result that hands ``stats`` on as ``name``, as ansible.builtin.set_stats does (the
    strategy takes C(ansible_stats) from any task's result): replaced by each batch, not per host; nothing without a
    name."""
    return {"ansible_stats": {"data": {name: stats}, "per_host": False, "aggregate": False}} if name else {}


# ansible-runner (and so AWX and Automation Platform, whose jobs it runs) exports the job's artifacts directory.
RUNNER_ARTIFACTS_ENV = "AWX_ISOLATED_DATA_DIR"


def _in_installed_collection(path: str) -> bool:
    return "ansible_collections" in os.path.normpath(path).split(os.sep)


def default_report_dir(name: str, environ: Mapping[str, str], cwd: str | None, playbook_dir: str | None,
                       home: str) -> str:
    """Where a run's reports go when the user names no directory: under ansible-runner, its artifacts directory
    (kept with the job's other artifacts); else the directory ansible-playbook runs in; else, where that is "/" (cron,
    systemd) or inside an installed collection, beside the playbook; never inside an installed collection: there,
    the controller user's home."""
    artifacts = environ.get(RUNNER_ARTIFACTS_ENV)
    if artifacts:
        return os.path.join(artifacts, name)
    for base in (cwd, playbook_dir):
        if base and os.path.isabs(base) and base != os.sep and not _in_installed_collection(base):
            return os.path.join(base, name)
    return os.path.join(home, name)


def host_vars_warning(host_vars_dir: str | None, environ: Mapping[str, str],
                      in_container: bool = False) -> str | None:
    """Why pins written to ``host_vars_dir`` on the controller will not last, or None. Under ansible-runner (which
    runs AWX's and Automation Platform's jobs) the job's private data directory, with the project checkout and the
    inventory, is removed when the job ends, and a job in an execution environment loses every file of its container;
    an AWX project is a checkout updated from source control, never pushed back."""
    artifacts = environ.get(RUNNER_ARTIFACTS_ENV)
    if not host_vars_dir or not artifacts:
        return None
    private = os.path.dirname(os.path.dirname(os.path.normpath(artifacts)))  # <private data dir>/artifacts/<ident>
    target = os.path.normpath(host_vars_dir)
    if target == private or target.startswith(private.rstrip(os.sep) + os.sep):
        where = "it is inside the job's private data directory %s, which is removed when the job ends" % private
    elif in_container:
        where = "the job runs in a container (an execution environment), whose files go with it"
    else:
        return None
    return ("kv_tune_host_vars_dir=%s: the pins written there will not persist (%s), and nothing is committed to the "
            "inventory's source control. The pins are safe on the hosts (the fact file and the drop-in); this job's "
            "results are in its artifacts (set_stats: llmserve_kv_tune)." % (host_vars_dir, where))

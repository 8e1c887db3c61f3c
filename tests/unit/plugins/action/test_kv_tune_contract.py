# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""One contract for the kv_tune options. roles/kv_tune/meta/argument_specs.yml is the source; each role option
kv_tune_X is the action's option X, and four other places must say the same: the action's ARGUMENT_SPEC
(plugins/action/kv_tune.py), the module docs (plugins/modules/kv_tune.py DOCUMENTATION), the role's defaults
(roles/kv_tune/defaults/main.yml) and the kv_tune task's arguments in roles/kv_tune/tasks/main.yml and probe.yml:
names, types, elements, defaults, choices and no_log. Every exception is listed below with its reason."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from ansible_collections.llmserve.sglang.plugins.action.kv_tune import ARGUMENT_SPEC
from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner import run_settings

# The collection root, from this file (tests/unit/plugins/action/): ansible-test runs the units in a copy of it.
ROOT = Path(__file__).resolve().parents[4]
ROLE = ROOT / "roles" / "kv_tune"
PREFIX = "kv_tune_"
ENTRY = "main"

# Role options that the action does not take: they are read by the role's other tasks (reports, summary) on the
# controller, or (kv_tune_class) reach the action under another name.
ROLE_ONLY = {
    "kv_tune_summary_hosts": "the fleet summary task (kv_tune_summary), not the tuner",
    "kv_tune_summary_pending": "the fleet summary task (kv_tune_summary), not the tuner",
    "kv_tune_report_dir": "the report and summary tasks on the controller",
    "kv_tune_plot": "the report task on the controller (matplotlib)",
    "kv_tune_summary": "whether the role runs the summary task",
    "kv_tune_host_vars_dir": "the report task on the controller",
    "kv_tune_class": "set by the probe from the fleet's plan; main.yml gives its `units` as the action's class_plan",
}
# The headroom watch's options reach the action as one dict, its option watch (roles/kv_tune/vars/main.yml).
ROLE_ONLY.update({name: "the action's watch dict (__kv_tune_watch in roles/kv_tune/vars/main.yml)" for name in (
    "kv_tune_watch", "kv_tune_watch_action", "kv_tune_watch_full_usage", "kv_tune_watch_headroom_hours",
    "kv_tune_watch_headroom_steps", "kv_tune_watch_storm_retractions", "kv_tune_watch_pool_tolerance")})
# The role option of the action's options that are not kv_tune_<name>.
RENAMED = {"class_plan": "kv_tune_class"}
# Action options no single role option gives: the role composes them from several.
COMPOSED = {"watch": "__kv_tune_watch (roles/kv_tune/vars/main.yml) from kv_tune_watch_*, omitted without kv_tune_watch"}
# Role defaults that are templates (they read other roles' variables), with what they must give when those are
# unset: the action's own default. None: no action default to compare with (the reason says why).
TEMPLATED = {
    "kv_tune_unit": "sglang_service_name: the sglang_service role's unit",
    "kv_tune_units": "every server of sglang_service_instances, else [kv_tune_unit]; the action's default (none) "
                     "means [unit]",
    "kv_tune_url": "sglang_service_port: where the sglang_service role's server answers",
    "kv_tune_api_key": "sglang_service_api_key; the tasks give an empty key as omit, the action's default (none)",
    "kv_tune_ready_timeout": "sglang_service_timeout_start_sec: the unit's own start timeout",
    "kv_tune_report_dir": "the directory ansible-playbook was started in (role-only)",
}
# What a templated default gives with the other roles' variables unset, where that is not the action's default.
TEMPLATED_GIVES = {
    "kv_tune_api_key": "",
}
# Templated defaults that call the collection's own filters (not loaded in a bare Templar): the part that gives the
# action's default when the other roles' variables are unset.
NOT_RENDERED = {
    "kv_tune_units": "[kv_tune_unit]",
}
# Role options whose argument spec has no default while the action's has one: the role's default is a template.
SPEC_DEFAULT_FROM_TEMPLATE = {"kv_tune_url", "kv_tune_ready_timeout"}
# The kv_tune task's arguments that are not "{{ kv_tune_X }}", by file.
TASK_ARGS = {
    "main.yml": {
        "api_key": "{{ kv_tune_api_key | default(omit, true) }}",     # an empty key is no key
        "class_plan": "{{ kv_tune_class.units | default(omit) }}",    # this host's units' parts in their classes
        "run_id": "{{ kv_tune_run_id | default(omit, true) }}",       # null: a run of its own
        "watch": "{{ __kv_tune_watch if kv_tune_watch | bool else omit }}",  # the watch's settings, or not read
    },
    "probe.yml": {
        "api_key": "{{ kv_tune_api_key | default(omit, true) }}",
        "watch": "{{ __kv_tune_watch if kv_tune_watch | bool else omit }}",
    },
}
# Action options the tasks do not pass: unit reaches the action as kv_tune_units' default; the probe runs before
# the class plan exists.
# The probe runs in check mode: it takes no lock, so it runs as no caller's run.
NOT_PASSED = {"main.yml": {"unit"}, "probe.yml": {"unit", "class_plan", "run_id"}}


def load(path):
    return yaml.safe_load(path.read_text())


SPECS = load(ROLE / "meta" / "argument_specs.yml")["argument_specs"]
ROLE_OPTIONS = SPECS[ENTRY]["options"]
DEFAULTS = load(ROLE / "defaults" / "main.yml")


def module_docs():
    tree = ast.parse((ROOT / "plugins" / "modules" / "kv_tune.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(target, "id", None) == "DOCUMENTATION"
                                                for target in node.targets):
            return yaml.safe_load(node.value.value)["options"]
    raise AssertionError("plugins/modules/kv_tune.py has no DOCUMENTATION")


DOCS = module_docs()


def role_option(action_option):
    return RENAMED.get(action_option, PREFIX + action_option)


def mapped():
    """(role option, action option) for every role option the action takes."""
    return [(role_option(name), name) for name in sorted(ARGUMENT_SPEC) if name not in COMPOSED]


def kv_tune_task(file_name):
    for task in load(ROLE / "tasks" / file_name):
        tasks = task.get("block", [task])
        for one in tasks:
            if "llmserve.sglang.kv_tune" in one:
                return one["llmserve.sglang.kv_tune"]
    raise AssertionError("no llmserve.sglang.kv_tune task in %s" % file_name)


def rendered(option):
    """The role's default of ``option``, templated with the role's other defaults and nothing else set."""
    templar = Templar(loader=DataLoader(), variables=dict(DEFAULTS))
    value = DEFAULTS[option]
    return templar.template(trust_as_template(value)) if isinstance(value, str) else value


# --- names -------------------------------------------------------------------------------------------------------

def test_every_role_option_is_an_action_option_or_listed_as_role_only():
    expected = {role_option(name) for name in ARGUMENT_SPEC if name not in COMPOSED} | set(ROLE_ONLY)
    assert set(ROLE_OPTIONS) == expected, (
        "only in the role's argument_specs: %s; only in the action's ARGUMENT_SPEC: %s"
        % (sorted(set(ROLE_OPTIONS) - expected), sorted(expected - set(ROLE_OPTIONS))))
    assert not set(ROLE_ONLY) & {role_option(name) for name in ARGUMENT_SPEC if name not in RENAMED and name not in COMPOSED}


def test_the_module_docs_name_the_actions_options():
    assert set(DOCS) == set(ARGUMENT_SPEC)


def test_the_role_defaults_set_the_options_of_the_argument_spec():
    """Every default in defaults/main.yml is an option of the role; every option has a default there, except the
    one the probe sets (kv_tune_class: undefined until then, so that main.yml omits class_plan)."""
    assert set(DEFAULTS) - set(ROLE_OPTIONS) == set()
    assert set(ROLE_OPTIONS) - set(DEFAULTS) == {"kv_tune_class"}


def test_every_entry_point_takes_the_options_of_main_as_main_does():
    for entry, spec in SPECS.items():
        for name, option in spec["options"].items():
            assert name in ROLE_OPTIONS, (entry, name)
            for key in ("type", "elements", "choices", "no_log"):
                assert option.get(key) == ROLE_OPTIONS[name].get(key), (entry, name, key)


# --- types, choices, no_log ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("role_name, name", mapped())
def test_the_action_and_the_docs_type_the_option_as_the_role_does(role_name, name):
    role, action, doc = ROLE_OPTIONS[role_name], ARGUMENT_SPEC[name], DOCS[name]
    for key in ("type", "elements"):
        assert action.get(key) == role.get(key), "%s %s: action %r, role %r" % (
            name, key, action.get(key), role.get(key))
        assert doc.get(key) == role.get(key), "%s %s: docs %r, role %r" % (name, key, doc.get(key), role.get(key))
    assert action.get("choices") == role.get("choices") == doc.get("choices"), name
    # Module docs carry no no_log (validate-modules has no such key); the argument specs must agree.
    assert bool(action.get("no_log")) == bool(role.get("no_log")), name
    assert action.get("required", False) == role.get("required", False) == doc.get("required", False), name


def test_the_strategies_are_the_tuners():
    assert ROLE_OPTIONS["kv_tune_strategy"]["choices"] == list(run_settings.STRATEGIES)


# --- defaults ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("role_name, name", mapped())
def test_the_action_the_docs_and_the_role_agree_on_the_default(role_name, name):
    role, action, doc = ROLE_OPTIONS[role_name], ARGUMENT_SPEC[name], DOCS[name]
    assert doc.get("default") == action.get("default"), "%s: docs %r, action %r" % (
        name, doc.get("default"), action.get("default"))
    if role_name in SPEC_DEFAULT_FROM_TEMPLATE:
        assert "default" not in role, "%s: the role's default is a template, its spec says none" % role_name
    else:
        assert role.get("default") == action.get("default"), "%s: role spec %r, action %r" % (
            role_name, role.get("default"), action.get("default"))
    if role_name in ROLE_ONLY or role_name == "kv_tune_class":
        return
    if role_name in TEMPLATED:
        assert "{{" in DEFAULTS[role_name], "%s is listed as templated: %s" % (role_name, TEMPLATED[role_name])
        if role_name in NOT_RENDERED:
            assert NOT_RENDERED[role_name] in DEFAULTS[role_name], role_name
        else:
            assert rendered(role_name) == TEMPLATED_GIVES.get(role_name, action.get("default")), role_name
    else:
        assert DEFAULTS[role_name] == action.get("default"), "%s: defaults/main.yml %r, action %r" % (
            role_name, DEFAULTS[role_name], action.get("default"))


@pytest.mark.parametrize("role_name", sorted(ROLE_ONLY))
def test_the_role_only_defaults_are_the_specs(role_name):
    if role_name in TEMPLATED or role_name not in DEFAULTS:
        return
    assert DEFAULTS[role_name] == ROLE_OPTIONS[role_name].get("default"), role_name


def test_the_templated_defaults_are_listed():
    templated = {name for name, value in DEFAULTS.items() if isinstance(value, str) and "{{" in value}
    assert templated == set(TEMPLATED)


# --- the tasks' arguments ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("file_name", sorted(TASK_ARGS))
def test_the_task_passes_each_role_option_as_its_action_option(file_name):
    args = kv_tune_task(file_name)
    assert set(args) == set(ARGUMENT_SPEC) - NOT_PASSED[file_name], file_name
    for name, value in args.items():
        expected = TASK_ARGS[file_name].get(name, "{{ %s }}" % role_option(name))
        assert value == expected, "%s: %s: %r, expected %r" % (file_name, name, value, expected)


# --- bounds ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(run_settings.BOUNDS))
def test_the_role_and_the_docs_state_the_settings_bounds(name):
    """check_settings is where the ranges are enforced; the role's spec and the module docs must say the same."""
    low, high = run_settings.BOUNDS[name][:2]
    words = "(%s to %s)" % (low, high)
    for where, option in (("role", ROLE_OPTIONS[role_option(name)]), ("docs", DOCS[name])):
        description = option["description"]
        text = " ".join(description) if isinstance(description, list) else description
        assert words in text, "%s: the %s description does not say %s" % (name, where, words)

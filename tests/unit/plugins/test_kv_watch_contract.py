# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The headroom watch's settings say the same range everywhere they enter: watch.settings.BOUNDS is where the ranges
are enforced (its check_settings: the watch's own arguments, kv_watch_facts, kv_fingerprint's watch, the tuner's
check and the sglang_service role's validate.yml); the roles' argument specs and the module docs must state them,
and every default must lie in them (issue 32, item 9)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

from ansible_collections.llmserve.sglang.plugins.module_utils.watch import settings as watch_settings

ROOT = Path(__file__).resolve().parents[3]

# (where, variable or option, the watch's setting): every place a bounded setting enters.
ROLE_VARIABLES = [
    ("sglang_service", "sglang_service_kv_watch_interval", "interval"),
    ("sglang_service", "sglang_service_kv_watch_window", "window"),
    ("sglang_service", "sglang_service_kv_watch_keep", "keep"),
    ("sglang_service", "sglang_service_kv_watch_headroom_hours", "headroom_hours"),
    ("sglang_service", "sglang_service_kv_watch_headroom_steps", "headroom_steps"),
    ("kv_tune", "kv_tune_watch_headroom_hours", "headroom_hours"),
    ("kv_tune", "kv_tune_watch_headroom_steps", "headroom_steps"),
    ("kv_tune", "kv_tune_watch_storm_retractions", "storm_retractions"),
    ("kv_tune", "kv_tune_watch_pool_tolerance", "pool_tolerance"),
    ("capacity_report", "capacity_report_watch_windows", "recent"),
    ("capacity_report", "capacity_report_watch_headroom_hours", "headroom_hours"),
]
MODULE_OPTIONS = [
    ("kv_watch_facts", (), "headroom_hours"),
    ("kv_watch_facts", (), "headroom_steps"),
    ("kv_watch_facts", (), "storm_retractions"),
    ("kv_watch_facts", (), "recent"),
    ("kv_fingerprint", ("watch",), "headroom_hours"),
    ("kv_fingerprint", ("watch",), "headroom_steps"),
    ("kv_fingerprint", ("watch",), "storm_retractions"),
    ("kv_fingerprint", ("watch",), "pool_tolerance"),
]


def text(description):
    return " ".join(description) if isinstance(description, list) else description


def role_option(role, name):
    specs = yaml.safe_load((ROOT / "roles" / role / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    return specs["main"]["options"][name]


def role_default(role, name):
    return yaml.safe_load((ROOT / "roles" / role / "defaults" / "main.yml").read_text())[name]


def module_option(module, parents, name):
    tree = ast.parse((ROOT / "plugins" / "modules" / ("%s.py" % module)).read_text())
    docs = next(yaml.safe_load(node.value.value) for node in tree.body if isinstance(node, ast.Assign)
                and any(getattr(target, "id", None) == "DOCUMENTATION" for target in node.targets))
    options = docs["options"]
    for parent in parents:
        options = options[parent]["suboptions"]
    return options[name]


def words(setting):
    low, high = watch_settings.BOUNDS[setting][:2]
    return "%s to %s" % (low, high)


@pytest.mark.parametrize("role, name, setting", ROLE_VARIABLES, ids=[name for _role, name, _setting in ROLE_VARIABLES])
def test_the_roles_state_the_range_and_their_default_lies_in_it(role, name, setting):
    option = role_option(role, name)
    assert words(setting) in text(option["description"]), "%s: the argument spec does not say %s" % (name, words(setting))
    assert watch_settings.check_settings({setting: role_default(role, name)})[setting] == option["default"]


@pytest.mark.parametrize("module, parents, setting", MODULE_OPTIONS,
                         ids=["%s %s" % (module, setting) for module, _parents, setting in MODULE_OPTIONS])
def test_the_module_docs_state_the_range_and_their_default_lies_in_it(module, parents, setting):
    option = module_option(module, parents, setting)
    assert words(setting) in text(option["description"]), "%s %s: the docs do not say %s" % (module, setting,
                                                                                             words(setting))
    assert watch_settings.check_settings({setting: option["default"]})


def test_every_bounded_setting_enters_somewhere_that_states_its_range():
    assert {setting for _role, _name, setting in ROLE_VARIABLES} | {
        setting for _module, _parents, setting in MODULE_OPTIONS} == set(watch_settings.BOUNDS)


def test_the_roles_defaults_pass_the_watchs_own_check():
    assert watch_settings.check_settings({setting: role_default("sglang_service", name)
                                          for role, name, setting in ROLE_VARIABLES if role == "sglang_service"})
    assert watch_settings.check_settings(dict({setting: role_default("kv_tune", name) for role, name, setting
                                               in ROLE_VARIABLES if role == "kv_tune"},
                                              full_usage=role_default("kv_tune", "kv_tune_watch_full_usage"),
                                              action=role_default("kv_tune", "kv_tune_watch_action")))

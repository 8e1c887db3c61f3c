# Copyright (c) 2026, llmserve.sglang contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The AWX files of docs/awx.md against what they name: the survey of tune_kv.yml (docs/awx/tune_kv_survey.json)
asks only for variables the playbook or its roles read, with answers their argument specs and the tuner's bounds
accept and defaults that are theirs; the credential type (docs/awx/credential_type_sglang.yml) injects only
variables the roles read, and marks secret every field that reaches a no_log variable. Both also pass the checks the
controller's API makes when they are loaded (awx/api/views: the survey spec's and the credential type's shapes)."""
from __future__ import annotations

import json
import re
import sys

import pytest
import yaml
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.module_utils.parsing.convert_bool import boolean

from conftest import REPO, _collections_path

sys.path.insert(0, _collections_path())
from ansible_collections.llmserve.sglang.plugins.plugin_utils.tuner.run_settings import BOUNDS  # noqa: E402

AWX = REPO / "docs" / "awx"
PLAYBOOK = REPO / "playbooks" / "tune_kv.yml"
# The controller's question types and the Python type of a default of each (JobTemplateSurveySpec.ALLOWED_TYPES).
SURVEY_TYPES = {"text": str, "textarea": str, "password": str, "multiplechoice": str, "multiselect": str,
                "integer": int, "float": float}
# What the tuner itself holds class_margin_steps to (run_settings.check_settings), beside BOUNDS.
EXTRA_BOUNDS = {"class_margin_steps": (0, 20)}


def survey():
    return json.loads((AWX / "tune_kv_survey.json").read_text())


def credential_type():
    return yaml.safe_load((AWX / "credential_type_sglang.yml").read_text())


def role_variables(role):
    """{name: option} of every entry point of the role's argument specs, with each default of defaults/main.yml."""
    options = {}
    for entry in yaml.safe_load((REPO / "roles" / role / "meta" / "argument_specs.yml").read_text())["argument_specs"].values():
        for name, option in (entry.get("options") or {}).items():
            options.setdefault(name, dict(option))
    for name, value in (yaml.safe_load((REPO / "roles" / role / "defaults" / "main.yml").read_text()) or {}).items():
        options.setdefault(name, {})["role_default"] = value
    return options


def all_roles():
    return sorted(path.name for path in (REPO / "roles").iterdir() if (path / "meta" / "argument_specs.yml").exists())


def playbook_roles(text):
    return sorted(set(re.findall(r"\bllmserve\.sglang\.(\w+)", text)))


def playbook_reads(text):
    """{variable: its default in the playbook, or None} for each variable a Jinja expression of the playbook reads:
    the names left once string literals, filters, attributes and tests are taken out, less calls and keywords."""
    reads = {}
    for expression in re.findall(r"\{\{(.*?)\}\}", text, re.S):
        bare = re.sub(r"'[^']*'|\"[^\"]*\"", "''", expression)
        bare = re.sub(r"(?:\||\.|\bis\s+(?:not\s+)?)\s*\w+", " ", bare)
        for name in re.findall(r"\b([A-Za-z_]\w*)\b(?![(=])", bare):
            if name.lower() in ("in", "not", "and", "or", "if", "else", "true", "false", "none"):
                continue
            default = re.search(r"\b%s\s*\|\s*default\(([^()]*)\)" % name, expression)
            reads.setdefault(name, yaml.safe_load(default.group(1)) if default else None)
    return reads


TEXT = PLAYBOOK.read_text()
ROLE_OPTIONS = {name: option for role in playbook_roles(TEXT) for name, option in role_variables(role).items()}
READS = playbook_reads(TEXT)


def test_the_playbook_reader_finds_the_plays_variables():
    # The reader itself, on the playbook it serves: the plays' own variables with their defaults.
    assert playbook_roles(TEXT) == ["kv_tune"]
    assert READS["kv_tune_hosts"] == "sglang_servers" and READS["kv_tune_max_fail_percentage"] == 0
    assert READS["kv_tune_serial"] == [1, "25%"]
    assert "default" not in READS and "query" not in READS and "groups" in READS


@pytest.mark.parametrize("question", survey()["spec"], ids=lambda question: question.get("variable"))
def test_a_survey_question_names_a_variable_the_playbook_or_its_role_reads(question):
    name = question["variable"]
    assert name in ROLE_OPTIONS or name in READS, (
        "%s is neither an option or default of the role(s) %s nor a variable playbooks/tune_kv.yml reads"
        % (name, ", ".join(playbook_roles(TEXT))))


@pytest.mark.parametrize("question", survey()["spec"], ids=lambda question: question.get("variable"))
def test_every_answer_is_one_the_role_or_the_play_accepts(question):
    name, answers = question["variable"], question_answers(question)
    option = ROLE_OPTIONS.get(name)
    if option is not None:
        spec = {key: value for key, value in option.items() if key in ("type", "choices", "elements")}
        for answer in answers:
            result = ArgumentSpecValidator({name: spec}).validate({name: answer})
            assert not result.error_messages, (name, answer, result.error_messages)
        if option.get("choices"):
            assert question["type"] == "multiplechoice" and set(question["choices"]) <= set(option["choices"]), (
                name, question.get("choices"), option["choices"])
        bounds = BOUNDS.get(name.removeprefix("kv_tune_")) or EXTRA_BOUNDS.get(name.removeprefix("kv_tune_"))
        if bounds:
            assert bounds[0] <= question["min"] and question["max"] <= bounds[1], (name, bounds)
        if option.get("type") == "bool":
            assert question["type"] == "multiplechoice"
            assert sorted(boolean(choice, strict=True) for choice in question["choices"]) == [False, True]
    elif name.endswith("_serial"):
        # Ansible's serial: a host count or a percentage per batch (playbook_executor's pct_to_int).
        assert all(re.fullmatch(r"[1-9]\d*%?", str(answer)) for answer in answers), answers
    elif name.endswith("_max_fail_percentage"):
        assert question["type"] == "integer" and 0 <= question["min"] and question["max"] <= 100
    else:
        assert question["type"] == "text" and question["min"] >= 1, "a host pattern must not be empty"


@pytest.mark.parametrize("question", survey()["spec"], ids=lambda question: question.get("variable"))
def test_a_default_is_the_one_without_the_survey(question):
    # Launching without changing an answer runs what `ansible-playbook playbooks/tune_kv.yml` runs.
    name = question["variable"]
    option = ROLE_OPTIONS.get(name)
    if "default" not in question:
        assert not question["required"] and READS.get(name) is not None, (
            "%s: an optional question without a default leaves the playbook's own default" % name)
        return
    if option is not None:
        expected = option.get("role_default", option.get("default"))
        answer = question["default"]
        if option.get("type") == "bool":
            answer = boolean(answer, strict=True)
        assert answer == expected, (name, question["default"], expected)
    else:
        assert question["default"] == READS[name], (name, question["default"], READS[name])


def question_answers(question):
    answers = list(question.get("choices") or [])
    answers += [question[key] for key in ("default", "min", "max") if question.get(key) is not None
                and (key == "default" or question["type"] in ("integer", "float"))]
    return answers


def test_the_survey_is_one_the_controller_accepts():
    spec = survey()
    assert isinstance(spec["name"], str) and isinstance(spec["description"], str) and spec["spec"]
    seen = set()
    for index, question in enumerate(spec["spec"]):
        where = "question %d (%s)" % (index, question.get("variable"))
        for field in ("type", "question_name", "variable"):
            assert isinstance(question.get(field), str), (where, field)
        assert isinstance(question.get("required"), bool), where
        assert question["variable"] not in seen, where
        seen.add(question["variable"])
        assert question["type"] in SURVEY_TYPES, where
        if question.get("default", "") != "":
            assert isinstance(question["default"], SURVEY_TYPES[question["type"]]), (where, question["default"])
            assert not isinstance(question["default"], bool), where
        for key in ("min", "max"):
            assert question.get(key) is None or isinstance(question[key], int) and not isinstance(question[key], bool), (where, key)
        if question["type"] in ("multiplechoice", "multiselect"):
            assert question.get("choices") and all(isinstance(choice, str) for choice in question["choices"]), where
            assert question.get("default") in [None, ""] + question["choices"], where
        if question["type"] in ("integer", "float") and "default" in question:
            assert question["min"] <= question["default"] <= question["max"], where
        if question["type"] in ("text", "textarea") and not question["required"]:
            # The controller passes an optional text left blank as "" (or null): never the playbook's default.
            assert question.get("min", 0) >= 1, where


CREDENTIAL_VARIABLES = {name: option for role in all_roles() for name, option in role_variables(role).items()}


def injected():
    """{extra var: the input fields its injector template names}."""
    kind = credential_type()
    return {name: set(re.findall(r"\{\{\s*(\w+)\s*\}\}", template))
            for name, template in kind["injectors"]["extra_vars"].items()}


@pytest.mark.parametrize("variable", sorted(injected()))
def test_the_credential_injects_a_variable_the_roles_read(variable):
    assert variable in CREDENTIAL_VARIABLES, "%s is neither an option nor a default of any role (%s)" % (
        variable, ", ".join(all_roles()))
    assert CREDENTIAL_VARIABLES[variable].get("type", "str") == "str", variable


def test_every_field_that_reaches_a_secret_is_secret():
    fields = {field["id"]: field for field in credential_type()["inputs"]["fields"]}
    for variable, names in injected().items():
        assert names and names <= set(fields), (variable, names, sorted(fields))
        if CREDENTIAL_VARIABLES[variable].get("no_log"):
            for name in names:
                assert fields[name].get("secret") is True, "%s reaches the no_log %s: mark it secret" % (name, variable)
    # Every field is one of the secrets above.
    assert all(field.get("secret") is True for field in fields.values())


def test_the_credential_type_is_one_the_controller_accepts():
    kind = credential_type()
    assert kind["kind"] in ("cloud", "net") and kind["name"]
    fields = kind["inputs"]["fields"]
    assert all(set(field) <= {"id", "label", "type", "secret", "help_text", "multiline", "format", "choices"}
               and field["type"] in ("string", "boolean") and field["label"] for field in fields)
    assert len({field["id"] for field in fields}) == len(fields)
    assert set(kind["inputs"].get("required", [])) <= {field["id"] for field in fields}
    assert set(kind["injectors"]) <= {"extra_vars", "env", "file"}
    # The secrets' names for the API key and the token: required, and present whatever the inventory holds.
    assert {"sglang_service_api_key", "sglang_hf_token", "sglang_service_hf_token"} <= set(injected())

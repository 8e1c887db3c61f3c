# llmserve.sglang: every developer and CI entry point.
#   make demo   the main job on the embedded default (see README)
#   make test   everything: lint, sanity, units, functional tests
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := $(CURDIR)/.venv
BIN := $(VENV)/bin
COLLECTIONS := $(VENV)/collections
# ansible-test needs the collection at a path ending in ansible_collections/<namespace>/<name>.
TEST_ROOT := $(CURDIR)/.tmp/ansible_collections/llmserve/sglang
PY_VER := $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])')
export ANSIBLE_COLLECTIONS_PATH := $(COLLECTIONS)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
export PATH := $(BIN):$(PATH)
# Some machines list find-links/index folders that do not exist; pip warns once per package about them.
PIP_NOISE := { grep -v "is ignored: it is neither a file nor a directory" || true; }

.PHONY: help venv system-deps demo test lint sanity units functional build bench clean

help:
	@echo "make demo        capacity report for a recorded field-case startup log (localhost)"
	@echo "make test        lint + sanity + units + functional (what CI runs)"
	@echo "make lint | sanity | units | functional | build | bench | clean"

# --- setup -------------------------------------------------------------------------------------------
system-deps:
	@# shellcheck: ansible-test sanity skips its shell checks without it.
	@if ! $(PYTHON) -c 'import ensurepip, venv' 2>/dev/null || ! command -v git >/dev/null || ! command -v shellcheck >/dev/null; then \
	  echo "installing python3-venv, git, shellcheck (apt)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv python3-pip git shellcheck >/dev/null; \
	fi

$(VENV)/.installed: requirements.txt constraints.txt | system-deps
	@echo "creating $(VENV) and installing pinned requirements"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check -r requirements.txt -c constraints.txt 2>&1 | $(PIP_NOISE)
	mkdir -p $(COLLECTIONS)/ansible_collections/llmserve
	ln -sfn $(CURDIR) $(COLLECTIONS)/ansible_collections/llmserve/sglang
	mkdir -p $(HOME)/.ansible/test/cache
	cp .ci/get_pip_offline.py $(HOME)/.ansible/test/cache/get_pip_24_2.py
	touch $@

venv: $(VENV)/.installed

# --- the main job ---------------------------------------------------------------------------------
demo: venv
	$(BIN)/ansible-playbook playbooks/capacity_report.yml -i inventories/local \
	  -e capacity_report_log_path=$(CURDIR)/tests/fixtures/logs/field_kimi_k25_rtx6000_tp8_eagle3.log \
	  -e capacity_report_model_config=$(CURDIR)/tests/fixtures/configs/kimi-k2.5-int4.json \
	  -e capacity_report_sglang_version=0.5.9 \
	  -e capacity_report_target_tokens=250000

# --- tests -----------------------------------------------------------------------------------------
test: lint sanity units functional build
	@echo "make test: all green"

lint: venv
	$(BIN)/ansible-lint --profile production

# A fresh copy of the tracked tree (plus new, not-ignored files) where ansible-test wants it.
$(TEST_ROOT): FORCE
	rm -rf $(TEST_ROOT) && mkdir -p $(TEST_ROOT)
	git ls-files -z --cached --others --exclude-standard \
	  | tar --null --ignore-failed-read -T - -cf - 2>/dev/null | tar -xf - -C $(TEST_ROOT)
	@# ansible-test lists content with git; a repository of its own keeps it from seeing this one's .gitignore.
	cd $(TEST_ROOT) && git init -q && git add -A
FORCE:

sanity: venv $(TEST_ROOT)
	cd $(TEST_ROOT) && $(BIN)/ansible-test sanity --venv --python $(PY_VER) --color no

units: venv $(TEST_ROOT)
	cd $(TEST_ROOT) && $(BIN)/ansible-test units --venv --python $(PY_VER) --color no

functional: venv
	$(BIN)/pytest -q tests/functional

build: venv
	rm -rf .tmp/build && mkdir -p .tmp/build
	$(BIN)/ansible-galaxy collection build --output-path .tmp/build . 2>&1 | tee .tmp/build/log
	@! grep -qi warning .tmp/build/log || { echo "collection build printed warnings"; exit 1; }

# Measurements quoted in README.md (never asserted in tests).
bench: venv
	$(BIN)/python bench/bench_engine.py | tee bench/results.md

clean:
	rm -rf .tmp tests/output .pytest_cache

# llmserve.sglang: every developer and CI entry point.
#   make demo   the main job on the embedded default (see README)
#   make test   everything: lint, sanity, units, functional tests
SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

# The controller's Python: the newest 3.12 or later found (ansible-core 2.20 and later run on 3.12 to 3.14), else
# python3 with ansible-core 2.19, the newest core that runs on Python 3.11 (make venv says so).
PYTHON ?= $(shell .ci/find-python 3.14 3.13 3.12 || command -v python3)
PY_VER := $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])')
VENV := $(CURDIR)/.venv
BIN := $(VENV)/bin
COLLECTIONS := $(VENV)/collections
# ansible-test needs the collection at a path ending in ansible_collections/<namespace>/<name>.
TEST_ROOT := $(CURDIR)/.tmp/ansible_collections/llmserve/sglang
# ansible-core: constraints.txt pins the newest release (the venv's, for everything make test runs); sanity and
# units also run on the newest patch release of every other minor version meta/runtime.yml claims (CORE_LANES), each
# from a venv of its own (that core, what it pulls in at constraints.txt's pins) in a copy of the tree of its own.
# ansible-test --venv builds each test's requirements for that core; it keeps them under HOME, so each core's runs get
# a HOME of their own and never build a virtualenv at the same path as another core's at once (pip's download cache is
# shared).
CORE := $(shell sed -n 's/^ansible-core==//p' constraints.txt)
CORE_LANES := 2.19.14 2.20.10
CORE_FOR_PYTHON_3_11 := 2.19.14
NEW_PYTHON := $(filter 3.12 3.13 3.14,$(PY_VER))
VENV_CORE := $(if $(NEW_PYTHON),$(CORE),$(CORE_FOR_PYTHON_3_11))
# The oldest Python the modules claim on the hosts (tests/config.yml): their unit tests run on it too.
TARGET_PYTHON_OLDEST := 3.9
export ANSIBLE_COLLECTIONS_PATH := $(COLLECTIONS)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
export PATH := $(BIN):$(PATH)
# Some machines list find-links/index folders that do not exist; pip warns once per package about them.
PIP_NOISE := { grep -v "is ignored: it is neither a file nor a directory" || true; }

# The simulator's wheels, installed offline on simulated hosts (tools/simhosts, tools/sglang_sim): sglang-sim (the
# simulator and its tools) and the stand-in distribution sglang, one wheel per simulated SGLang version.
WHEELHOUSE_DIR := $(CURDIR)/.tmp/wheelhouse
SIM_SOURCES := $(shell find tools/sglang_sim -type f -not -path '*/build/*' -not -path '*.egg-info*' -not -name '*.pyc' 2>/dev/null)
WHEELHOUSE ?= $(WHEELHOUSE_DIR)
export SIM_WHEELHOUSE := $(WHEELHOUSE)

MOLECULE_SCENARIOS ?= nvidia_driver sglang
# nvidia_driver does not support Debian 13 yet (its CUDA repository and packages): Debian 12 only.
MOLECULE_SCENARIOS_TRIXIE ?= sglang

.PHONY: help venv system-deps demo test test-lane-ansible-test test-lane-others test-lane-hosts lint sanity units units-target-oldest other-cores functional monitoring prometheus-debs docs sim simhosts molecule wheelhouse build ee changelog changelog-lint galaxy-importer new-user bench bench-engine bench-prediction bench-convergence bench-fleet bench-watch bench-rollout bench-quick clean

help:
	@echo "make demo        a simulated field-case GPU host deployed by site.yml, its capacity report, then tune_kv.yml"
	@echo "make test        lint + sanity + units + functional + monitoring + docs + sim + simhosts + molecule + build (what CI runs)"
	@echo "make lint | sanity | units | functional | monitoring | docs | sim | simhosts | molecule | build | ee | bench | bench-quick | clean"
	@echo "make sanity-core-V | units-core-V   sanity, units on ansible-core V (CORE_LANES: $(CORE_LANES)); other-cores: all"
	@echo "make units-target-oldest   the modules' unit tests on the hosts' oldest Python ($(TARGET_PYTHON_OLDEST))"
	@echo "make galaxy-importer | changelog | changelog-lint   Galaxy's import of the tarball; CHANGELOG.rst"
	@echo "make sim-up [N=4] [PROFILE=field] | sim-down | sim-status   simulated GPU hosts"

# --- setup -------------------------------------------------------------------------------------------
system-deps:
	@# shellcheck: ansible-test sanity skips its shell checks without it; pciutils: the simulator's lspci is
	@# compared with the real one.
	@if ! $(PYTHON) -c 'import ensurepip, venv' 2>/dev/null || ! command -v git >/dev/null \
	    || ! command -v shellcheck >/dev/null || ! command -v lspci >/dev/null; then \
	  echo "installing python3-venv, git, shellcheck, pciutils (apt)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv python3-pip git shellcheck pciutils >/dev/null; \
	fi

# requirements-dev.txt: the tools, and the collection's runtime requirements.txt (-r); constraints.txt pins all, the
# newest ansible-core included. The stamp names the Python and the core: another of either makes the venv anew.
VENV_STAMP := $(VENV)/.installed-python$(PY_VER)-core$(VENV_CORE)
$(VENV_STAMP): requirements-dev.txt requirements.txt constraints.txt $(wildcard cli/pyproject.toml cli/*/*.py) | system-deps
	@$(if $(NEW_PYTHON),,echo "make venv: no Python 3.12 or later found (python3.14, python3.13, python3.12 or pyenv's):" \
	  "Python $(PY_VER) with ansible-core $(CORE_FOR_PYTHON_3_11), the newest core that runs on it; 2.20 and 2.21 are not tested")
	@echo "creating $(VENV): Python $(PY_VER) ($(PYTHON)), ansible-core $(VENV_CORE), pinned requirements"
	rm -rf $(VENV) && $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check -r requirements-dev.txt \
	  -c <(grep -v '^ansible-core==' constraints.txt) ansible-core==$(VENV_CORE) 2>&1 | $(PIP_NOISE)
	@# The console command llmserve-fleet, as a user installs it from the collection (README).
	$(BIN)/pip install -q --disable-pip-version-check --no-deps ./cli 2>&1 | $(PIP_NOISE)
	rm -rf cli/build cli/*.egg-info
	mkdir -p $(COLLECTIONS)/ansible_collections/llmserve
	ln -sfn $(CURDIR) $(COLLECTIONS)/ansible_collections/llmserve/sglang
	$(call offline_get_pip,$(VENV),$(HOME))
	touch $@

venv: $(VENV_STAMP)

$(WHEELHOUSE_DIR)/.built: $(SIM_SOURCES) | $(VENV_STAMP)
	rm -rf $(WHEELHOUSE_DIR) && mkdir -p $(WHEELHOUSE_DIR)
	$(BIN)/pip wheel -q --disable-pip-version-check --no-deps tools/sglang_sim -w $(WHEELHOUSE_DIR) 2>&1 | $(PIP_NOISE)
	rm -rf tools/sglang_sim/build
	$(BIN)/python tools/sglang_sim/build_standins.py $(WHEELHOUSE_DIR)
	touch $@

wheelhouse: $(WHEELHOUSE_DIR)/.built

include tools/simhosts/simhosts.mk
sim-up: wheelhouse

# --- the main job ---------------------------------------------------------------------------------
# A simulated 8x RTX PRO 6000 host of the field case (tools/sglang_sim, tools/simhosts), deployed by site.yml
# (driver, SGLang, systemd unit at the field's --mem-fraction-static 0.88), its capacity report, read over ssh
# from its journal and nvidia-smi, then the tuner: before -> after, reports and plot in kv_tune_reports/.
# A second `make demo` finds the pin still valid and restarts nothing.
demo: venv
	$(MAKE) --no-print-directory sim-up N=1 PROFILE=field
	$(BIN)/ansible-playbook playbooks/site.yml -i inventories/sim
	$(BIN)/ansible-playbook playbooks/capacity_report.yml -i inventories/sim \
	  -e capacity_report_sglang_version=0.5.9 -e capacity_report_target_tokens=250000
	$(BIN)/ansible-playbook playbooks/tune_kv.yml -i inventories/sim

# --- tests -----------------------------------------------------------------------------------------
# Three lanes side by side: two of parts that each keep about one core busy, and one of the parts that mostly wait on
# their simulated hosts and servers (sim: 48 s of CPU in 135 s; molecule: 176 s in 330 s), which fill the cores'
# idle time. sanity and units share one lane: both build ansible-test's environment in $(TEST_ROOT). Each part's
# output comes in one piece when it ends (-O). The simulated hosts (CPU-bound) start when the two CPU lanes end, beside
# the rest of molecule. The other cores' sanity and units (CORE_LANES, each a copy of the tree and a venv of its own)
# go one core to each CPU lane, and galaxy-importer last in the lane of ee (`build` checks ee's files). What each
# part takes is in docs/measured.md.
test: venv wheelhouse
	@$(if $(NEW_PYTHON),,echo "make test: Python $(PY_VER): ansible-core $(VENV_CORE) only; no lane for $(filter-out $(VENV_CORE),$(CORE_LANES)) $(CORE)")
	$(MAKE) --no-print-directory -j3 test-lane-hosts test-lane-simhosts
	$(call test_parts,build)
	@echo "make test: all green (ansible-core $(VENV_CORE) on Python $(PY_VER); sanity and units also on $(or $(RUNNABLE_CORE_LANES),no other core))"

# The simulated hosts as soon as the two CPU lanes are done, beside the rest of molecule (whose hosts mostly wait:
# the cores were a third idle while it ran alone).
test-lane-simhosts: test-lane-ansible-test test-lane-others
	$(call test_parts,simhosts)

# Parts of make test one after the other (one make each: a make of several goals would run them side by side), each
# one's output in one piece when it ends (-O), then how long it took (the README's "Measured").
define test_parts
@for part in $(1); do began=$$(date +%s); $(MAKE) --no-print-directory -O $$part || exit 1; \
  echo "make test: $$part took $$(( $$(date +%s) - began )) s"; done
endef

# The other cores' sanity and units go half to each CPU lane.
test-lane-ansible-test:
	$(call test_parts,sanity units units-target-oldest \
	  $(foreach core,$(word 1,$(RUNNABLE_CORE_LANES)),sanity-core-$(core) units-core-$(core)))
test-lane-others:
	$(call test_parts,lint ee monitoring docs $(foreach core,$(wordlist 2,9,$(RUNNABLE_CORE_LANES)),sanity-core-$(core) units-core-$(core)) \
	  functional galaxy-importer)
test-lane-hosts:
	$(call test_parts,sim molecule)

# ansible-lint; mypy over plugins/ (mypy.ini: the collection's import name through the venv's link); the changelog.
lint: venv
	$(BIN)/ansible-lint --profile production
	$(BIN)/mypy
	$(MAKE) --no-print-directory changelog-lint

# A fresh copy of the tracked tree (plus new, not-ignored files) where ansible-test wants it.
define fresh_tree
rm -rf $@ && mkdir -p $@
git ls-files -z --cached --others --exclude-standard \
  | tar --null --ignore-failed-read -T - -cf - 2>/dev/null | tar -xf - -C $@
@# ansible-test lists content with git; a repository of its own keeps it from seeing this one's .gitignore.
cd $@ && git init -q && git add -A
endef
$(TEST_ROOT): FORCE
	$(fresh_tree)
$(CURDIR)/.tmp/core-%/ansible_collections/llmserve/sglang: FORCE
	$(fresh_tree)
FORCE:

# ansible-test bootstraps pip in each virtualenv it makes with a get-pip.py from ci-files.testing.ansible.com, out of
# reach here: .ci/get_pip_offline.py stands in for it, under the name of the pip release the core asks for.
# $(1): the venv with that ansible-core; $(2): the HOME its ansible-test runs with.
define offline_get_pip
mkdir -p $(2)/.ansible/test/cache
for pip in $$(sed -n "s/^ *pip='\([0-9.]*\)',\{0,1\}$$/\1/p" \
    $(1)/lib/python*/site-packages/ansible_test/_internal/python_requirements.py | tr . _); do \
  cp .ci/get_pip_offline.py $(2)/.ansible/test/cache/get_pip_$$pip.py; done
endef

sanity: venv $(TEST_ROOT)
	cd $(TEST_ROOT) && $(BIN)/ansible-test sanity --venv --python $(PY_VER) --color no

units: venv $(TEST_ROOT)
	cd $(TEST_ROOT) && $(BIN)/ansible-test units --venv --python $(PY_VER) --color no

# The modules' and module_utils' unit tests on the oldest Python the modules claim on the hosts (tests/config.yml);
# ansible-test runs only the tests of code that runs there. That Python from PATH or pyenv (.ci/find-python).
units-target-oldest: venv $(TEST_ROOT)
	@python=$$(.ci/find-python $(TARGET_PYTHON_OLDEST)) \
	  || { echo "units-target-oldest: no Python $(TARGET_PYTHON_OLDEST) (python$(TARGET_PYTHON_OLDEST) or pyenv's): NOT RUN"; exit 0; }; \
	  echo "units on the hosts' Python $(TARGET_PYTHON_OLDEST): $$python"; \
	  cd $(TEST_ROOT) && PATH=$(BIN):$$(dirname $$python):$$PATH \
	  $(BIN)/ansible-test units --venv --python $(TARGET_PYTHON_OLDEST) --color no

# Pattern targets are intermediate to make, which deletes them when it ends: the venvs and trees are kept.
.PRECIOUS: $(CURDIR)/.tmp/venv-core-%/.installed $(CURDIR)/.tmp/core-%/ansible_collections/llmserve/sglang
$(CURDIR)/.tmp/venv-core-%/.installed: constraints.txt | system-deps
	rm -rf $(@D) && $(PYTHON) -m venv $(@D)
	$(@D)/bin/pip install -q --disable-pip-version-check ansible-core==$* \
	  -c <(grep -v '^ansible-core==' constraints.txt) 2>&1 | $(PIP_NOISE)
	$(call offline_get_pip,$(@D),$(HOME)/.cache/llmserve-sglang/ansible-core-$*)
	touch $@

# sanity and units on another ansible-core (CORE_LANES), each in a copy of the tree of its own (they may run side by
# side): make sanity-core-2.20.10 units-core-2.20.10. Its sanity runs the tests whose verdict says whether the
# collection works on that core: they load the code (import, compile, ansible-doc, action-plugin-docs) or check it
# against that core's schemas (validate-modules, runtime-metadata). The rest read the same files on every core and
# run once, on the newest: the text checks (pep8, yamllint, shellcheck, quotes, line endings, the changelog
# fragments), and pylint, whose older cores' runs differ only by an older pylint release (3.3 on 2.19) and by
# checks the newest core keeps or tightens; without it an older core's sanity takes 42 s instead of 88 s.
CORE_SANITY_TESTS := action-plugin-docs ansible-doc compile import runtime-metadata validate-modules
CORE_ENV = HOME=$(HOME)/.cache/llmserve-sglang/ansible-core-$(1) PIP_CACHE_DIR=$(HOME)/.cache/pip \
  PATH=$(CURDIR)/.tmp/venv-core-$(1)/bin:$$PATH
sanity-core-%: $(CURDIR)/.tmp/venv-core-%/.installed $(CURDIR)/.tmp/core-%-sanity/ansible_collections/llmserve/sglang
	cd $(word 2,$^) && $(call CORE_ENV,$*) ansible-test sanity --venv --python $(PY_VER) --color no \
	  $(addprefix --test ,$(CORE_SANITY_TESTS))
# Its units are those of the code that runs on ansible-core's APIs: the modules (AnsibleModule), the action, filter
# and lookup plugins, plugin_utils' own files. module_utils and plugin_utils' rooms (its subfolders) import nothing of
# ansible-core (tests/unit/plugins/test_pure_rooms.py says so), so their tests give the same verdict on every core:
# they run on the newest (module_utils' also on the hosts' oldest Python).
CORE_UNIT_TESTS = $(filter-out tests/unit/plugins/module_utils/ tests/unit/plugins/plugin_utils/,$(wildcard tests/unit/plugins/*/)) \
  $(wildcard tests/unit/plugins/*.py) $(wildcard tests/unit/plugins/plugin_utils/*.py)
units-core-%: $(CURDIR)/.tmp/venv-core-%/.installed $(CURDIR)/.tmp/core-%-units/ansible_collections/llmserve/sglang
	cd $(word 2,$^) && $(call CORE_ENV,$*) ansible-test units --venv --python $(PY_VER) --color no $(CORE_UNIT_TESTS)
# Every other core's lanes this controller's Python can run (2.20 and later need 3.12 or later).
RUNNABLE_CORE_LANES := $(if $(NEW_PYTHON),$(CORE_LANES))
other-cores: $(foreach core,$(RUNNABLE_CORE_LANES),sanity-core-$(core) units-core-$(core))

# Two workers: its tests mostly wait on ansible-playbook processes, and the other lane's molecule on its hosts.
functional: venv
	$(BIN)/pytest -q -n 2 tests/functional

# The simulator on its own (local processes).
sim: venv
	$(BIN)/pytest -q tests/sim

# Debian's prometheus and prometheus-node-exporter packages, pinned by version and digest (tools/prometheus), into
# .tmp/prometheus: promtool for the alerting rules, prometheus and node_exporter for the watch's simulated host.
PROMETHEUS_DIR := $(CURDIR)/.tmp/prometheus
prometheus-debs:
	@$(PYTHON) tools/prometheus/fetch_debs.py $(PROMETHEUS_DIR)

# The alerting rules on the watch's metrics (monitoring/prometheus), checked and tested by promtool on fixtures.
monitoring: prometheus-debs
	$(PROMETHEUS_DIR)/root/usr/bin/promtool check rules monitoring/prometheus/llmserve-kv.rules.yml
	$(PROMETHEUS_DIR)/root/usr/bin/promtool test rules tests/monitoring/llmserve-kv.rules.test.yml

# The docs site: antsibull-docs renders the plugins' and roles' docs, Sphinx (docs/site/conf.py) builds them with
# README.md and the pages of docs/ (MyST) into .tmp/docs/build/html. Offline (no intersphinx), warnings as errors.
DOCS_VENV := $(CURDIR)/.tmp/docs-venv
DOCS_DIR := $(CURDIR)/.tmp/docs
$(DOCS_VENV)/.installed: .ci/docs/requirements.txt .ci/docs/constraints.txt | system-deps
	rm -rf $(DOCS_VENV) && $(PYTHON) -m venv $(DOCS_VENV)
	$(DOCS_VENV)/bin/pip install -q --disable-pip-version-check -r .ci/docs/requirements.txt -c .ci/docs/constraints.txt \
	  ansible-core==$(VENV_CORE) 2>&1 | $(PIP_NOISE)
	touch $@
docs: venv $(DOCS_VENV)/.installed
	rm -rf $(DOCS_DIR) && mkdir -p $(DOCS_DIR)/rst/docs $(DOCS_DIR)/rst/bench/results
	cp docs/site/index.rst README.md CHANGELOG.rst $(DOCS_DIR)/rst/
	cp docs/*.md $(DOCS_DIR)/rst/docs/
	cp bench/results/convergence.png $(DOCS_DIR)/rst/bench/results/
	$(PYTHON) docs/site/inventory.py docs/site/ansible-devel-refs.txt $(DOCS_DIR)/rst/ansible_devel.inv
	chmod og-w $(DOCS_DIR)/rst
	ANSIBLE_COLLECTIONS_PATH=$(COLLECTIONS) $(DOCS_VENV)/bin/antsibull-docs collection --use-current --fail-on-error \
	  --dest-dir $(DOCS_DIR)/rst llmserve.sglang
	$(DOCS_VENV)/bin/sphinx-build -q -W --keep-going -b html -c docs/site $(DOCS_DIR)/rst $(DOCS_DIR)/build/html
	@echo "docs: $(DOCS_DIR)/build/html/index.html"

# Simulated hosts (nspawn containers over ssh) with the simulator installed from the wheelhouse.
# Three workers, one test file each at a time (the files' hosts have their own prefixes; simhosts serialises the
# host changes): the hosts wait on Ansible and the simulator more than on the CPU (two files side by side left 38% of
# 2 cores idle, vmstat). The longest files first (tests/simhosts/conftest.py, FILE_SECONDS), in that order rather
# than pytest-xdist's by number of tests. Every test's time: .tmp/simhosts-junit.xml.
simhosts: venv wheelhouse prometheus-debs
	$(BIN)/pytest -q -n 3 --dist loadfile --no-loadscope-reorder --durations=15 --junitxml=.tmp/simhosts-junit.xml tests/simhosts

# Roles on simulated hosts: create, converge, idempotence, testinfra verify, destroy.
molecule: venv wheelhouse
	@for scenario in $(MOLECULE_SCENARIOS); do \
	  echo "molecule test -s $$scenario"; $(BIN)/molecule test -s $$scenario || exit 1; \
	done
	@# Debian 13 too, for the roles that claim it: the simulated host's root filesystem of that release.
	@for scenario in $(MOLECULE_SCENARIOS_TRIXIE); do \
	  echo "molecule test -s $$scenario on Debian 13"; SIM_SUITE=trixie $(BIN)/molecule test -s $$scenario || exit 1; \
	done

build: venv
	rm -rf .tmp/build && mkdir -p .tmp/build
	$(BIN)/ansible-galaxy collection build --output-path .tmp/build . 2>&1 | tee .tmp/build/log
	@! grep -qi warning .tmp/build/log || { echo "collection build printed warnings"; exit 1; }
	@! grep -qi "no matches\|does not exist" $(EE_DIR)/create.log || { echo "ansible-builder create misses a file"; exit 1; }

# The example execution environment (docs/awx/execution-environment.yml, docs/awx.md) beside the collection's tarball:
# its build context (ansible-builder create; no image is built: no podman or docker here), the tarball installed
# from that context as the image's galaxy stage installs it (requirements.yml, run in _build), and ansible-builder
# introspect on that install, which must list what the image gets from meta/execution-environment.yml.
EE_DIR := $(CURDIR)/.tmp/ee
ee: venv
	rm -rf $(EE_DIR) && mkdir -p $(EE_DIR)/dist
	$(BIN)/ansible-galaxy collection build --output-path $(EE_DIR)/dist . >/dev/null
	@! tar -tzf $(EE_DIR)/dist/llmserve-sglang-*.tar.gz | grep -E '(requirements-dev|constraints)\.txt|mypy\.ini|^\.ansible/' \
	  || { echo "the tarball ships development files"; exit 1; }
	cp docs/awx/execution-environment.yml $(EE_DIR)/
	cp $(EE_DIR)/dist/llmserve-sglang-*.tar.gz $(EE_DIR)/llmserve-sglang.tar.gz
	cd $(EE_DIR) && $(BIN)/ansible-builder create -f execution-environment.yml -c context \
	  --output-filename Containerfile 2>&1 | tee create.log
	@! grep -qi 'warning\|no matches\|does not exist' $(EE_DIR)/create.log || { echo "ansible-builder create warned"; exit 1; }
	grep -q 'ansible-galaxy collection install .*-r requirements.yml' $(EE_DIR)/context/Containerfile
	cd $(EE_DIR)/context/_build && ANSIBLE_COLLECTIONS_PATH=$(EE_DIR)/collections ANSIBLE_GALAXY_DISABLE_GPG_VERIFY=1 \
	  $(BIN)/ansible-galaxy collection install -r requirements.yml --collections-path $(EE_DIR)/collections
	$(BIN)/ansible-builder introspect --write-pip $(EE_DIR)/requirements.txt --write-bindep $(EE_DIR)/bindep.txt \
	  $(EE_DIR)/collections
	@for need in requirements.txt:matplotlib bindep.txt:openssh-clients bindep.txt:hostname; do \
	  grep -q "^$${need#*:}[ >=<]" $(EE_DIR)/$${need%%:*} || { echo "introspect does not list $${need#*:}"; exit 1; }; \
	done; echo "make ee: the execution environment's context is built and its requirements include matplotlib"

# --- release -----------------------------------------------------------------------------------------
# changelogs/changelog.yaml and CHANGELOG.rst for the version galaxy.yml names, from every fragment in
# changelogs/fragments (kept: a fragment merged before the release is published folds into it when this runs again).
# The release date stays the one changelog.yaml has for that version (today for a new one); CHANGELOG_DATE=YYYY-MM-DD
# sets it. docs/DEVELOPING.md, "Releasing".
COLLECTION_VERSION = $(shell sed -n 's/^version: *//p' galaxy.yml)
CHANGELOG_DATE ?=
changelog: venv
	date="$(CHANGELOG_DATE)"; [ -n "$$date" ] || date="$$($(BIN)/python -c 'import sys, yaml; \
	  releases = (yaml.safe_load(open("changelogs/changelog.yaml")) or {}).get("releases") or {}; \
	  print(releases.get(sys.argv[1], {}).get("release_date", ""))' $(COLLECTION_VERSION))"; \
	$(BIN)/antsibull-changelog release --version $(COLLECTION_VERSION) --date "$${date:-$$(date +%F)}" \
	  --update-existing --refresh --reload-plugins
	$(MAKE) --no-print-directory changelog-lint

# Fragments and changelog.yaml well-formed; while the first release (1.0.0) is prepared, no fragment fixes, breaks,
# deprecates or removes anything: there is nothing before it.
changelog-lint: venv
	$(BIN)/antsibull-changelog lint
	$(BIN)/antsibull-changelog lint-changelog-yaml changelogs/changelog.yaml
	@if [ "$(COLLECTION_VERSION)" = 1.0.0 ] && grep -lE '^(bugfixes|breaking_changes|deprecated_features|removed_features):' \
	    changelogs/fragments/*.y*ml; then \
	  echo "1.0.0 is the first release: those sections go into major_changes or minor_changes"; exit 1; fi

# Galaxy's import of the built tarball (galaxy-importer: ansible-doc on every plugin, ansible-lint as Galaxy runs it,
# the changelog), in a virtualenv of its own: its pins are not the project's. Fails on its errors and warnings, and
# on a plugin listed without documentation or twice (.ci/galaxy-importer/check_result.py).
IMPORTER_VENV := $(CURDIR)/.tmp/venv-importer
$(IMPORTER_VENV)/.installed: .ci/galaxy-importer/requirements.txt
	rm -rf $(IMPORTER_VENV) && $(PYTHON) -m venv $(IMPORTER_VENV)
	$(IMPORTER_VENV)/bin/pip install -q --disable-pip-version-check -r .ci/galaxy-importer/requirements.txt 2>&1 \
	  | $(PIP_NOISE)
	touch $@

galaxy-importer: build $(IMPORTER_VENV)/.installed
	rm -rf .tmp/importer && mkdir -p .tmp/importer
	cd .tmp/importer && env -u ANSIBLE_CONFIG -u ANSIBLE_COLLECTIONS_PATH PATH=$(IMPORTER_VENV)/bin:$$PATH \
	  GALAXY_IMPORTER_CONFIG=$(CURDIR)/.ci/galaxy-importer/galaxy-importer.cfg \
	  $(IMPORTER_VENV)/bin/python -m galaxy_importer.main $(CURDIR)/.tmp/build/llmserve-sglang-$(COLLECTION_VERSION).tar.gz \
	  > log 2>&1 || { cat log; exit 1; }
	grep -v "^Loading " .tmp/importer/log
	$(IMPORTER_VENV)/bin/python .ci/galaxy-importer/check_result.py .tmp/importer/log .tmp/importer/importer_result.json

# The benchmarks (bench/; each writes Markdown, JSON and a PNG under bench/results/; never asserted in tests).
# All four, one after the other (nothing else on the machine: they measure time); the whole run's wall time is written
# to bench/results/make-bench.md.
bench: venv wheelhouse
	@started=$$(date +%s); \
	$(MAKE) --no-print-directory bench-engine bench-prediction bench-convergence bench-fleet bench-watch bench-rollout || exit 1; \
	seconds=$$(( $$(date +%s) - started )); \
	printf '# make bench\n\nWall time %d min %d s on %s (%s cores), at %s.\n' $$((seconds / 60)) $$((seconds % 60)) \
	  "$$(uname -m)" "$$(nproc)" "$$(git rev-parse --short HEAD 2>/dev/null || echo '?')" > bench/results/make-bench.md; \
	cat bench/results/make-bench.md

# The log grammar's and the formula's speed; the formula against every startup log of tests/fixtures/logs.
bench-engine bench-prediction: bench-%: venv
	$(BIN)/python bench/bench_$*.py

# The tuner against SGLang's documented procedure and its default on 16 simulated deployments; the fleet's cost on
# 8 simulated hosts (root: systemd-nspawn).
# The headroom watch's own cost (CPU, memory, bytes written) on one simulated host under traffic.
# An upgrade's cost on 5 simulated hosts (one server, two servers on a host, a server on two hosts) across a release
# that changes memory, before and after issue 35 (root: systemd-nspawn).
bench-convergence bench-fleet bench-watch bench-rollout: bench-%: venv wheelhouse
	$(BIN)/python bench/bench_$*.py

# Three deployments of the convergence matrix, in under 10 minutes.
bench-quick: venv wheelhouse
	$(BIN)/python bench/bench_convergence.py --quick

# A new user's first run: `pip install ansible` unpinned on Python 3.12 or later, the tarball installed, site.yml and
# tune_kv.yml on one simulated host with no ansible.cfg; what they printed to bench/results/new-user.md. Not in make
# test: it downloads the newest ansible, which changes under it.
new-user: wheelhouse
	bench/new_user.sh

clean:
	rm -rf .tmp tests/output .pytest_cache kv_tune_reports

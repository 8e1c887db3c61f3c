# Simulated GPU hosts (tools/simhosts/README.md); the Makefile includes this file.
#   make sim-up [N=4] [PROFILE=field] [WHEELHOUSE=DIR]  create (or keep) N hosts sim1..simN, write inventories/sim/hosts.yml
#   make sim-down                                      remove them and everything they created
#   make sim-status                                    list the hosts
# The tool is Python standard library only: the system python3 runs it, with or without the venv.
N ?= 4
PROFILE ?= field
WHEELHOUSE ?= $(SIM_WHEELHOUSE)
SIMHOSTS := $(PYTHON) $(CURDIR)/tools/simhosts/simhosts.py

.PHONY: sim-up sim-down sim-status

sim-up:
	$(SIMHOSTS) up --count $(N) --profile $(PROFILE) $(if $(WHEELHOUSE),--wheelhouse $(WHEELHOUSE))

sim-down:
	$(SIMHOSTS) down

sim-status:
	$(SIMHOSTS) status

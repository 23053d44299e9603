# provision: developer entry points. `make demo` and `make test` are the two that matter.
SHELL := /bin/bash
# Python 3.11+ for .venv: python3.11 where installed (Debian 12, Ubuntu 22.04), else python3 (24.04).
PY ?= $(or $(shell command -v python3.11 2>/dev/null),python3)
HOST_PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
N ?= 2
PROFILE ?= h100-sxm-8
PERSONALITY ?= ubuntu2204
# Test processes (pytest-xdist). Lab tests on one host use about one core, so two processes keep a
# 2-core machine busy; --dist loadscope keeps each module on one process (the converge scenario is
# ordered, and module fixtures run once). TEST_JOBS=0 runs everything in one process.
TEST_JOBS ?= 2
PYTEST_PAR := -n $(TEST_JOBS) --dist loadscope

.PHONY: venv test unit lint roles demo lab-up lab-down lab-status clean host-packages host-packages-test bench bench-smoke

$(BIN)/provision: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	@touch $@

venv: $(BIN)/provision

# The host packages of lab/host-packages.txt, run first by `make demo` / `make test`: as root with
# apt it installs the missing ones; otherwise it prints the apt-get command and exits 4.
host-packages:
	$(HOST_PY) lab/prereqs.py --for demo

host-packages-test:
	$(HOST_PY) lab/prereqs.py --for test

unit: venv
	$(BIN)/pytest -q $(PYTEST_PAR) tests/unit

test: host-packages-test venv lint
	$(BIN)/pytest -q $(PYTEST_PAR) --durations=25 tests

lint: venv
	$(BIN)/ruff check provisioner tools lab plugins tests contrib bench roles/validation/files
	$(BIN)/python tools/rolegen.py --check
	$(BIN)/mypy
	$(BIN)/ansible-lint --profile production
	@for p in playbooks/*.yml; do \
	  $(BIN)/ansible-playbook --syntax-check -i localhost, $$p >/dev/null || exit 1; \
	done

# Role defaults, argument specs and README variable tables, from provisioner/data/role-variables.yml
# and the default stack (lint fails when they are stale)
roles: venv
	$(BIN)/python tools/rolegen.py

lab-up: venv
	$(BIN)/python -m lab up --hosts $(N) --profile $(PROFILE) --personality $(PERSONALITY)

lab-down: venv
	$(BIN)/python -m lab down

lab-status: venv
	$(BIN)/python -m lab status

demo: host-packages venv
	$(BIN)/python -m lab.demo --report-dir demo-report --personality $(PERSONALITY)

# Speed figures against the lab (docs/benchmarks.md): writes bench/results/<date>.json and the
# results table in docs/benchmarks.md. Knobs from the environment or the make command line:
# BENCH_REPEAT (3), BENCH_SIZES (1,4,8,16), BENCH_P1_HOSTS (4), BENCH_SKIP (P1,P2,P3,P4,records), ...
# (python -m bench --help). Niced: the lab shares the machine.
bench: venv
	nice -n 10 $(BIN)/python -m bench

# One host, one run, results in a temporary directory (CI runs it as tests/lab/test_bench_smoke.py)
bench-smoke: venv
	nice -n 10 $(BIN)/python -m bench --smoke

clean:
	rm -rf $(VENV) dist build demo-report .pytest_cache .ruff_cache .mypy_cache

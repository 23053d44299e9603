# provision: developer entry points. `make demo` and `make test` are the two that matter.
SHELL := /bin/bash
PY ?= python3.11
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

.PHONY: venv test unit lint demo lab-up lab-down lab-status clean

$(BIN)/provision: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	@touch $@

venv: $(BIN)/provision

unit: venv
	$(BIN)/pytest -q $(PYTEST_PAR) tests/unit

test: venv lint
	$(BIN)/pytest -q $(PYTEST_PAR) --durations=25 tests

lint: venv
	$(BIN)/ruff check provisioner lab tests
	$(BIN)/mypy
	$(BIN)/ansible-lint --profile production
	@for p in playbooks/*.yml; do \
	  ANSIBLE_ROLES_PATH=roles $(BIN)/ansible-playbook --syntax-check -i localhost, $$p >/dev/null || exit 1; \
	done

lab-up: venv
	$(BIN)/python -m lab up --hosts $(N) --profile $(PROFILE) --personality $(PERSONALITY)

lab-down: venv
	$(BIN)/python -m lab down

lab-status: venv
	$(BIN)/python -m lab status

demo: venv
	$(BIN)/python -m lab.demo --report-dir demo-report --personality $(PERSONALITY)

clean:
	rm -rf $(VENV) dist build demo-report .pytest_cache .ruff_cache .mypy_cache

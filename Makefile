# provision: developer entry points. `make demo` and `make test` are the two that matter.
SHELL := /bin/bash
PY ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
N ?= 2
PROFILE ?= h100-sxm-8

.PHONY: venv test unit lint demo lab-up lab-down lab-status clean

$(BIN)/provision: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	@touch $@

venv: $(BIN)/provision

unit: venv
	$(BIN)/pytest -q tests/unit

test: venv lint
	$(BIN)/pytest -q --durations=25 tests

lint: venv
	$(BIN)/ruff check provisioner tests
	$(BIN)/mypy
	$(BIN)/ansible-lint --profile production playbooks roles
	@for p in playbooks/*.yml; do \
	  ANSIBLE_ROLES_PATH=roles $(BIN)/ansible-playbook --syntax-check -i localhost, $$p >/dev/null || exit 1; \
	done

lab-up: venv
	$(BIN)/provision lab up --hosts $(N) --profile $(PROFILE)

lab-down: venv
	$(BIN)/provision lab down

lab-status: venv
	$(BIN)/provision lab status

demo: venv
	$(BIN)/python -m provisioner.lab.demo --report-dir demo-report

clean:
	rm -rf $(VENV) dist build demo-report .pytest_cache .ruff_cache .mypy_cache

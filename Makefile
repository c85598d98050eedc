# The two commands: `make demo` and `make test`. Everything else is what they need.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install demo test test-fast bench clean

install: $(STAMP)

# Rebuilt only when the lock file or the project metadata changes.
$(STAMP): requirements.lock pyproject.toml
	@echo "== installing $(VENV) from requirements.lock"
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@infra/with-heartbeat.sh "installing pip" $(PY) -m pip install -q --upgrade pip
	@infra/with-heartbeat.sh "installing requirements.lock" $(PY) -m pip install -q -r requirements.lock
	@infra/with-heartbeat.sh "installing rmq-recon" $(PY) -m pip install -q --no-deps -e .
	@sha256sum requirements.lock pyproject.toml > $(STAMP)

demo: install
	@$(VENV)/bin/rmq-recon demo

test: install
	@bash infra/install-debian-deps.sh
	@bash infra/run-tests.sh

test-fast: install
	@$(PY) -m pytest -q -m "not integration"

clean:
	rm -rf var demo .pytest_cache

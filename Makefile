PY ?= $(shell command -v python3.11 2>/dev/null || command -v python3)
VENV := .venv
PYTHON := $(VENV)/bin/python
MANAGE := $(PYTHON) manage.py
STAMP := $(VENV)/.installed

.PHONY: venv migrate run test lint fmt bench

venv: $(STAMP)

# Reinstall only when pyproject.toml changes; the stamp makes re-runs instant.
$(STAMP): pyproject.toml
	test -x $(PYTHON) || $(PY) -m venv $(VENV)
	$(VENV)/bin/pip install -e '.[dev]'
	touch $(STAMP)

migrate: venv
	$(MANAGE) migrate --noinput

# load_demo does not exist yet: run it only if `help` knows it, but let a real failure of it stop us.
run: venv migrate
	if $(MANAGE) help load_demo >/dev/null 2>&1; then $(MANAGE) load_demo; fi
	exec scripts/run.sh

test: venv
	$(VENV)/bin/pytest -q -p no:cacheprovider $(PYTEST_ARGS)

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

fmt: venv
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

# Benchmarks on a private database (dropped afterwards): PostgreSQL + Redis when DATABASE_URL /
# REDIS_URL are set, SQLite + in-memory otherwise. Writes bench/results.json.
bench: venv
	$(PYTHON) -m bench.run

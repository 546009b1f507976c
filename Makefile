PY ?= $(shell command -v python3.11 2>/dev/null || command -v python3)
VENV := .venv
PYTHON := $(VENV)/bin/python
MANAGE := $(PYTHON) manage.py
STAMP := $(VENV)/.installed
DEV_STAMP := $(VENV)/.dev-installed

.PHONY: venv dev migrate run test lint fmt bench soak

venv: $(STAMP)

# Installs go through uv (PyPI's `uv`, put into the venv by its pip) where it can be had: the
# same pyproject.toml, resolved and installed with bytecode in ~20 s where pip took ~50 s on a
# fresh clone. Where uv cannot be installed, pip does it. $(call INSTALL,<pip arguments>)
UV := $(VENV)/bin/uv
INSTALL = if test -x $(UV) || $(VENV)/bin/pip install -q uv; \
	then $(UV) pip install --python $(PYTHON) --compile-bytecode $(1); \
	else $(VENV)/bin/pip install $(1); fi

# What running needs, nothing more (`make run` on a fresh clone: no Playwright, mypy,
# schemathesis). Reinstall only when pyproject.toml changes; the stamp makes re-runs instant.
$(STAMP): pyproject.toml
	test -x $(PYTHON) || $(PY) -m venv $(VENV)
	$(call INSTALL,-e .)
	touch $(STAMP)

# The test and lint tools (the `dev` extra), on top, by `make test`, `make lint`, `make fmt`.
dev: $(DEV_STAMP)

$(DEV_STAMP): $(STAMP) pyproject.toml
	$(call INSTALL,-e '.[dev]')
	touch $(DEV_STAMP)

migrate: venv
	$(MANAGE) migrate --noinput

# The demo accounts (admin/admin, ...) only on a development setup: with DEBUG on, on a fresh
# database (no user yet), or on every start with AGENTCONSOLE_DEMO=1 (never: AGENTCONSOLE_DEMO=0).
# With DEBUG off nothing is loaded, and no process (web, worker, beat) starts while a demo
# password works (agentconsole/access/demo_passwords.py).
run: venv migrate
	$(MANAGE) load_demo --auto
	exec scripts/run.sh

# Parallel test processes (pytest-xdist): one per core and one more, at most 4 (each makes its
# own test database and Redis database: tests/support/session/parallel.py). The one more because
# many tests wait on processes they started (workers, browsers, servers): with one per core a
# 2-core machine stood idle a quarter of the time. TEST_PROCESSES=1: in this one process,
# serially. The tests that share a module's worker or a browser folder's stack stay in one
# process (the scheduler in tests/conftest.py).
TEST_PROCESSES ?= $(shell n=$$(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null \
	|| echo 1); echo $$((n + 1 > 4 ? 4 : n + 1)))
PARALLEL := $(if $(filter 0 1,$(TEST_PROCESSES)),-n 0,-n $(TEST_PROCESSES))

test: dev
	$(VENV)/bin/pytest -q -p no:cacheprovider $(PARALLEL) $(PYTEST_ARGS)

# mypy: strict on the domain core, the django-stubs plugin on the rest (config in pyproject.toml).
lint: dev
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

fmt: dev
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

# Benchmarks on a private database (dropped afterwards): PostgreSQL + Redis when DATABASE_URL /
# REDIS_URL are set, SQLite + in-memory otherwise. Writes bench/results.json. The `bench` extra
# (LangGraph and its PostgreSQL checkpointers, the peer of bench/peer.py and
# bench/runs_in_flight.py) is installed first, once per change of pyproject.toml.
# BENCH=runs_in_flight make bench: only that one.
BENCH_STAMP := $(VENV)/.bench-installed

# (A comma inside $(call ...) would split the argument: the extras are named through a variable.)
BENCH_EXTRAS := -e '.[dev,bench]'

$(BENCH_STAMP): $(STAMP) pyproject.toml
	$(call INSTALL,$(BENCH_EXTRAS))
	touch $(BENCH_STAMP)

bench: venv $(BENCH_STAMP)
	$(PYTHON) -m bench.run

# Soak: runs over HTTP on PostgreSQL + Redis (DATABASE_URL / REDIS_URL, default the local servers)
# while worker processes are killed with SIGKILL; a private database, dropped afterwards. Sizes:
# SOAK_RUNS=200 SOAK_KILLS=100 SOAK_SECONDS=180. Writes soak/results.json; exit 1 if a check fails.
soak: venv
	$(PYTHON) -m soak

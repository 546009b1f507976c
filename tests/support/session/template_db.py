"""One migrated PostgreSQL database per test run, copied for every database the run makes.

Each parallel test process made its test database by running the project's migrations (~2.5 s
of CPU in the process, and PostgreSQL's own for the DDL), and each browser test stack ran
``manage.py migrate`` on its private database again. Now the first that needs one migrates a
*template* once per run (``manage.py migrate`` into a fresh database, under a PostgreSQL
advisory lock, so parallel processes wait for it instead of building it twice), and every
database is a copy of it (``CREATE DATABASE ... TEMPLATE``, a file copy). Django's test database
creation takes the template from ``TEST["TEMPLATE"]`` and still runs ``migrate``, which then
finds nothing to do; the browser stack runs none on its copy (tests/browser/conftest.py).

The template is named by the run: the process that starts the run chooses the name
(``choose``, from ``tests/conftest.py``), parallel processes inherit it in ``TEMPLATE_ENV``, and
that first process drops it at the end (``drop``). It accepts no connections, since a copy
cannot start while anything is connected to its template.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

from bench.support.harness import database_on_same_server, on_postgres

__all__ = ["TEMPLATE_ENV", "choose", "drop", "ensure", "on_postgres"]

TEMPLATE_ENV = "AGENTCONSOLE_TEST_TEMPLATE_DB"
ROOT = Path(__file__).resolve().parents[3]


def choose() -> str:
    """A new template name for the run this process starts (its parallel processes find it in
    their environment); never one inherited, which another run would drop."""
    os.environ[TEMPLATE_ENV] = f"agentconsole_template_{uuid.uuid4().hex[:12]}"
    return os.environ[TEMPLATE_ENV]


def ensure(url: str) -> str:
    """The run's template on ``url``'s server, migrated (built here if no process has yet);
    returns its name."""
    import psycopg

    name = os.environ[TEMPLATE_ENV]
    with psycopg.connect(database_on_same_server(url, "postgres"), autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(hashtext(%s))", (name,))
        try:
            if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
                return name
            building = f"{name}_building"
            conn.execute(f'DROP DATABASE IF EXISTS "{building}"')
            conn.execute(f'CREATE DATABASE "{building}"')
            _migrate(database_on_same_server(url, building))
            conn.execute(f'ALTER DATABASE "{building}" RENAME TO "{name}"')
            conn.execute(f'ALTER DATABASE "{name}" WITH IS_TEMPLATE true ALLOW_CONNECTIONS false')
            return name
        finally:
            conn.execute("SELECT pg_advisory_unlock(hashtext(%s))", (name,))


def _migrate(url: str) -> None:
    env = {**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "agentconsole.settings"}
    done = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), "migrate", "--noinput", "-v0"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"migrating the test template failed:\n{done.stderr[-3000:]}")


def drop(url: str) -> None:
    """Drop the run's template and a half-built one (the end of the run)."""
    import psycopg

    name = os.environ.get(TEMPLATE_ENV)
    if not name:
        return
    with psycopg.connect(database_on_same_server(url, "postgres"), autocommit=True) as conn:
        for db in (name, f"{name}_building"):
            if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (db,)).fetchone():
                conn.execute(f'ALTER DATABASE "{db}" WITH IS_TEMPLATE false')
                conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')

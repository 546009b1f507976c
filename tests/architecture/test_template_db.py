"""On PostgreSQL each test database is a copy of the run's migrated template
(tests/support/session/template_db.py): fully migrated, the template itself closed to
connections, built once per run."""

from __future__ import annotations

import os

import pytest
from django.db import connection
from django.db.migrations.loader import MigrationLoader

from tests.support.races import require_postgres
from tests.support.session import template_db

pytestmark = pytest.mark.django_db


def _database(name: str) -> tuple[int, bool, bool] | None:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT oid, datistemplate, datallowconn FROM pg_database WHERE datname = %s", [name]
        )
        row = cursor.fetchone()
    return None if row is None else (row[0], row[1], row[2])


def test_the_test_database_is_a_migrated_copy_of_the_runs_template() -> None:
    require_postgres()
    name = os.environ[template_db.TEMPLATE_ENV]
    assert connection.settings_dict["TEST"]["TEMPLATE"] == name
    _oid, is_template, allows_connections = _database(name) or (0, False, True)
    assert (is_template, allows_connections) == (True, False)
    # Every migration of the project is applied here, as a migrated database has them.
    loader = MigrationLoader(connection)
    assert set(loader.graph.leaf_nodes()) <= loader.applied_migrations.keys()
    assert len(loader.applied_migrations) == len(loader.disk_migrations)


def test_a_second_ask_takes_the_template_as_it_is() -> None:
    require_postgres()
    name = os.environ[template_db.TEMPLATE_ENV]
    before = _database(name)
    assert template_db.ensure(os.environ["DATABASE_URL"]) == name
    assert _database(name) == before
    assert _database(f"{name}_building") is None

"""Emptying the test database after a transactional test, without rebuilding what ``migrate`` made.

Django's ``TransactionTestCase`` (pytest-django's ``transactional_db``, ``live_server`` and
``django_db(transaction=True)``) ends every test with ``manage.py flush``: it truncates every
table, the content types and permissions too, then sends ``post_migrate`` so that
``contenttypes`` and ``auth`` create them again, one app at a time (about a hundred queries and
the inserts of every permission). That was 80 % of a transactional test's teardown, and the suite
has hundreds of them (issue 25 item 8: CI's time).

Here the flush leaves the two tables ``post_migrate`` fills alone and sends no ``post_migrate``:
the rows stay exactly as the test database's ``migrate`` made them, which is what the signal
would have made again. Every other table is emptied as before. Nothing in the project writes
content types or permissions (the admin shows its models to superusers only:
agentconsole/accounts.py), and nothing else listens to ``post_migrate``; a test that did
either would see the rows left by an earlier test, so ``KEPT`` must stay this short.

On PostgreSQL, as a superuser (CI's ``postgres``), the tables are emptied with ``DELETE`` rather
than ``TRUNCATE``: a ``TRUNCATE`` of the 37 tables gives each a new file and took 250-500 ms a
test on a busy machine, the ``DELETE`` of the few rows a test leaves 10 ms. The deletes run with
``session_replication_role = replica`` for their transaction, so, as with ``TRUNCATE``, neither
the foreign keys' order nor the trace's append-only trigger (runs/migrations/0007) stands in the
way; every table but ``KEPT`` is emptied, and nothing in ``KEPT`` points at them, so no row is
left pointing at one that is gone. Anywhere else (SQLite, a role that may not set that): Django's
``TRUNCATE`` statements.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# Tables only ``post_migrate`` writes (django.contrib.contenttypes, django.contrib.auth).
KEPT = frozenset({"django_content_type", "auth_permission"})


def flush_keeping_migrate_rows(test: Any) -> None:
    """``TransactionTestCase._fixture_teardown`` for this suite: ``flush`` without ``KEPT`` and
    without ``post_migrate`` (see the module docstring). A test case that asks for
    ``available_apps`` or ``serialized_rollback`` (none here) gets Django's own."""
    from django.core.management.color import no_style
    from django.db import connections

    for db_name in test._databases_names(include_mirrors=False):
        connection = connections[db_name]
        tables = [
            table
            for table in connection.introspection.django_table_names(
                only_existing=True, include_views=False
            )
            if table not in KEPT
        ]
        if _may_skip_triggers(connection):
            _delete_rows(connection, tables)
        else:
            statements = connection.ops.sql_flush(
                no_style(), tables, reset_sequences=False, allow_cascade=False
            )
            connection.ops.execute_sql_flush(statements)


def _may_skip_triggers(connection: Any) -> bool:
    """PostgreSQL, and a role that may set ``session_replication_role`` (a superuser)."""
    if connection.vendor != "postgresql":
        return False
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('is_superuser')")
        return bool(cursor.fetchone()[0] == "on")


def _delete_rows(connection: Any, tables: list[str]) -> None:
    """Every row of ``tables`` deleted in one transaction, triggers and foreign-key checks off
    for it (see the module docstring)."""
    from django.db import transaction

    with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
        cursor.execute("SET LOCAL session_replication_role = replica")
        for table in tables:
            cursor.execute(f"DELETE FROM {connection.ops.quote_name(table)}")  # noqa: S608


def teardown_for(original: Callable[[Any], None]) -> Callable[[Any], None]:
    """The teardown to install in place of ``original`` (Django's): ours, unless the test case
    is one Django's handles differently."""

    def teardown(test: Any) -> None:
        if test.available_apps is not None or test.serialized_rollback:
            original(test)
        else:
            flush_keeping_migrate_rows(test)

    return teardown

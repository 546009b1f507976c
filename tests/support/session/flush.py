"""Emptying the test database after a transactional test, on PostgreSQL.

Django's ``TransactionTestCase`` empties every table after each test with one ``TRUNCATE`` and
then emits ``post_migrate``, which writes the content types and permissions back (contenttypes,
auth). The suite has ~500 such tests; each paid ~120 ms for the TRUNCATE (PostgreSQL replaces
every table's and index's files) and ~80 ms of ``create_permissions`` in the test process.

``empty_database`` deletes the rows of every table but those two instead, in one transaction
(Django's foreign keys are deferred, so any order), and keeps the content types and permissions
that ``post_migrate`` would have written back. The end state is Django's: every other table is
empty, sequences go on. Django's own flush runs after a process's first transactional test
(the two tables' row counts and the list of tables after it are the reference, ``Reference``),
where a test changed those counts since, where a test asked for something this does not do
(``available_apps``, ``serialized_rollback``, ``reset_sequences``), and on another database.
Installed for the whole suite by ``tests/conftest.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import connections, transaction
from django.test import TransactionTestCase

# Written back by post_migrate after Django's flush: kept here instead.
KEPT = ("django_content_type", "auth_permission")

_django_teardown = TransactionTestCase._fixture_teardown


@dataclass(frozen=True)
class Reference:
    """Per database, taken after Django's own flush: the two tables' row counts, and the
    statement that empties every other table (the model tables' own names, quoted)."""

    counts: tuple[int, ...]
    deletes: str


_references: dict[str, Reference] = {}


def _counts(cursor: Any) -> tuple[int, ...]:
    cursor.execute(" UNION ALL ".join(f"SELECT count(*) FROM {t}" for t in KEPT))  # noqa: S608
    return tuple(row[0] for row in cursor.fetchall())


def remember_kept(alias: str) -> None:
    """The reference, as Django's flush and ``post_migrate`` just left the database."""
    connection = connections[alias]
    quote = connection.ops.quote_name
    tables = sorted(
        set(connection.introspection.django_table_names(only_existing=True)) - set(KEPT)
    )
    with connection.cursor() as cursor:
        counts = _counts(cursor)
    deletes = "; ".join(f"DELETE FROM {quote(t)}" for t in tables)  # noqa: S608
    _references[alias] = Reference(counts, deletes)


def empty_database(alias: str) -> bool:
    """Delete every row but the content types and permissions; False (nothing done) where
    Django's flush must run instead (another vendor, no reference yet, or those two tables'
    counts changed since)."""
    connection = connections[alias]
    reference = _references.get(alias)
    if connection.vendor != "postgresql" or reference is None:
        return False
    with transaction.atomic(using=alias), connection.cursor() as cursor:
        if _counts(cursor) != reference.counts:
            return False
        cursor.execute(reference.deletes)
    return True


def _fixture_teardown(self: TransactionTestCase) -> None:
    plain = (
        self.available_apps is None
        and not self.serialized_rollback
        and not getattr(self, "reset_sequences", False)
    )
    aliases = self._databases_names(include_mirrors=False)
    for alias in aliases:
        if not (plain and empty_database(alias)):
            _django_teardown(self)
            for flushed in aliases:
                if connections[flushed].vendor == "postgresql":
                    remember_kept(flushed)
            return


def install() -> None:
    TransactionTestCase._fixture_teardown = _fixture_teardown  # type: ignore[method-assign]

"""A step's reads, and a transaction's writes, each in one round trip.

A step's commit is a handful of small writes (a compare-and-set, a few inserts, a conditional
update or two). Sent one by one, each waits for the database's answer before the next leaves:
the step pays a network round trip and Django's query building per write. Here every write is a
plain statement built from the models' own field definitions (the same values Django would
send), and on PostgreSQL they go out together in psycopg's pipeline mode. SQLite (the embedded
default) runs them one after another.

Two ways to send writes:

- ``run`` inside the caller's ``transaction.atomic`` block: one round trip for the writes, row
  counts read once all have run; callers check them and roll back by raising. (The block itself
  costs two more: psycopg waits for its BEGIN in pipeline mode, and its COMMIT goes after the
  counts were checked.)
- ``transaction``, when there is no caller's transaction: BEGIN, the writes and COMMIT in one
  round trip. The database checks each ``expect_one`` itself and fails the transaction when
  one is unmet, before COMMIT; nothing of a failed one stays.

Reads work the same way (``select``, ``fetch``): a step reads its run row, grants,
confirmations and working memory together, as plain tuples decoded by the fields that hold them.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import DEFAULT_DB_ALIAS, DataError, IntegrityError, connections, models
from django.db.models.fields import AutoFieldMixin
from django.db.transaction import atomic, set_rollback
from psycopg.pq import TransactionStatus


@dataclass(frozen=True)
class Write:
    """One statement; ``expect_one`` names what it means when it changes no row or several."""

    sql: str
    params: Sequence[Any] = ()
    expect_one: str | None = None


@dataclass
class Ran:
    """What a batch did: each statement's row count, the integrity error that stopped it, the
    statement whose ``expect_one`` the database found unmet (``transaction`` has them checked
    there), and whether the batch's own transaction committed."""

    rowcounts: list[int] = field(default_factory=list)
    error: IntegrityError | None = None
    unmet: int | None = None
    committed: bool = False

    def missed_at(self, writes: Sequence[Write]) -> int | None:
        """The index of the first statement with an ``expect_one`` that did not change exactly
        one row."""
        if self.unmet is not None:
            return self.unmet
        for i, (write, count) in enumerate(zip(writes, self.rowcounts, strict=False)):
            if write.expect_one is not None and count != 1:
                return i
        return None

    def missed(self, writes: Sequence[Write]) -> str | None:
        """The ``expect_one`` of the first statement that did not change exactly one row."""
        i = self.missed_at(writes)
        return None if i is None else writes[i].expect_one


def quote(name: str) -> str:
    return connections[DEFAULT_DB_ALIAS].ops.quote_name(name)


def _db() -> Any:
    # The thread's connection, looked up once per statement (the ``connection`` proxy looks it
    # up again on every attribute).
    return connections[DEFAULT_DB_ALIAS]


def _inserted_fields(meta: Any) -> list[models.Field]:
    # What Django's own INSERT names: every concrete column but an automatic primary key.
    return [
        f
        for f in meta.concrete_fields
        if not (f.primary_key and isinstance(f, AutoFieldMixin)) and not f.generated
    ]


# A where clause's shape: (field name, None for an equality or n for an IN of n values).
Shape = tuple[tuple[str, int | None], ...]


def _shape(where: dict[str, Any]) -> Shape:
    return tuple((k, len(v) if isinstance(v, (list, tuple)) else None) for k, v in where.items())


def _where_params(meta: Any, where: dict[str, Any], db: Any) -> list[Any]:
    params: list[Any] = []
    for name, value in where.items():
        f = meta.get_field(name)
        values = value if isinstance(value, (list, tuple)) else (value,)
        params.extend(f.get_db_prep_value(v, db) for v in values)
    return params


def _where_sql(meta: Any, shape: Shape) -> str:
    clauses = []
    for name, n in shape:
        column = quote(meta.get_field(name).column)
        clauses.append(f"{column} = %s" if n is None else f"{column} IN ({', '.join(['%s'] * n)})")
    return " AND ".join(clauses)


# The statements' text depends only on their shape: built once per shape (and vendor), so a
# step spends no time quoting names. Every value is a bound parameter.
@functools.lru_cache(maxsize=256)
def _insert_sql(vendor: str, model: type[models.Model], rows: int) -> str:
    meta: Any = model._meta
    fields = _inserted_fields(meta)
    row = "(" + ", ".join(["%s"] * len(fields)) + ")"
    columns = ", ".join(quote(str(f.column)) for f in fields)
    table = quote(meta.db_table)
    return f"INSERT INTO {table} ({columns}) VALUES " + ", ".join([row] * rows)  # noqa: S608 -- names from the model


@functools.lru_cache(maxsize=256)
def _update_sql(
    vendor: str, model: type[models.Model], names: tuple[str, ...], where: Shape
) -> str:
    meta: Any = model._meta
    sets = ", ".join(f"{quote(meta.get_field(n).column)} = %s" for n in names)
    return f"UPDATE {quote(meta.db_table)} SET {sets} WHERE {_where_sql(meta, where)}"  # noqa: S608 -- names from the model


@functools.lru_cache(maxsize=256)
def _delete_sql(vendor: str, model: type[models.Model], where: Shape, keep: str, n: int) -> str:
    meta: Any = model._meta
    sql = f"DELETE FROM {quote(meta.db_table)} WHERE {_where_sql(meta, where)}"  # noqa: S608 -- names from the model
    if n:
        sql += f" AND {quote(meta.get_field(keep).column)} NOT IN ({', '.join(['%s'] * n)})"
    return sql


def insert(objs: Sequence[models.Model]) -> Write:
    """A multi-row INSERT of unsaved instances of one model, values prepared as ``save`` would
    (``pre_save`` fills ``auto_now_add``; each field adapts its value to the database)."""
    db = _db()
    model = type(objs[0])
    fields = _inserted_fields(model._meta)
    params = [f.get_db_prep_save(f.pre_save(obj, True), db) for obj in objs for f in fields]
    return Write(_insert_sql(db.vendor, model, len(objs)), params)


def update(
    model: type[models.Model],
    values: dict[str, Any],
    where: dict[str, Any],
    *,
    expect_one: str | None = None,
) -> Write:
    """``UPDATE … SET values WHERE where``, values prepared by their fields; a ``where`` value
    that is a list or tuple is ``IN``, any other an equality."""
    db = _db()
    meta: Any = model._meta
    params = [meta.get_field(n).get_db_prep_save(v, db) for n, v in values.items()]
    params += _where_params(meta, where, db)
    sql = _update_sql(db.vendor, model, tuple(values), _shape(where))
    return Write(sql, params, expect_one)


def delete(
    model: type[models.Model], where: dict[str, Any], *, keep: tuple[str, list[Any]]
) -> Write:
    """``DELETE … WHERE where AND keep's column NOT IN keep's values`` (every row matching
    ``where`` when there is nothing to keep)."""
    db = _db()
    meta: Any = model._meta
    name, values = keep
    params = _where_params(meta, where, db)
    params += [meta.get_field(name).get_db_prep_value(v, db) for v in values]
    return Write(_delete_sql(db.vendor, model, _shape(where), name, len(values)), params)


def run(writes: Sequence[Write]) -> Ran:
    """Run ``writes`` in order inside the caller's transaction; one round trip on PostgreSQL.

    An integrity error does not escape: it is returned with the row counts of the statements
    before it, so the caller can tell a lost race (its compare-and-set matched nothing, and the
    keys it wrote after it were already taken) from a broken key."""
    db = _db()
    if not db.in_atomic_block:
        raise RuntimeError("a batch of writes needs the caller's transaction")
    ran = Ran()
    ran.rowcounts, _ = _send(db, [(w.sql, w.params) for w in writes], ran)
    return ran


def transaction(writes: Sequence[Write]) -> Ran:
    """Run ``writes`` as a transaction of their own, and commit it.

    On PostgreSQL ``BEGIN``, the writes and ``COMMIT`` leave together: one round trip, where a
    transaction in a ``transaction.atomic`` block costs three (psycopg waits for the answer to
    its BEGIN in pipeline mode, and the COMMIT waits until the writes' row counts were checked).
    Each ``expect_one`` is checked by the database instead: an unmet one fails the statement,
    the server skips the rest, COMMIT included, and the transaction is rolled back (``unmet``
    names it). An integrity error ends it the same way (``error``). Either way nothing of it
    stays. Elsewhere (SQLite) the writes run in an atomic block, rolled back on the same
    grounds."""
    db = _db()
    if db.in_atomic_block:
        raise RuntimeError("a transaction of its own cannot run inside the caller's")
    ran = Ran()
    if db.vendor != "postgresql":
        with atomic():
            ran.rowcounts, _ = _send(db, [(w.sql, w.params) for w in writes], ran)
            ran.committed = ran.error is None and ran.missed_at(writes) is None
            set_rollback(not ran.committed)
        return ran
    statements: list[tuple[str, Sequence[Any]]] = [("BEGIN", ())]
    statements += [(_expecting(w.sql) if w.expect_one else w.sql, w.params) for w in writes]
    statements.append(("COMMIT", ()))
    try:
        counts, failed = _send(db, statements, ran)
    finally:
        raw = db.connection
        if raw is not None and raw.info.transaction_status in OPEN:
            # A statement failed: the server skipped the rest, COMMIT included. (A connection
            # that broke is left as it is: its error is the one to see.)
            with db.wrap_database_errors:
                raw.rollback()
    ran.rowcounts = counts[1:-1]
    ran.committed = not failed
    if failed and ran.error is None:
        ran.unmet = ran.rowcounts.index(-1)
    return ran


def _send(
    db: Any, statements: Sequence[tuple[str, Sequence[Any]]], ran: Ran
) -> tuple[list[int], bool]:
    """Execute ``statements`` in order (pipelined on PostgreSQL); return their row counts and
    whether one failed. After the pipeline's sync every statement before a failed one has its
    count; the failed one and those after it report -1. An integrity error is kept in ``ran``;
    an unmet expectation (``_expecting``) only fails."""
    cursors = [db.cursor() for _ in statements]
    failed = True
    try:
        with db.wrap_database_errors:
            pipelined = db.vendor == "postgresql"
            pipeline = db.connection.pipeline() if pipelined else contextlib.nullcontext()
            with pipeline:
                for cursor, (sql, params) in zip(cursors, statements, strict=True):
                    cursor.execute(sql, params)
        failed = False
    except IntegrityError as exc:
        ran.error = exc
    except DataError as exc:
        if getattr(exc.__cause__, "sqlstate", None) != UNMET:
            raise
    finally:
        counts = [c.rowcount for c in cursors]
        for cursor in cursors:
            cursor.close()
    return counts, failed


IDLE = TransactionStatus.IDLE
OPEN = (TransactionStatus.INTRANS, TransactionStatus.INERROR)

# What an unmet ``expect_one`` raises in a transaction of its own (``_expecting``):
# division_by_zero.
UNMET = "22012"


@functools.lru_cache(maxsize=256)
def _expecting(sql: str) -> str:
    # The statement, failing when it changed a number of rows other than one: the data-modifying
    # CTE runs once, and 1 / 0 raises division_by_zero (not a constant: the planner cannot fold
    # it away).
    return f"WITH w AS ({sql} RETURNING 1) SELECT 1 / (count(*) = 1)::int FROM w"  # noqa: S608 -- our own statement


@dataclass(frozen=True)
class Read:
    """One SELECT; ``decoders`` turn each column's database value into the field's value."""

    sql: str
    params: Sequence[Any]
    decoders: tuple[Callable[[Any], Any] | None, ...]


def _decoder(f: models.Field) -> Callable[[Any], Any] | None:
    # JSON columns come back as text on both vendors (Django's own loaders); the field decodes.
    decode = getattr(f, "from_db_value", None)
    if decode is None:
        return None
    return lambda value: decode(value, None, _db())


@functools.lru_cache(maxsize=256)
def _select(
    vendor: str,
    model: type[models.Model],
    columns: tuple[str, ...],
    where: Shape,
    order_by: tuple[str, ...],
    limit: int | None,
) -> tuple[str, tuple[Callable[[Any], Any] | None, ...]]:
    meta: Any = model._meta
    fields = [meta.get_field(c) for c in columns]
    names = ", ".join(quote(f.column) for f in fields)
    sql = f"SELECT {names} FROM {quote(meta.db_table)} WHERE {_where_sql(meta, where)}"  # noqa: S608 -- names from the model
    if order_by:
        # "-name": descending, as in Django's order_by.
        sql += " ORDER BY " + ", ".join(
            quote(meta.get_field(c.lstrip("-")).column) + (" DESC" if c.startswith("-") else "")
            for c in order_by
        )
    if limit is not None:
        sql += f" LIMIT {int(limit)}"
    return sql, tuple(_decoder(f) for f in fields)


def select(
    model: type[models.Model],
    columns: Sequence[str],
    where: dict[str, Any],
    *,
    order_by: Sequence[str] = (),
    limit: int | None = None,
) -> Read:
    """``SELECT columns FROM model's table WHERE where [ORDER BY …] [LIMIT …]``: a list or tuple
    value in ``where`` is ``IN`` (never empty), any other an equality; ``order_by`` names
    fields, "-name" descending."""
    db = _db()
    shape = (db.vendor, model, tuple(columns), _shape(where), tuple(order_by), limit)
    sql, decoders = _select(*shape)
    return Read(sql, _where_params(model._meta, where, db), decoders)


def fetch(reads: Sequence[Read]) -> list[list[tuple[Any, ...]]]:
    """Each read's rows, in order; one round trip on PostgreSQL (pipeline mode)."""
    db = _db()
    cursors = [db.cursor() for _ in reads]
    try:
        with db.wrap_database_errors:
            pipelined = db.vendor == "postgresql" and len(reads) > 1
            pipeline = db.connection.pipeline() if pipelined else contextlib.nullcontext()
            with pipeline:
                for cursor, read in zip(cursors, reads, strict=True):
                    cursor.execute(read.sql, read.params)
        return [_decoded(c.fetchall(), r.decoders) for c, r in zip(cursors, reads, strict=True)]
    finally:
        for cursor in cursors:
            cursor.close()


def _decoded(rows: list[tuple[Any, ...]], decoders: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    if not any(decoders):
        return rows
    return [
        tuple(v if d is None else d(v) for v, d in zip(row, decoders, strict=True)) for row in rows
    ]

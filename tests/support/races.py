"""Real races on PostgreSQL: N threads, N connections, released together by a barrier; the
database decides. SQLite serializes every writer, so a race there proves nothing: tests that
race take ``postgres_only`` (tests/conftest.py) and the ``postgres`` mark."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection, connections

THREADS = 20


def require_postgres() -> None:
    """Skip the calling test unless it runs on PostgreSQL (the ``postgres_only`` fixture)."""
    if connection.vendor != "postgresql":
        pytest.skip(
            "needs PostgreSQL: SQLite serializes every writer, so a race there proves nothing "
            f"(set DATABASE_URL=postgres://...; this run uses {connection.vendor})"
        )


def race(work: Callable[[int], Any], threads: int = THREADS, *, join_s: float = 60) -> list[Any]:
    """``work(i)`` in ``threads`` threads released together; each one's result or exception.

    Each thread closes its database connections when done, so none holds the test database
    when it is flushed. A thread still alive after ``join_s`` fails the test (a writer stuck on
    a lock is a bug, not a slow machine: every lock here is held for one short transaction)."""
    barrier = threading.Barrier(threads)
    results: list[Any] = [None] * threads

    def target(i: int) -> None:
        try:
            barrier.wait(timeout=30)
            results[i] = work(i)
        except BaseException as exc:  # reported to the caller with the thread's index
            results[i] = exc
        finally:
            connections.close_all()

    started = [threading.Thread(target=target, args=(i,)) for i in range(threads)]
    for t in started:
        t.start()
    for t in started:
        t.join(timeout=join_s)
    assert not any(t.is_alive() for t in started), "a writer is stuck"
    return results

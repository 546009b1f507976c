"""Shared pieces of the benchmark: statistics, a private database, results.

Each benchmark is a function ``bench_<name>(ctx: Context) -> dict[str, Any]`` returning its
figures: numbers as ``summary(values)`` (median over repetitions, min, max, n) plus a ``how``
string saying how it was measured (sizes, repetitions, what the clock spans).
"""

from __future__ import annotations

import itertools
import os
import statistics
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def summary(values: Iterable[float]) -> dict[str, float]:
    v = sorted(values)
    return {"median": statistics.median(v), "min": v[0], "max": v[-1], "n": len(v)}


def ratios(values: Sequence[float], over: float | Sequence[float]) -> dict[str, float]:
    """``summary`` of each value divided by ``over``: one number, or the values of a peer
    measured in the same reps, paired rep by rep (interleaved runs share the machine's mood)."""
    if isinstance(over, (int, float)):
        return summary(v / over for v in values)
    return summary(v / o for v, o in zip(values, over, strict=True))


def relative(values: Sequence[float], reference: Sequence[float]) -> dict[str, float]:
    """``values`` against a reference: ``value`` is p50 over the reference's p50; the spread is
    each of ``values`` over that p50 (``ratios``). Step growth (late steps against early ones)
    and resume (a cold step against a fresh run's) are both this."""
    base = percentile(reference, 50)
    return {"value": percentile(values, 50) / base, **ratios(values, base)}


def step_times(begin: float, marks: Sequence[float], end: float) -> list[float]:
    """Each step's wall time from the clock marks taken as each tool call started: from one call
    to the next, the first from ``begin``, the last to ``end`` (ours and LangGraph's alike)."""
    edges = [begin, *marks[:-1], end] if marks else [begin, end]
    return [b - a for a, b in itertools.pairwise(edges)]


def percentile(values: Iterable[float], p: float) -> float:
    v = sorted(values)
    if not v:
        return float("nan")
    k = min(len(v) - 1, max(0, round(p / 100 * (len(v) - 1))))
    return v[k]


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


@dataclass
class Context:
    """What every benchmark may use: the database URL (a private database), the Redis URL (or
    empty: embedded deployment), and a deadline after which benchmarks must cut short."""

    database_url: str
    redis_url: str
    vendor: str
    deadline: float
    notes: list[str] = field(default_factory=list)

    def time_left(self) -> float:
        return self.deadline - time.monotonic()


def on_postgres(url: str) -> bool:
    return url.startswith(("postgres://", "postgresql://"))


def database_on_same_server(url: str, name: str) -> str:
    """``url`` with its database replaced by ``name`` (``postgres``: the server's own, where
    databases are created and dropped)."""
    return f"{url.rpartition('/')[0]}/{name}"


def private_database(
    base_url: str, prefix: str = "bench", template: str | None = None
) -> tuple[str, Callable[[], None]]:
    """Create a database for this benchmark run (named ``<prefix>_<pid>_<random>``); return
    its URL and a function dropping it. On PostgreSQL, ``template``: a copy of that database
    (the tests' migrated one, tests/support/session/template_db.py)."""
    tag = f"{prefix}_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    if on_postgres(base_url):
        import psycopg

        admin = database_on_same_server(base_url, "postgres")
        copy = f' TEMPLATE "{template}"' if template else ""
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{tag}"{copy}')

        def drop() -> None:
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{tag}" WITH (FORCE)')

        return database_on_same_server(base_url, tag), drop
    path = ROOT / "var" / f"{tag}.sqlite3"

    def remove() -> None:
        for suffix in ("", "-wal", "-shm", "-journal"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)

    return f"sqlite:///{path}", remove

"""``bench_runs_list``: server time of ``/api/runs/`` (first page, filtered page), 100,000 runs."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

from bench.support.harness import Context, percentile
from bench.support.stack import (
    _budget,
    _ms,
    _time_get,
    _user,
)


def _run_inserter(owner: Any) -> Callable[[list[dict[str, Any]]], None]:
    """An INSERT of whole runs_run rows with cursor.executemany: every column's value prepared
    by Django's own field (get_db_prep_save), constant columns prepared once. bulk_create does
    the same per row and per field through the SQL compiler, which costs 1-2 ms per row on a
    loaded 2-core machine (100,000 rows: minutes); this takes seconds."""
    from django.db import connection, transaction
    from django.utils import timezone

    from runs import models as m

    fields = list(m.Run._meta.concrete_fields)
    # Every one of them: Django calls a field concrete when it has a column.
    columns = [f.column for f in fields if f.column is not None]
    quote = connection.ops.quote_name
    sql = "INSERT INTO {} ({}) VALUES ({})".format(
        quote(m.Run._meta.db_table),
        ", ".join(quote(c) for c in columns),
        ", ".join(["%s"] * len(fields)),
    )
    now = timezone.now()
    template = m.Run(
        id="template",
        subject="template",
        goal="template",
        owner=owner,
        max_steps=8,
        max_tool_calls=8,
        max_repeated_proposal=2,
        deadline_ms=0,
        planner={"kind": "fixture", "outputs": []},
        budgets={"max_steps": 8, "max_tool_calls": 8},
        created_at=now,
        updated_at=now,
    )
    base = [f.get_db_prep_save(getattr(template, f.attname), connection) for f in fields]
    position = {f.name: i for i, f in enumerate(fields)}
    field = {f.name: f for f in fields}
    citations = {
        flag: field["citations"].get_db_prep_save(["tool-1"] if flag else [], connection)
        for flag in (True, False)
    }

    def insert(rows: list[dict[str, Any]]) -> None:
        values = []
        for row in rows:
            v = list(base)
            for name, value in row.items():
                if name == "citations":
                    v[position[name]] = citations[value]
                elif name in ("created_at", "updated_at"):
                    v[position[name]] = field[name].get_db_prep_save(value, connection)
                else:
                    v[position[name]] = value
            values.append(v)
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.executemany(sql, values)

    return insert


def _plan(sql: str) -> list[str]:
    from django.db import connection

    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql)
            return [row[0] for row in cursor.fetchall()][:12]
        cursor.execute("EXPLAIN QUERY PLAN " + sql)
        return [" ".join(str(c) for c in row) for row in cursor.fetchall()][:12]


def _rows(
    rng: Any, prefix: str, first: int, last: int, subjects: list[str], now: Any
) -> list[dict[str, Any]]:
    """Rows ``first`` to ``last - 1``: a realistic mix of statuses, steps and ages."""
    from datetime import timedelta

    statuses = (
        ["completed"] * 14 + ["failed"] * 2 + ["cancelled", "running", "waiting_confirmation"]
    )
    rows = []
    for i in range(first, last):
        status = rng.choice(statuses)
        steps = rng.randint(1, 8)
        created = now - timedelta(seconds=rng.randint(0, 90 * 24 * 3600))
        rows.append(
            {
                "id": f"{prefix}{i:06d}",
                "subject": rng.choice(subjects),
                "goal": f"benchmark question {i}",
                "status": status,
                "version": 2 * steps + 1,
                "step": steps,
                "tool_calls": steps - 1,
                "deadline_ms": int(created.timestamp() * 1000) + 300_000,
                "stop_reason": {
                    "failed": "MAX_STEPS_REACHED",
                    "cancelled": "CANCELLED",
                }.get(status),
                "answer": "benchmark answer" if status == "completed" else None,
                "citations": status == "completed",
                "trace_seq": 8 * steps,
                "observation_seq": steps + 1,
                "created_at": created,
                "updated_at": created + timedelta(seconds=steps),
            }
        )
    return rows


def _time_pages(
    client: Any, pages: dict[str, str], warm: int, reps: int
) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """Per page: ``warm`` untimed GETs, ``reps`` timed ones, one with its queries captured."""
    from runs import models as m

    out: dict[str, Any] = {}
    plans: dict[str, list[str]] = {}
    for name, path in pages.items():
        times, queries, response = _time_get(client, path, warm, reps)
        rows_on_page = len(response.json()["results"])
        p95 = percentile(times, 95)
        out[name] = {
            "p95": round(p95, 2),
            **_ms(times),
            "rows_on_page": rows_on_page,
            "queries": len(queries),
        }
        if p95 > 100:
            selects = [q["sql"] for q in queries if m.Run._meta.db_table in q["sql"]]
            if selects:
                plans[name] = _plan(selects[-1])
    return out, plans


def bench_runs_list(
    ctx: Context, *, total: int = 100_000, batch: int = 5_000, reps: int = 50, warm: int = 3
) -> dict[str, Any]:
    """100,000 runs bulk-inserted; server time of GET /api/runs/ and a filtered page."""
    import random

    from django.db import connection, connections
    from django.test import Client
    from django.utils import timezone

    from runs import models as m

    budget = _budget(ctx)
    started = time.monotonic()
    tag = uuid.uuid4().hex[:8]
    prefix = f"bench-list-{tag}-"
    owner, token = _user(f"bench-list-{tag}", "operator")
    rng = random.Random(6)  # noqa: S311 — test data, not security
    subjects = [f"bench-subject-{tag}-{i:03d}" for i in range(500)]
    now = timezone.now()
    inserted = 0
    insert_started = time.monotonic()
    try:
        insert = _run_inserter(owner)
        while inserted < total:
            if time.monotonic() - started > budget * 0.6:
                break  # a slow machine: measure over what is there, and say so
            rows = _rows(rng, prefix, inserted, min(total, inserted + batch), subjects, now)
            insert(rows)
            inserted += len(rows)
        insert_s = time.monotonic() - insert_started
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute(f"ANALYZE {m.Run._meta.db_table}")
        subject = subjects[7]
        client = Client(HTTP_AUTHORIZATION=f"Token {token}")
        pages = {
            "first_page": "/api/runs/",
            "filtered_page": f"/api/runs/?status=failed&subject={subject}",
        }
        out, plans = _time_pages(client, pages, warm, reps)
    finally:
        with connection.cursor() as cursor:
            cursor.execute(
                f"DELETE FROM {m.Run._meta.db_table} WHERE id LIKE %s",
                [prefix + "%"],
            )
        connections.close_all()
    how = _how(ctx, inserted, total, batch, insert_s, warm, reps, pages, plans)
    return {"runs_list_ms": {**out, "rows": inserted, "target_p95": 100, "how": how}}


def _how(
    ctx: Context,
    inserted: int,
    total: int,
    batch: int,
    insert_s: float,
    warm: int,
    reps: int,
    pages: dict[str, str],
    plans: dict[str, list[str]],
) -> str:
    how = (
        f"{inserted:,} runs.models.Run rows inserted in batches of {batch:,} (executemany, "
        f"values prepared by the model's fields; bulk_create's per-row SQL compiling was too "
        f"slow for the time budget on a shared 2-core machine) "
        f"({insert_s:.1f} s; statuses ~74% completed, 11% failed, 5% each cancelled, running, "
        f"waiting_confirmation; 500 subjects; created_at spread over 90 days; owner one operator"
        f"), {ctx.vendor}. django.test.Client in-process with token auth as that operator "
        f"(operators see every run): {warm} warm-ups then {reps} timed GETs each of "
        f"{pages['first_page']} and /api/runs/?status=failed&subject=<one subject>; the clock "
        f"spans client.get() (URL resolving, middleware, auth, the view, serialization; no "
        f"network). Page size 50 (cursor pagination on -created_at, -id). The console runs list "
        f"does not exist yet. Rows deleted afterwards."
    )
    if inserted < total:
        how += f" Only {inserted:,} rows inserted within the time budget."
    for name, plan in plans.items():
        how += f" {name} p95 over 100 ms; plan: " + " | ".join(line.strip() for line in plan)
    return how

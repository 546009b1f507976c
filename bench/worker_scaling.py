"""``bench_worker_scaling``: persisted steps/s with 1, 2 and 4 worker processes over 200 runs
each (issue 13 item 6: where throughput stops growing, and why)."""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from typing import Any

from bench.support.harness import Context, summary
from bench.support.stack import (
    WORKER_OVERHEAD_S,
    _broker,
    _budget,
    _env,
    _load_corpus,
    _private_broker,
    _redis_cleanup,
    _search_run,
    _start_workers,
    _user,
)

WORKERS = (1, 2, 4)


def _measure(
    ctx: Context, tag: str, n_workers: int, run_ids: list[str], window: float
) -> tuple[int, float, int, int, float, list[float]]:
    """Enqueue ``run_ids`` to ``n_workers`` fresh workers; poll until all are terminal or the
    window ends. (planner steps, elapsed s, runs terminal, runs completed, enqueueing s, the
    steps/s of each whole second until then)."""
    from django.db import connections
    from django.db.models import Count

    from runs import models as m
    from runs import services
    from runs.domain.machine import TERMINAL

    terminal = [s.value for s in TERMINAL]
    n_runs = len(run_ids)
    queue_name = f"bench-scale-{tag}-{n_workers}"
    with contextlib.ExitStack() as stack:
        extra = stack.enter_context(_private_broker(ctx))
        env = _env(ctx, **extra)
        names = [f"bench-scale-{tag}-{n_workers}-{i}" for i in range(n_workers)]
        workers = _start_workers(stack, env, queue_name, names)
        t0 = time.monotonic()
        for run_id in run_ids:
            services.enqueue_advance(run_id, queue=queue_name)
        enqueued_s = time.monotonic() - t0
        done = 0
        steps_of = m.TraceEvent.objects.filter(run_id__in=run_ids, event="planner.output")
        per_second: list[float] = []
        mark = (t0, 0)
        while True:
            done = m.Run.objects.filter(pk__in=run_ids, status__in=terminal).count()
            elapsed = time.monotonic() - t0
            if done == n_runs or elapsed > window:
                break
            if time.monotonic() - mark[0] >= 1.0:
                now, count = time.monotonic(), steps_of.count()
                per_second.append((count - mark[1]) / (now - mark[0]))
                mark = (now, count)
            if not all(w.alive() for w in workers):
                raise RuntimeError(f"a worker died:\n{workers[0].tail()}")
            time.sleep(0.1)
        steps = steps_of.count()
        ended = dict(
            m.Run.objects.filter(pk__in=run_ids, status__in=terminal)
            .order_by()
            .values_list("status")
            .annotate(n=Count("id"))
            .values_list("status", "n")
        )
        done, completed = sum(ended.values()), ended.get("completed", 0)
        connections.close_all()
    return steps, elapsed, done, completed, enqueued_s, per_second


def _how(ctx: Context, n_runs: int, searches: int, window: float, notes: list[str]) -> str:
    how = (
        f"{n_runs} runs per configuration, each {searches} search_public steps over the demo "
        f"corpus (search:public grant) + a final citing tool-1 = {searches + 1} planner steps; "
        f"created first (not timed), then runs.advance_run enqueued to a private queue "
        f"(services.enqueue_advance(queue=...); {_broker(ctx)}) consumed by N Celery worker "
        f"processes (celery worker --pool prefork -c 1 each), "
        f"N = {', '.join(map(str, WORKERS))}, {ctx.vendor}. "
        f"steps/s = planner.output trace events / wall time from the first enqueue until all "
        f"runs are terminal (polled every 0.1 s) or the window of {window:.0f} s (the time budget"
        f" split in {len(WORKERS)}) ends, whichever comes first; median/min/max/n: the steps/s "
        f"of each whole second of that time. " + "; ".join(notes) + "."
    )
    if ctx.vendor == "sqlite":
        how += (
            " SQLite (embedded deployment): one writer at a time for the whole file, so two "
            "workers contend for the write lock; the ratio shows that, not the runner."
        )
    how += f" The machine has {os.cpu_count()} CPUs shared with the database and this process."
    return how


def bench_worker_scaling(ctx: Context) -> dict[str, Any]:
    """200 runs of 5 steps each, executed by 1, then 2, then 4 worker processes, on one queue."""
    from django.db import connections

    budget = _budget(ctx)
    started = time.monotonic()
    # 200 runs as issue 6 asks; 50 when the overall deadline leaves this benchmark little time.
    n_runs, searches = (200 if budget >= 90 else 50), 4
    tag = uuid.uuid4().hex[:8]
    _load_corpus()
    owner, _ = _user(f"bench-scale-{tag}", "operator")
    figures: dict[str, Any] = {}
    notes: list[str] = []
    # Every set of runs first (not timed), then equal measuring windows.
    batches = {
        n_workers: [
            _search_run(
                subject=f"bench-scale-{tag}", owner=owner, searches=searches, tag=tag
            ).run_id
            for _ in range(n_runs)
        ]
        for n_workers in WORKERS
    }
    connections.close_all()
    spare = budget - (time.monotonic() - started) - len(WORKERS) * WORKER_OVERHEAD_S
    window = max(10.0, spare / len(WORKERS))
    try:
        for n_workers, run_ids in batches.items():
            steps, elapsed, done, completed, enqueued_s, per_second = _measure(
                ctx, tag, n_workers, run_ids, window
            )
            figures[f"steps_per_s_{n_workers}"] = {
                "value": round(steps / elapsed, 2),
                **(summary(per_second) if per_second else {"n": 0}),
            }
            figures[f"wall_s_{n_workers}"] = round(elapsed, 2)
            notes.append(
                f"{n_workers} worker(s): {steps} steps in {elapsed:.1f} s, {done}/{n_runs} runs "
                f"terminal ({completed} completed), enqueueing took {enqueued_s:.2f} s"
            )
    finally:
        _redis_cleanup(ctx, tag)
        connections.close_all()
    one = figures["steps_per_s_1"]["value"] if "steps_per_s_1" in figures else 0
    for n in WORKERS[1:]:
        key = f"steps_per_s_{n}"
        figures[f"ratio_{n}"] = (
            round(figures[key]["value"] / one, 3) if one and key in figures else 0
        )
    how = _how(ctx, n_runs, searches, window, notes)
    return {"worker_scaling": {**figures, "runs": n_runs, "how": how}}

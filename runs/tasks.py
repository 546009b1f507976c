"""Celery tasks: thin, ids only (STYLE habit 8)."""

from __future__ import annotations

from celery import shared_task

from runs import services


@shared_task(name="runs.advance_run", acks_late=True)
def advance_run(run_id: str) -> str:
    state = services.run_advance(run_id=run_id)
    # None: another worker holds the run's lease and advances it; this one leaves it alone.
    return state.status.value if state is not None else "leased-elsewhere"


@shared_task(name="runs.sweep")
def sweep() -> dict[str, int]:
    from runs.sweeper import sweep as run_sweep

    report = run_sweep()
    return {"expired_waiting": len(report.expired_waiting), "requeued": len(report.requeued)}

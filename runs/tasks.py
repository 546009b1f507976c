"""Celery tasks: thin, ids only (STYLE habit 8)."""

from __future__ import annotations

from celery import shared_task

from runs import services


@shared_task(name="runs.advance_run", acks_late=True)
def advance_run(run_id: str) -> str:
    return services.run_advance(run_id=run_id).status.value

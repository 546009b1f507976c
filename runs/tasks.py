"""Celery tasks: thin, ids only (STYLE habit 8).

The tasks run with the context the composition root installed when the worker started Django
(``agentconsole.apps``): ``agentconsole.wiring`` imports this module (its ``enqueue_advance``
is how services send a run to a worker), so this module does not import it back.
"""

from __future__ import annotations

from typing import Any

from celery import shared_task
from django.conf import settings

from agentconsole.kernel.log_context import run_context
from runs import services
from runs.engine.sweeper import sweep as run_sweep


def arrived_on(task: Any) -> str | None:
    """The queue the running task's message came from (its routing key; with Celery's default
    routing, one direct exchange per queue, the queue's name)."""
    return (task.request.delivery_info or {}).get("routing_key") or None


@shared_task(name="runs.advance_run", acks_late=True, bind=True)
def advance_run(self: Any, run_id: str, handed_back: str | None = None) -> str:
    # One fairness slice, then the run goes back to the end of the queue it came from (the
    # routing key names it: a test's or the fault lab's private queue, or the default one; so
    # with Celery's default routing, one direct exchange per queue. A deployment that routes by
    # other keys must route runs.advance_run in the worker too). A lost hand-back message only
    # delays the run until the sweeper requeues it.
    queue = arrived_on(self)
    if queue == settings.AGENTCONSOLE_CONTROL_QUEUE:
        # A run the sweeper recovered came on the control queue, ahead of the backlog, once:
        # its later slices queue with the other runs.
        queue = None
    # Every log line written while this run advances names it (agentconsole.kernel.log_context).
    with run_context(run_id):
        state = services.run_advance(
            run_id=run_id,
            slice_steps=settings.AGENTCONSOLE_WORKER_SLICE_STEPS,
            queue=queue,
            handed_back=handed_back,
        )
    # None: another worker holds the run's lease and advances it; this one leaves it alone.
    return state.status.value if state is not None else "leased-elsewhere"


@shared_task(name="runs.sweep", bind=True)
def sweep(self: Any) -> dict[str, int]:
    # A run whose worker died goes to the queue the sweep came from (the control queue, which
    # waits behind no backlog of runs); a run merely waiting goes back to the runs' queue.
    report = run_sweep(recovery_queue=arrived_on(self))
    return {"expired_waiting": len(report.expired_waiting), "requeued": len(report.requeued)}


def enqueue_advance(
    run_id: str, *, queue: str | None = None, handed_back: str | None = None
) -> None:
    """Send the message that advances ``run_id`` (to ``queue``, else the default one)."""
    args = (run_id,) if handed_back is None else (run_id, handed_back)
    if queue:
        advance_run.apply_async(args, queue=queue)
    else:
        advance_run.apply_async(args)

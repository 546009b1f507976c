"""One subject's flood does not stall another subject's run (issue 9 item 10), on a real
Celery worker (two pool processes; see conftest.py).

The measure is steps, never time: when the short run of another subject completes, each long
run must have advanced only a few fairness slices. Before the slice, a worker held a run until
it ended, so the short run waited behind a whole long run (each long run here is
``LONG_STEPS`` steps).
"""

from __future__ import annotations

from typing import Any

import pytest
from django.conf import settings

from runs import models as m
from runs import services
from runs.domain.budgets import RunBudgets
from runs.domain.machine import TERMINAL, Status
from tests.support.workers import Worker, worker_alive
from tests.support.workers import wait_for as poll

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

# A bound on waiting for the short run; generous, so the code before the fix fails on the step
# counts below and not on this timeout. No assertion is made on elapsed time.
WAIT_S = 180
LONG_STEPS = 1_000
FLOOD_RUNS = 3
SEARCH_GRANT = {
    "capability": "search:public",
    "resource_scope": "public",
    "expires_at_step": 10_000,
}


def search(i: int) -> dict[str, Any]:
    return {
        "kind": "tool",
        "proposal_id": f"p{i}",
        "tool_name": "search_public",
        "tool_version": "1",
        # Distinct arguments: the loop guard sees a new proposal every time.
        "arguments": {"query": f"retry rule {i}"},
        "source_observation_ids": ["user-1"],
    }


def create(subject: str, outputs: list[dict[str, Any]], steps: int) -> str:
    return services.run_create(
        subject=subject,
        goal="What happens after the retries are exhausted?",
        budgets=RunBudgets(max_steps=steps, max_tool_calls=steps, deadline_ms=3_600_000),
        grants=[SEARCH_GRANT],
        planner={"kind": "fixture", "outputs": outputs},
        enqueue=True,
    ).run_id


def wait_for(worker: Worker, run_ids: list[str], statuses: frozenset[str]) -> dict[str, int]:
    """Poll until every run is in ``statuses``; return each run's step at that moment."""

    def arrived() -> dict[str, int] | None:
        rows = m.Run.objects.filter(pk__in=run_ids).values_list("id", "status", "step")
        found = {r: (s, n) for r, s, n in rows}
        if all(r in found and found[r][0] in statuses for r in run_ids):
            return {r: n for r, (_, n) in found.items()}
        return None

    return poll(
        arrived,
        timeout_s=WAIT_S,
        what=f"runs in {sorted(statuses)}",
        log=lambda: (
            f"{list(m.Run.objects.filter(pk__in=run_ids).values_list('status', 'step'))}\n"
            + worker.log()
        ),
        check=worker_alive(worker),
        poll_s=0.05,
    )


def test_a_flood_from_one_subject_does_not_hold_another_subjects_run(
    celery_worker: Worker,
) -> None:
    """issue 9 item 10: three long runs of one subject, then a short run of another; the short
    run completes while each long run is still within a few slices of its start."""
    slice_steps = settings.AGENTCONSOLE_WORKER_SLICE_STEPS
    assert 0 < slice_steps * 5 < LONG_STEPS
    flood = [
        create("mallory", [search(i) for i in range(1, LONG_STEPS + 1)], LONG_STEPS)
        for _ in range(FLOOD_RUNS)
    ]
    short = create(
        "bob",
        [
            search(1),
            search(2),
            {"kind": "final", "answer": "hand off", "citation_observation_ids": ["tool-1"]},
        ],
        8,
    )

    wait_for(celery_worker, [short], frozenset({Status.COMPLETED.value}))
    steps_then = dict(m.Run.objects.filter(pk__in=flood).values_list("id", "step"))

    try:
        # Each long run got a slice or two while the short run waited for a worker: never its
        # whole length (before the slice: one long run's 1,000 steps, at least).
        assert all(n < 4 * slice_steps for n in steps_then.values()), steps_then
        # And the hand-back loses nothing: the long runs are still being advanced.
        wait_for(
            celery_worker,
            flood,
            frozenset({Status.RUNNING.value}),
        )
        poll(
            lambda: (
                min(m.Run.objects.filter(pk__in=flood).values_list("step", flat=True))
                >= 4 * slice_steps
            ),
            timeout_s=WAIT_S,
            what="the long runs advanced past four slices",
            log=celery_worker.log,
            poll_s=0.05,
        )
    finally:
        for run_id in flood:
            services.run_cancel(run_id=run_id, by="test", enqueue=True)
        wait_for(celery_worker, flood, frozenset(s.value for s in TERMINAL))
        celery_worker.wait_idle()  # the slices' hand-backs and the cancels' messages
    assert celery_worker.task_lines("raised") == []

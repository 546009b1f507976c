"""Runs advanced by a real Celery worker process (see conftest.py for how it is started).

The test process only creates runs and decides confirmations, through the services, with
``enqueue=True``; the worker does everything else. The test then polls the database (the
truth in both deployments) until the run reaches a state, bounded.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any

import pytest

from memory.models import PreferenceHistory, PreferenceRecord
from policy.models import Confirmation as ConfirmationRow
from runs import models as m
from runs import services
from runs.domain import trace as ev
from runs.domain.budgets import RunBudgets
from runs.domain.machine import TERMINAL, Status
from runs.domain.state import RunState
from runs.start.scenarios import Scenario, parse_scenario
from runs.tools.corpus import demo_corpus_dir, document_load
from tests.support.workers import Worker, wait_for, worker_alive

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

WAIT_S = 30
TERMINAL_VALUES = frozenset(s.value for s in TERMINAL)


@pytest.fixture
def corpus() -> None:
    for path in sorted(demo_corpus_dir().glob("*.md")):
        document_load(path=path)


def seed_walkthrough() -> Scenario:
    return parse_scenario(
        (demo_corpus_dir().parent / "scenarios" / "seed-walkthrough.json").read_text()
    )


def create(scenario: Scenario, *, enqueue: bool = True) -> RunState:
    """What ``run_scenario`` does to create a run; with ``enqueue`` the worker advances it."""
    return services.run_create(
        subject=scenario.subject,
        goal=scenario.goal,
        budgets=scenario.budgets,
        grants=[g.model_dump(exclude_unset=True) for g in scenario.grants],
        confirmations=[c.model_dump() for c in scenario.confirmations],
        planner={"kind": "fixture", "outputs": scenario.planner},
        enqueue=enqueue,
    )


def wait_until(
    worker: Worker, run_ids: Iterable[str], statuses: Collection[str] = TERMINAL_VALUES
) -> dict[str, str]:
    """Poll until every run is in one of ``statuses``; fail with the worker's log otherwise."""
    run_ids = list(run_ids)

    def arrived() -> dict[str, str] | None:
        current = dict(m.Run.objects.filter(pk__in=run_ids).values_list("id", "status"))
        done = len(current) == len(run_ids) and all(s in statuses for s in current.values())
        return current if done else None

    return wait_for(
        arrived,
        timeout_s=WAIT_S,
        what=f"runs in {sorted(statuses)}",
        log=lambda: (
            f"{list(m.Run.objects.filter(pk__in=run_ids).values_list('status'))}\n" + worker.log()
        ),
        check=worker_alive(worker),
        poll_s=0.1,
    )


def trace(run_id: str) -> list[tuple[int, str, dict[str, Any]]]:
    return list(
        m.TraceEvent.objects.filter(run_id=run_id)
        .order_by("sequence")
        .values_list("sequence", "event", "details")
    )


def test_the_seed_walkthrough_completes_on_the_worker(celery_worker: Worker, corpus: None) -> None:
    run_id = create(seed_walkthrough()).run_id

    assert wait_until(celery_worker, [run_id]) == {run_id: Status.COMPLETED.value}

    run = m.Run.objects.get(pk=run_id)
    assert run.stop_reason == "FINAL_ANSWER_VALIDATED"
    assert run.citations == ["tool-1"]
    assert PreferenceRecord.objects.count() == 0
    assert PreferenceHistory.objects.count() == 0
    rejections = [d for _, name, d in trace(run_id) if name == ev.PROPOSAL_REJECTED]
    assert [(d["layer"], d["code"]) for d in rejections] == [("semantic", "MEMORY_KEY_NOT_ALLOWED")]
    policy = m.Observation.objects.get(run_id=run_id, trust="policy")
    assert policy.content["code"] == "MEMORY_KEY_NOT_ALLOWED"
    ledger = list(m.LedgerEntry.objects.filter(run_id=run_id).values_list("tool_name", "status"))
    assert ledger == [("search_public", "succeeded")]


def test_ten_runs_enqueued_at_once_each_complete_exactly_once(
    celery_worker: Worker, corpus: None
) -> None:
    scenario = seed_walkthrough()
    # The same scenario advanced in this process: what one clean pass writes to the trace.
    reference = create(scenario, enqueue=False).run_id
    services.run_advance(run_id=reference)
    expected = [name for _, name, _ in trace(reference)]
    assert expected.count(ev.RUN_STOPPED) == 1
    succeeded_before = len(celery_worker.task_lines("succeeded"))

    run_ids = [create(scenario).run_id for _ in range(10)]

    statuses = wait_until(celery_worker, run_ids)
    assert set(statuses.values()) == {Status.COMPLETED.value}, statuses
    for run_id in run_ids:
        events = trace(run_id)
        assert [seq for seq, _, _ in events] == list(range(1, len(events) + 1)), run_id
        assert [name for _, name, _ in events] == expected, run_id
        assert m.Run.objects.get(pk=run_id).trace_seq == len(events)
        ledger = m.LedgerEntry.objects.filter(run_id=run_id)
        assert list(ledger.values_list("status", flat=True)) == ["succeeded"], run_id
    # Each task ran once, in the worker, and returned the run's final status.
    wait_for(
        lambda: len(celery_worker.task_lines("succeeded")) >= succeeded_before + 10,
        timeout_s=5,
        what="ten task results in the worker's log",
        log=celery_worker.log,
    )
    finished = celery_worker.task_lines("succeeded")[succeeded_before:]
    assert len(finished) == 10, finished
    assert all(line.endswith("'completed'") for line in finished), finished
    assert celery_worker.task_lines("raised") == []


def test_a_run_waiting_for_confirmation_resumes_on_the_worker(celery_worker: Worker) -> None:
    scenario = Scenario(
        subject="bob",
        goal="Answer me in English from now on.",
        budgets=RunBudgets(
            max_steps=4, max_tool_calls=2, max_repeated_proposal=2, deadline_ms=60_000
        ),
        grants=[{"capability": "memory:write", "resource_scope": "bob", "expires_at_step": 4}],
        planner=[
            {
                "kind": "tool",
                "proposal_id": "p1",
                "tool_name": "save_preference",
                "tool_version": "1",
                "arguments": {"key": "answer_language", "value": "en"},
                "source_observation_ids": ["user-1"],
            },
            {"kind": "final", "answer": "Saved: English.", "citation_observation_ids": ["tool-1"]},
        ],
    )
    run_id = create(scenario).run_id

    waiting = Status.WAITING_CONFIRMATION.value
    assert wait_until(celery_worker, [run_id], {waiting, *TERMINAL_VALUES}) == {run_id: waiting}
    confirmation = ConfirmationRow.objects.get(run_id=run_id, status="pending")
    assert m.LedgerEntry.objects.filter(run_id=run_id).count() == 0

    services.confirmation_decide(
        confirmation_id=confirmation.pk,
        approved=True,
        shown_hash=confirmation.proposal_hash,
        by="reviewer",
        enqueue=True,
    )

    assert wait_until(celery_worker, [run_id]) == {run_id: Status.COMPLETED.value}
    preference = PreferenceRecord.objects.get(subject="bob", key="answer_language")
    assert (preference.value, preference.version, preference.confirmation_id) == (
        "en",
        1,
        confirmation.pk,
    )
    ledger = list(
        m.LedgerEntry.objects.filter(run_id=run_id).values_list(
            "tool_name", "status", "confirmation_id"
        )
    )
    assert ledger == [("save_preference", "succeeded", confirmation.pk)]
    confirmation.refresh_from_db()
    assert confirmation.status == "consumed"
    names = [name for _, name, _ in trace(run_id)]
    assert names.count(ev.CONFIRMATION_DECIDED) == 1
    assert names.count(ev.TOOL_STARTED) == 1


def _sessions() -> int:
    """Sessions ever opened on the test database (PostgreSQL's cumulative statistics)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute("SELECT sessions FROM pg_stat_database WHERE datname = current_database()")
        return int(cursor.fetchone()[0])


def test_the_worker_keeps_its_database_connections_between_tasks(
    celery_worker: Worker, corpus: None
) -> None:
    """Celery's Django fixup closed a prefork child's whole connection pool before and after
    every task, so each task connected to PostgreSQL anew (a resumed approval waited for it).
    The child now hands its connections back to the pool instead: once warm, running more
    runs opens no new session (a few at most, should the pool grow), not one or more each."""
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("the connection pool is PostgreSQL's (SQLite opens a file per task)")
    scenario = seed_walkthrough()
    warm = [create(scenario).run_id for _ in range(4)]
    wait_until(celery_worker, warm)
    before = _sessions()
    run_ids = []
    for _ in range(8):  # one at a time: each is one task (or more) on the worker
        run_ids.append(create(scenario).run_id)
        wait_until(celery_worker, run_ids[-1:])
    statuses = wait_until(celery_worker, run_ids)
    assert set(statuses.values()) == {Status.COMPLETED.value}, statuses
    # A backend counts its session when it reports statistics, at its exit at the latest: a
    # connection closed after each task would have reported for all runs but the last few.
    opened = _sessions() - before
    assert opened <= 3, f"{opened} new sessions for 8 runs\n{celery_worker.log()}"

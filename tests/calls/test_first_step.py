"""The transaction that creates a model planner's run records its first model request (issue 22).

Before, a create enqueued a worker's turn whose only work was to start the run and record the
request; a burst of creates waited in the workers' queue before any model was asked. Now, with
the gateway making the calls, the creating transaction takes that step (a worker's runner, no
lease: nobody sees the run before the commit), and the first worker message is the one the
gateway sends when the reply is recorded. Real runner, ORM store, gateway (in this process)
and slow model.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection, transaction

from bench.support.slow_model import SlowModel
from policy.domain.errors import DomainError
from runs import models as m
from runs import services
from runs.domain import trace as ev
from runs.domain.budgets import RunBudgets
from runs.domain.gateway.calls import CallStatus
from runs.planners.openai_planner import OpenAIPlanner
from tests.calls import calls_kit as kit
from tests.support.races import THREADS, race
from tests.support.workers import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch, settings: Any) -> list[str]:
    settings.AGENTCONSOLE_MODEL_CALLS = "gateway"
    messages: list[str] = []
    monkeypatch.setattr(services, "enqueue_advance", lambda run_id, **kw: messages.append(run_id))
    return messages


def create(planner: dict[str, Any]) -> str:
    return services.run_create(
        subject="alice",
        goal="What happens after the retries are exhausted?",
        budgets=RunBudgets(max_steps=6, deadline_ms=600_000),
        grants=[kit.SEARCH_GRANT],
        planner=planner,
        enqueue=True,
    ).run_id


def test_the_create_records_the_first_request_and_sends_no_worker_message(
    endpoint: dict[str, Any], model: SlowModel, sent: list[str]
) -> None:
    run_id = create({"kind": "openai", "endpoint": kit.ENDPOINT})

    assert sent == []  # no worker's turn before the model is asked
    run = m.Run.objects.get(pk=run_id)
    assert (run.status, run.step, run.lease_owner) == ("running", 0, None)
    (call,) = kit.calls(run_id)
    assert (call.status, call.step) == (CallStatus.QUEUED, 1)
    assert kit.events(run_id)[-1] == ev.PLANNER_REQUESTED
    assert model.total == 0  # the gateway sends it, not the creating request
    assert m.SubjectUsage.objects.get(subject="alice").steps == 1  # the step is paid once

    # The gateway answers and sends the run to a worker: the rest is a worker's, as before.
    gateway_sent: list[str] = []
    kit.drain(kit.gateway(sent=gateway_sent))
    assert gateway_sent == [run_id]
    state = kit.until_done(run_id)
    assert state.status.value == "completed", state.stop_reason
    assert model.total == 2


def test_a_fixture_planners_run_is_left_to_a_worker(sent: list[str]) -> None:
    # A planner that answers in-process would run tools in the creating request: never.
    run_id = create({"kind": "fixture", "outputs": [{"kind": "final", "answer": "x"}]})

    assert sent == [run_id]
    assert m.Run.objects.get(pk=run_id).status == "created"


def test_inline_model_calls_leave_the_step_to_a_worker(
    endpoint: dict[str, Any], model: SlowModel, sent: list[str], settings: Any
) -> None:
    # Without the gateway the step would call the model in the creating request: never.
    settings.AGENTCONSOLE_MODEL_CALLS = "inline"
    run_id = create({"kind": "openai", "endpoint": kit.ENDPOINT})

    assert sent == [run_id]
    assert m.Run.objects.get(pk=run_id).status == "created"
    assert kit.calls(run_id) == []


def test_a_first_step_that_fails_here_leaves_the_created_run_to_a_worker(
    endpoint: dict[str, Any], model: SlowModel, sent: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # It fails after the run was started and its step paid: both are undone with it.
    def broken(self: OpenAIPlanner, state: Any, context: Any) -> Any:
        raise ConnectionError("the request could not be built")

    real = OpenAIPlanner.request
    monkeypatch.setattr(OpenAIPlanner, "request", broken)
    run_id = create({"kind": "openai", "endpoint": kit.ENDPOINT})

    assert sent == [run_id]  # created, and a worker takes the step
    run = m.Run.objects.get(pk=run_id)
    assert (run.status, run.version) == ("created", 1)
    assert kit.events(run_id) == [ev.RUN_CREATED]
    assert kit.calls(run_id) == []
    assert m.SubjectUsage.objects.get(subject="alice").steps == 0

    monkeypatch.setattr(OpenAIPlanner, "request", real)  # a worker's turn takes it as before
    services.run_advance(run_id=run_id)
    assert kit.calls(run_id)[0].status == CallStatus.QUEUED


MODEL_PLANNER = {"kind": "openai", "endpoint": kit.ENDPOINT}


def _locks_of_a_waiting_create() -> set[str]:
    """The tables a backend of this database that waits on a lock holds locks on."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT l.relation::regclass::text FROM pg_locks l"
            " JOIN pg_stat_activity a ON a.pid = l.pid"
            " WHERE a.datname = current_database() AND a.wait_event_type = 'Lock'"
            " AND l.granted AND l.relation IS NOT NULL"
        )
        return {table for (table,) in cursor.fetchall()}


@pytest.mark.postgres
def test_a_create_waits_for_its_subjects_lock_only_at_its_end(
    postgres_only: None, endpoint: dict[str, Any], model: SlowModel, sent: list[str]
) -> None:
    """The subject's usage row is locked last in the creating transaction
    (``runs.start.limits.admit_subject``), so one subject's burst of creates runs side by side
    up to the count of its active runs: while another transaction holds the row, a create has
    already started its run and recorded its first model request, and waits there."""
    first = create(MODEL_PLANNER)  # the subject's usage row exists
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        try:
            with transaction.atomic():
                m.SubjectUsage.objects.select_for_update().get(subject="alice")
                held.set()
                release.wait(30)
        finally:
            connection.close()

    created: list[Any] = []

    def create_one() -> None:
        try:
            created.append(create(MODEL_PLANNER))
        except Exception as exc:  # reported below
            created.append(exc)
        finally:
            connection.close()

    holder, creator = threading.Thread(target=hold), threading.Thread(target=create_one)
    holder.start()
    assert held.wait(10)
    creator.start()
    try:
        locks = wait_for(
            _locks_of_a_waiting_create,
            timeout_s=10,
            what="a create waiting on the subject's lock",
        )
    finally:
        release.set()
        holder.join(10)
        creator.join(30)
    assert {"runs_run", "runs_modelcall", "runs_traceevent"} <= locks, locks
    (second,) = created
    assert isinstance(second, str), second
    assert [c.status for c in kit.calls(first) + kit.calls(second)] == [CallStatus.QUEUED] * 2
    assert m.SubjectUsage.objects.get(subject="alice").steps == 2


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("active", "daily", "code"),
    [(3, 100, "ACTIVE_RUNS_LIMIT"), (10, 3, "DAILY_STEP_QUOTA_EXHAUSTED")],
)
def test_simultaneous_creates_taking_their_first_steps_meet_the_subjects_limits(
    postgres_only: None,
    endpoint: dict[str, Any],
    model: SlowModel,
    sent: list[str],
    settings: Any,
    active: int,
    daily: int,
    code: str,
) -> None:
    """Counted under the lock at the end, after each create took its first step: three of
    twenty make a run, each paid once; a refused one leaves no run, call, event or step."""
    settings.AGENTCONSOLE_MAX_ACTIVE_RUNS_PER_SUBJECT = active
    settings.AGENTCONSOLE_DAILY_STEPS_PER_SUBJECT = daily
    results = race(lambda i: create(MODEL_PLANNER))

    created = [r for r in results if isinstance(r, str)]
    assert len(created) == 3, results
    assert {e.code for e in results if isinstance(e, DomainError)} == {code}, results
    assert len(results) == THREADS
    assert set(m.Run.objects.values_list("id", flat=True)) == set(created)
    assert set(m.TraceEvent.objects.values_list("run_id", flat=True)) == set(created)
    assert sorted(c.run_id for c in m.ModelCall.objects.all()) == sorted(created)
    assert m.SubjectUsage.objects.get(subject="alice").steps == 3

"""The transaction that creates a model planner's run records its first model request (issue 22).

Before, a create enqueued a worker's turn whose only work was to start the run and record the
request; a burst of creates waited in the workers' queue before any model was asked. Now, with
the gateway making the calls, the creating transaction takes that step (a worker's runner, no
lease: nobody sees the run before the commit), and the first worker message is the one the
gateway sends when the reply is recorded. Real runner, ORM store, gateway (in this process)
and slow model.
"""

from __future__ import annotations

from typing import Any

import pytest

from bench.support.slow_model import SlowModel
from runs import models as m
from runs import services
from runs.domain import trace as ev
from runs.domain.budgets import RunBudgets
from runs.domain.gateway.calls import CallStatus
from runs.planners.openai_planner import OpenAIPlanner
from tests.calls import calls_kit as kit

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

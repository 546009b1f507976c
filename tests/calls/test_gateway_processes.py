"""The split at the model call on real processes (issue 22): Celery worker processes, a gateway
process (``manage.py gateway``, as scripts/gateway.sh starts it) and the slow model server.
Runs beyond an endpoint's limit wait their turn: the model never sees more calls at once. A
cancel reaches a run while the gateway process waits on its model (the call is dropped and its
attempt recorded abandoned), and so does the deadline (the call is cut at the run's deadline).

The crashes (SIGKILL of the gateway while the model thinks; of every worker and then the gateway
once the reply is recorded) are the fault lab's experiments (runs/fault_lab/faultlab_calls.py), run
on real processes by tests/faults/test_faultlab.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from bench.support.slow_model import SlowModel
from runs import models as m
from runs import services
from runs.domain.budgets import RunBudgets
from tests.calls import calls_kit as kit
from tests.support import workers as w
from tests.support.gateways import Gateways

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]


@pytest.fixture
def stack(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    settings: Any,
    corpus: None,
) -> Iterator[tuple[SlowModel, w.Cluster, Gateways]]:
    # A test may change the endpoint (indirect parametrization: {"timeout_s": 60}).
    overrides = getattr(request, "param", {})
    model = SlowModel(delay_s=1.0).start()
    endpoints = kit.endpoint_settings(model, **{"max_in_flight": 2, **overrides})
    settings.AGENTCONSOLE_MODEL_ENDPOINTS = endpoints
    extra = {
        "AGENTCONSOLE_MODEL_ENDPOINTS": json.dumps(endpoints),
        "AGENTCONSOLE_GATEWAY_LEASE_S": "2",
        "AGENTCONSOLE_GATEWAY_POLL_S": "0.1",
    }
    with w.cluster(tmp_path_factory, name="calls", concurrency=2, extra_env=extra) as c:
        # The gateway sends answered runs to the runs' queue: the cluster's private one.
        logs = tmp_path_factory.mktemp("gateway-logs")
        gateways = Gateways({**c.env, "AGENTCONSOLE_QUEUE": c.queue}, logs)
        try:
            yield model, c, gateways
        finally:
            gateways.stop()
            model.stop()


def _create(goal: str, subject: str = "alice", deadline_ms: int = 300_000) -> str:
    state = services.run_create(
        subject=subject,
        goal=goal,
        budgets=RunBudgets(max_steps=6, deadline_ms=deadline_ms),
        grants=[kit.SEARCH_GRANT],
        planner={"kind": "openai", "endpoint": kit.ENDPOINT},
        enqueue=True,
    )
    return state.run_id


def _status(run_id: str) -> str:
    return m.Run.objects.get(pk=run_id).status


def _attempts(run_id: str) -> list[tuple[int, str | None]]:
    rows = m.CallAttempt.objects.filter(call__run_id=run_id).order_by("call__step", "attempt")
    return [(a.attempt, a.outcome) for a in rows]


def test_runs_beyond_an_endpoints_limit_wait_their_turn_and_all_complete(
    stack: tuple[SlowModel, w.Cluster, Gateways],
) -> None:
    model, c, gateways = stack
    gateways.start()
    run_ids = [_create(f"question {i}", subject=f"user{i % 3}") for i in range(6)]

    w.wait_for(
        lambda: all(_status(r) == "completed" for r in run_ids),
        timeout_s=120,
        what="all runs done",
        log=lambda: c.log() + gateways.log(),
    )
    assert model.peak_in_flight == 2  # max_in_flight, over every call of every run
    assert model.total == 12


@pytest.mark.parametrize("stack", [{"timeout_s": 60}], indirect=True)
def test_cancelling_a_run_while_the_gateway_waits_on_its_model_stops_it_and_drops_the_call(
    stack: tuple[SlowModel, w.Cluster, Gateways],
) -> None:
    model, c, gateways = stack
    model.delay_s = 30.0  # under the endpoint's time-out: only the cancel ends the wait
    gateways.start()
    run_id = _create("a question to cancel")
    w.wait_for(lambda: model.in_flight == 1, timeout_s=60, what="the model asked", log=c.log)

    state = services.run_cancel(run_id=run_id, by="alice", reason="changed my mind", enqueue=True)

    assert state.status.value == "cancelled"  # no worker holds the run: it stops at once
    call = m.ModelCall.objects.get(run_id=run_id)
    assert call.status == "abandoned"
    # The gateway process finds the call no longer its own and records the attempt abandoned.
    w.wait_for(
        lambda: _attempts(run_id) == [(1, "abandoned")],
        timeout_s=30,
        what="the attempt recorded abandoned",
        log=lambda: c.log() + gateways.log(),
    )
    assert m.ModelCall.objects.get(run_id=run_id).reply is None
    assert model.total == 1


@pytest.mark.parametrize("stack", [{"timeout_s": 60}], indirect=True)
def test_the_deadline_stops_a_run_while_the_gateway_waits_on_its_model(
    stack: tuple[SlowModel, w.Cluster, Gateways],
) -> None:
    model, c, gateways = stack
    model.delay_s = 30.0  # longer than the run has, shorter than the endpoint's time-out
    gateways.start()
    run_id = _create("a question out of time", deadline_ms=10_000)
    w.wait_for(lambda: model.in_flight == 1, timeout_s=60, what="the model asked", log=c.log)

    w.wait_for(
        lambda: _status(run_id) == "failed",
        timeout_s=60,
        what="the run stopped",
        log=lambda: c.log() + gateways.log(),
    )
    run = m.Run.objects.get(pk=run_id)
    assert run.stop_reason == "DEADLINE_REACHED"
    # The gateway cut the call at the run's deadline, not at the endpoint's time-out, and
    # asked once.
    assert _attempts(run_id) == [(1, "PLANNER_TIMEOUT")]
    assert model.total == 1

"""The split at the model call on real processes (issue 22): Celery worker processes, a gateway
process (``manage.py gateway``, as scripts/gateway.sh starts it) and the slow model server.
Runs beyond an endpoint's limit wait their turn: the model never sees more calls at once.

The crashes (SIGKILL of the gateway while the model thinks; of every worker and then the gateway
once the reply is recorded) are the fault lab's experiments (runs/faultlab_calls.py), run on
real processes by tests/faults/test_faultlab.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from bench.slow_model import SlowModel
from runs import models as m
from runs import services
from runs.domain.budgets import RunBudgets
from tests.calls import calls_kit as kit
from tests.support import workers as w
from tests.support.gateways import Gateways

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]


@pytest.fixture
def stack(
    tmp_path_factory: pytest.TempPathFactory, settings: Any, corpus: None
) -> Iterator[tuple[SlowModel, w.Cluster, Gateways]]:
    model = SlowModel(delay_s=1.0).start()
    endpoints = kit.endpoint_settings(model, max_in_flight=2)
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


def _create(goal: str, subject: str = "alice") -> str:
    state = services.run_create(
        subject=subject,
        goal=goal,
        budgets=RunBudgets(max_steps=6, deadline_ms=300_000),
        grants=[kit.SEARCH_GRANT],
        planner={"kind": "openai", "endpoint": kit.ENDPOINT},
        enqueue=True,
    )
    return state.run_id


def _status(run_id: str) -> str:
    return m.Run.objects.get(pk=run_id).status


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

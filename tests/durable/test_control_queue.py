"""The control queue (agentconsole.env.queues): the beat sends the sweep there, every worker
started without ``-Q`` consumes it beside the runs' queue, and a run the sweep recovered there
goes back to the runs' queue after its first slice."""

from __future__ import annotations

import os
from typing import Any

import pytest
from django.conf import settings

from runs import services, tasks


def _advance_from(routing_key: str | None, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The queue ``runs.advance_run`` hands its run back to, delivered on ``routing_key``."""
    seen: dict[str, Any] = {}

    def advance(**kw: Any) -> None:
        seen.update(kw)

    monkeypatch.setattr(services, "run_advance", advance)
    tasks.advance_run.push_request(delivery_info={"routing_key": routing_key})
    try:
        tasks.advance_run.run("run_x")
    finally:
        tasks.advance_run.pop_request()
    return seen["queue"]


def test_a_recovered_run_goes_back_to_the_runs_queue(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _advance_from(settings.AGENTCONSOLE_CONTROL_QUEUE, monkeypatch) is None  # default
    assert _advance_from("private-test-queue", monkeypatch) == "private-test-queue"


def test_the_sweep_is_scheduled_on_the_control_queue_every_worker_consumes() -> None:
    control = settings.AGENTCONSOLE_CONTROL_QUEUE
    default = f"{settings.CELERY_TASK_DEFAULT_QUEUE}-control"
    assert control == (os.environ.get("AGENTCONSOLE_CONTROL_QUEUE") or default)
    assert settings.CELERY_BEAT_SCHEDULE["sweep"]["options"] == {"queue": control}
    consumed = {q.name for q in settings.CELERY_TASK_QUEUES}
    assert consumed == {settings.CELERY_TASK_DEFAULT_QUEUE, control}


def test_the_sweep_sends_runs_whose_worker_died_to_its_own_queue(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: dict[str, Any] = {}

    def sweep(**kw: Any) -> Any:
        seen.update(kw)
        return type("Report", (), {"expired_waiting": [], "requeued": []})()

    monkeypatch.setattr(tasks, "run_sweep", sweep)
    tasks.sweep.push_request(delivery_info={"routing_key": "runs-control"})
    try:
        tasks.sweep.run()
    finally:
        tasks.sweep.pop_request()
    assert seen == {"recovery_queue": "runs-control"}

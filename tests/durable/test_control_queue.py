"""The control queue (agentconsole.config.env.queues): the beat sends the sweep there, every worker
started without ``-Q`` consumes it beside the runs' queue, and a run the sweep recovered there
goes back to the runs' queue after its first slice."""

from __future__ import annotations

import os
import uuid
from typing import Any

import pytest
from django.conf import settings
from kombu import Connection, Consumer, Message, Producer

from agentconsole.config import env
from runs import services, tasks
from tests.support.workers import redis_cleanup


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
    # A sweep nobody took within an interval is dropped: sweeps never pile up ahead of the
    # runs the sweeper recovers on that queue.
    assert settings.CELERY_BEAT_SCHEDULE["sweep"]["options"] == {
        "queue": control,
        "expires": settings.CELERY_BEAT_SCHEDULE["sweep"]["schedule"],
    }
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


@pytest.mark.skipif(
    not settings.CELERY_BROKER_URL.startswith(("redis://", "rediss://")),
    reason="the consume order is the Redis transport's (REDIS_URL)",
)
def test_a_free_worker_takes_the_control_queue_before_the_backlog(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On Redis, with the queues a worker consumes (env.queues) and the broker's options
    (settings): messages on the control queue (a sweep, a recovered run) are taken before any
    of the backlog, whatever was taken last. Round-robin between the queues (kombu's default)
    took a run after every sweep, so a recovered run behind k sweeps waited k whole tasks more
    (the soak: a minute and more under a backlog)."""
    tag = f"order-{uuid.uuid4().hex[:10]}"
    monkeypatch.setenv("AGENTCONSOLE_QUEUE", f"test-{tag}")
    monkeypatch.delenv("AGENTCONSOLE_CONTROL_QUEUE", raising=False)
    runs_queue, control, declared = env.queues()
    taken: list[str] = []

    def take(body: Any, message: Message) -> None:
        taken.append(message.delivery_info["routing_key"])
        message.ack()

    options = dict(getattr(settings, "CELERY_BROKER_TRANSPORT_OPTIONS", {}))
    try:
        with Connection(settings.CELERY_BROKER_URL, transport_options=options) as conn:
            channel = conn.default_channel
            consumer = Consumer(channel, queues=list(declared), callbacks=[take])
            consumer.qos(prefetch_count=1)  # as a worker: prefetch multiplier 1, concurrency 1
            producer = Producer(channel)
            # The backlog first, then a sweep and a recovered run on the control queue.
            for q, n in ((runs_queue, 3), (control, 2)):
                for i in range(n):
                    producer.publish({"n": i}, exchange=q, routing_key=q, declare=declared)
            with consumer:
                for _ in range(5):
                    conn.drain_events(timeout=5)
    finally:
        redis_cleanup(settings.CELERY_BROKER_URL, tag)
    assert taken == [control, control, runs_queue, runs_queue, runs_queue]

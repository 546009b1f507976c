"""The gateway's rules (runs.calls): limits per endpoint, subjects in turn, retries without a
slot, leases that lapse, calls abandoned by their runs. In this process, against the slow model
server; each claim and answer goes through the real database."""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from bench.support.slow_model import SlowModel
from runs import models as m
from runs import services
from runs.calls import records
from runs.domain.gateway.calls import CallStatus
from runs.engine.sweeper import sweep
from tests.calls import calls_kit as kit

pytestmark = pytest.mark.django_db(transaction=True)


def _requested(goal: str, *, subject: str = "alice", **kw: Any) -> str:
    run_id = kit.start_run(goal, subject=subject, **kw)
    kit.runner().advance(run_id)
    return run_id


def _claim(limit: int, owner: str = "g1", **kw: Any) -> list[records.Claimed]:
    return records.claim(
        endpoint=kit.ENDPOINT,
        limit=limit,
        owner=owner,
        now=kw.pop("now", timezone.now()),
        lease=kw.pop("lease", timedelta(seconds=30)),
        batch=kw.pop("batch", 100),
    )


def test_an_endpoint_never_has_more_calls_in_flight_than_its_limit(
    endpoint: dict[str, Any],
) -> None:
    for i in range(5):
        _requested(f"question {i}")

    first = _claim(limit=2)
    again = _claim(limit=2, owner="g2")  # a second gateway sees no free slot

    assert len(first) == 2
    assert again == []
    assert records.in_flight(kit.ENDPOINT, timezone.now()) == 2


def test_subjects_take_turns_so_a_big_backlog_does_not_starve_a_small_one(
    endpoint: dict[str, Any],
) -> None:
    for i in range(8):
        _requested(f"mallory's question {i}", subject="mallory")
    for i in range(2):
        _requested(f"bob's question {i}", subject="bob")

    order = [m.ModelCall.objects.get(pk=c.call_id).subject for c in _claim(limit=4)]

    # Oldest of each subject first, then each one's second: bob's two are in the first four.
    assert order.count("bob") == 2
    assert order.count("mallory") == 2


def test_a_429_goes_back_to_the_queue_until_its_retry_after_without_a_slot(
    endpoint: dict[str, Any], model: SlowModel
) -> None:
    model.script.replies.append((429, {"retry-after": "1"}))
    run_id = _requested("a question")

    kit.drain(kit.gateway())

    (call,) = kit.calls(run_id)
    assert call.status == CallStatus.QUEUED
    assert call.not_before > timezone.now() + timedelta(milliseconds=500)
    assert records.in_flight(kit.ENDPOINT, timezone.now()) == 0  # the wait holds no slot
    assert kit.attempts(call.id) == [(1, "PLANNER_RATE_LIMITED")]

    m.ModelCall.objects.filter(pk=call.id).update(not_before=timezone.now())  # it is due
    kit.drain(kit.gateway())

    assert kit.attempts(call.id) == [(1, "PLANNER_RATE_LIMITED"), (2, "answered")]
    assert kit.calls(run_id)[0].status == CallStatus.ANSWERED


def test_a_call_whose_gateway_died_is_sent_again_once_its_lease_lapses(
    endpoint: dict[str, Any], model: SlowModel
) -> None:
    run_id = _requested("a question")
    (claimed,) = _claim(limit=4, owner="dead-gateway", lease=timedelta(seconds=2))
    # The gateway dies here: its attempt never ends. Before the lease lapses nobody resends.
    assert _claim(limit=4, owner="g2") == []

    later = timezone.now() + timedelta(seconds=3)
    (again,) = _claim(limit=4, owner="g2", now=later)

    assert again.call_id == claimed.call_id
    assert again.attempt == 2
    assert kit.attempts(claimed.call_id) == [(1, "lost"), (2, None)]
    # The dead gateway's late answer, were it to come, changes nothing: the lease is g2's.
    late = records.Result(claimed.call_id, 1, "answered", "answered", reply={})
    assert records.settle([late], owner="dead-gateway", now=later) == []
    assert kit.calls(run_id)[0].status == CallStatus.SENDING


def test_cancelling_a_run_that_waits_on_its_model_abandons_the_request(
    endpoint: dict[str, Any], model: SlowModel
) -> None:
    model.script.hang = 1  # the endpoint holds the request: the run waits on it
    run_id = _requested("a question")
    gw = kit.gateway(lease=timedelta(seconds=3))
    stop = asyncio.Event()
    loop = asyncio.new_event_loop()
    serving = threading.Thread(target=loop.run_until_complete, args=(gw.run(stop),))
    serving.start()
    try:
        _wait_for(lambda: model.in_flight == 1)
        assert kit.calls(run_id)[0].status == CallStatus.SENDING

        state = services.run_cancel(run_id=run_id, by="alice", reason="changed my mind")

        assert state.status.value == "cancelled"
        assert kit.calls(run_id)[0].status == CallStatus.ABANDONED
        # The gateway's renewer finds the call no longer its own and drops the request.
        _wait_for(lambda: gw.in_flight == 0)
        _wait_for(lambda: kit.attempts(kit.calls(run_id)[0].id) == [(1, "abandoned")])
    finally:
        loop.call_soon_threadsafe(stop.set)
        serving.join(15)
        loop.close()


def test_the_deadline_reaches_a_run_that_waits_on_its_model(
    endpoint: dict[str, Any], model: SlowModel
) -> None:
    run_id = _requested("a question", deadline_ms=60_000)
    assert len(kit.calls(run_id)) == 1
    m.Run.objects.filter(pk=run_id).update(deadline_ms=1)  # the deadline has come

    sweep(enqueue=False)

    state = services.run_state(run_id=run_id)
    assert (state.status.value, state.stop_reason) == ("failed", "DEADLINE_REACHED")
    assert kit.calls(run_id)[0].status == CallStatus.ABANDONED
    kit.drain(kit.gateway())
    assert model.total == 0  # an abandoned request is never sent


def test_a_run_waiting_on_its_model_is_not_resent_by_the_sweeper(
    endpoint: dict[str, Any],
) -> None:
    run_id = _requested("a question")
    stale = timezone.now() - timedelta(minutes=5)
    m.Run.objects.filter(pk=run_id).update(updated_at=stale)

    assert run_id not in sweep(enqueue=False).requeued

    # Once answered and left untaken (the gateway's message lost), the sweeper sends it on.
    (call,) = kit.calls(run_id)
    m.ModelCall.objects.filter(pk=call.id).update(
        status=CallStatus.ANSWERED.value, reply={"choices": []}, answered_at=stale
    )
    assert run_id in sweep(enqueue=False).requeued


def _wait_for(condition: Any, timeout_s: float = 10.0) -> None:
    done = threading.Event()
    for _ in range(int(timeout_s / 0.05)):
        if condition():
            return
        done.wait(0.05)
    raise AssertionError("condition not met in time")


def test_answers_the_database_refused_once_are_recorded_when_it_is_back(
    endpoint: dict[str, Any], model: SlowModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gateway keeps an answer it could not record and records it later: it never claims
    its own calls again, so a dropped answer would leave the call under its lease."""
    run_id = _requested("a question")
    real = records.settle
    failures = [RuntimeError("database away")]

    def settle(*args: Any, **kw: Any) -> list[str]:
        if failures:
            raise failures.pop()
        return real(*args, **kw)

    monkeypatch.setattr(records, "settle", settle)

    kit.drain(kit.gateway())

    assert failures == []  # the first recording failed
    assert kit.calls(run_id)[0].status == CallStatus.ANSWERED
    assert model.total == 1  # recorded from memory, not asked again


def test_a_claim_round_with_nothing_due_is_one_read(endpoint: dict[str, Any]) -> None:
    """Most rounds find nothing (each commit that records a call rings, a poll times out): one
    read of the lanes with calls due, not a claim's transaction per configured endpoint."""
    gateway = kit.gateway()
    with CaptureQueriesContext(connection) as reads:
        assert gateway._claim_all() == []
    assert len(reads) == 1, [q["sql"] for q in reads]

    run_id = _requested("a question")
    (claimed,) = gateway._claim_all()
    assert (claimed.run_id, claimed.attempt) == (run_id, 1)


def test_a_call_for_an_endpoint_no_longer_configured_fails_and_its_run_moves_on(
    endpoint: dict[str, Any], settings: Any
) -> None:
    run_id = _requested("a question")
    settings.AGENTCONSOLE_MODEL_ENDPOINTS = {"other": endpoint}  # "slow" was removed
    sent: list[str] = []

    assert kit.gateway(sent=sent)._claim_all() == []

    assert sent == [run_id]  # a worker stops the run with the call's code
    (call,) = kit.calls(run_id)
    assert (call.status, call.failure["code"]) == (CallStatus.FAILED, "PLANNER_ENDPOINT_UNKNOWN")

"""The step splits at the model call (issue 22): a worker records the request and lets go; the
gateway sends it and records the reply; a worker takes the step from the recorded reply.

Real runner, ORM store, tools and an HTTP model server (bench.support.slow_model); the gateway runs
in this process (``Gateway.run_until_idle``). The same code on real processes, killed with SIGKILL:
tests/calls/test_gateway_processes.py.
"""

from __future__ import annotations

from typing import Any

import openai
import pytest

from agentconsole import wiring
from bench.support.slow_model import SlowModel
from runs import models as m
from runs import services
from runs.domain import trace as ev
from runs.domain.gateway.calls import CallStatus
from tests.calls import calls_kit as kit

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_worker_records_the_request_and_lets_go_without_calling(
    endpoint: dict[str, Any], model: SlowModel
) -> None:
    run_id = kit.start_run("What happens after the retries are exhausted?")

    state = kit.runner().advance(run_id)

    assert state.status.value == "running"
    (call,) = kit.calls(run_id)
    assert (call.status, call.step, call.attempts) == ("queued", 1, 0)
    assert call.request["model"] == "slow-model"
    assert len(call.request_hash) == 64
    assert model.total == 0  # nothing was sent by the worker
    assert kit.events(run_id)[-1] == ev.PLANNER_REQUESTED
    requested = m.TraceEvent.objects.get(run_id=run_id, event=ev.PLANNER_REQUESTED)
    assert requested.details["request_hash"] == call.request_hash


def test_a_workers_split_steps_build_no_model_client(
    endpoint: dict[str, Any], model: SlowModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A worker builds the run's planner at every step; the split step only builds a request
    # and reads a recorded reply. Building the client loaded the TLS trust store each time:
    # most of a worker's step in the runs_in_flight benchmark. Counted, the real one still runs.
    built: list[str] = []
    real_init = openai.OpenAI.__init__

    def counting_init(self: openai.OpenAI, *args: Any, **kwargs: Any) -> None:
        built.append(str(kwargs.get("base_url")))
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(openai.OpenAI, "__init__", counting_init)
    run_id = kit.start_run("What happens after the retries are exhausted?")

    state = kit.until_done(run_id)

    assert state.status.value == "completed", state.stop_reason
    assert model.total == 2
    assert built == []  # the gateway's client is an AsyncOpenAI of its own
    # The inline call (AGENTCONSOLE_MODEL_CALLS=inline) still builds one, and sends with it.
    inline = kit.start_run("How are idempotency tokens derived?")
    wiring.runner(defer_calls=False).advance(inline)
    assert built == [model.base_url]
    assert model.total >= 3


def test_the_gateway_answers_and_the_run_completes_one_request_per_step(
    endpoint: dict[str, Any], model: SlowModel
) -> None:
    run_id = kit.start_run("What happens after the retries are exhausted?")

    state = kit.until_done(run_id)

    assert state.status.value == "completed", state.stop_reason
    assert [c.status for c in kit.calls(run_id)] == ["consumed", "consumed"]
    assert model.total == 2  # a search step and the answer: each asked once
    assert [kit.attempts(c.id) for c in kit.calls(run_id)] == [[(1, "answered")]] * 2
    names = kit.events(run_id)
    # Each step: the request recorded, then (a later commit) the output it got.
    assert names.count(ev.PLANNER_REQUESTED) == names.count(ev.PLANNER_OUTPUT) == 2
    output = m.TraceEvent.objects.filter(run_id=run_id, event=ev.PLANNER_OUTPUT).first()
    assert output is not None
    assert output.details["attempts"] == 1
    assert output.details["context_items"] >= 1  # the summary recorded with the request


def test_a_recorded_reply_is_taken_by_the_next_worker_and_never_asked_again(
    endpoint: dict[str, Any], model: SlowModel
) -> None:
    run_id = kit.start_run("What happens after the retries are exhausted?")
    kit.runner().advance(run_id)
    kit.drain(kit.gateway())
    assert kit.calls(run_id)[0].status == CallStatus.ANSWERED
    # A worker that dies after reading the reply, before its commit: its commit never lands.
    crashing = kit.runner()
    real_apply = crashing.store.apply

    def die(commit: Any, **kw: Any) -> Any:
        if commit.consume_call is not None:
            raise SystemExit("worker killed before its commit")
        return real_apply(commit, **kw)

    crashing.store.apply = die  # type: ignore[method-assign]
    with pytest.raises(SystemExit):
        crashing.advance(run_id)
    assert kit.calls(run_id)[0].status == CallStatus.ANSWERED

    state = kit.runner().advance(run_id)  # the next worker takes the same reply

    assert kit.calls(run_id)[0].status == CallStatus.CONSUMED
    assert state.step == 1
    assert model.total == 1


def test_a_run_that_waits_on_its_model_is_not_handed_back_to_the_queue(
    endpoint: dict[str, Any], model: SlowModel, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    """A worker's advance (a fairness slice) that ends because the run waits on its model
    sends no message: the gateway sends the run back once the reply is recorded. (A hand-back
    here made workers spin on a waiting run, found by the process tests.)"""
    settings.AGENTCONSOLE_MODEL_CALLS = "gateway"
    sent: list[str] = []
    monkeypatch.setattr(services, "enqueue_advance", lambda run_id, **kw: sent.append(run_id))
    run_id = kit.start_run("What happens after the retries are exhausted?")

    state = services.run_advance(run_id=run_id, slice_steps=5, queue="q-test")

    assert state is not None
    assert state.status.value == "running"
    assert kit.calls(run_id)[0].status == CallStatus.QUEUED
    assert sent == []
    assert m.Run.objects.get(pk=run_id).lease_owner is None  # the worker let go

"""MCP tool calls made by the gateway (issue 22 item 4), in this process: the real runner and
ORM store, a gateway driven to idle (``Gateway.run_until_idle``) and the notes server over
streamable HTTP. The worker records the call with the command's intent and lets go of the run;
the gateway makes the call and records the outcome; the next step settles it as the worker
would have.

The crashes on real processes (SIGKILL of the gateway mid-call) are
tests/mcp/test_mcp_gateway_processes.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentconsole import wiring
from agentconsole.ops import telemetry
from runs import models as m
from runs import services
from runs.calls import records
from runs.calls.gateway import Gateway
from runs.domain.gateway.calls import CallStatus
from runs.domain.state import RunState
from runs.engine.sweeper import sweep
from tests.mcp.mcp_kit import READ_POLICY, TOKEN, NotesServer, http_server
from tests.mcp.test_mcp_runs import grant, register_and_accept, start
from tests.support.clock import AheadClock
from tests.support.planner import tool_call

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("fresh_registry")]

# The operator's policy of a write that cannot be repeated blindly (readOnlyHint false: the
# operator's write setting stands).
SLOW_WRITE_POLICY = {
    **READ_POLICY,
    "capability": "notes:write",
    "side_effect": "compensatable-write",
}


@pytest.fixture
def inline_calls(settings: Any) -> None:
    """The deployment defers calls (overrides the inline mode of tests/mcp/conftest.py)."""
    settings.AGENTCONSOLE_MODEL_CALLS = "gateway"


@pytest.fixture
def web_notes(tmp_path: Path, mcp_secrets: None) -> Iterator[NotesServer]:
    yield from http_server(tmp_path)


def gateway(owner: str = "g1", sent: list[str] | None = None) -> Gateway:
    return Gateway(
        endpoints={},
        owner=owner,
        send_advance=(sent if sent is not None else []).append,
        lease=timedelta(seconds=30),
        poll_s=0.05,
        tools=wiring.gateway_tools,
    )


def drain(gw: Gateway) -> None:
    asyncio.run(gw.run_until_idle(limit_s=60))


def tool_calls(run_id: str) -> list[m.ModelCall]:
    return list(m.ModelCall.objects.filter(run_id=run_id, kind="tool").order_by("created_at"))


def outputs(server: str) -> list[dict[str, Any]]:
    return [
        tool_call("p1", f"mcp__{server}__lookup", {"topic": "retries"}),
        tool_call("p2", f"mcp__{server}__whoami", {}),
        {"kind": "final", "answer": "Done.", "citation_observation_ids": ["tool-1"]},
    ]


# Trace details that name the run or the moment (its grants, tokens, deadlines, timings).
VARYING = ("grant_ids", "idempotency_token", "deadline_ms", "duration_ms")


def record_of(run_id: str) -> tuple[list[tuple[str, Any]], list[tuple[str, str, Any]], list[Any]]:
    """What a run came to, without what differs by nature between two runs (ids, timings)."""
    events = [
        (e.event, {k: v for k, v in e.details.items() if k not in VARYING})
        for e in m.TraceEvent.objects.filter(run_id=run_id).order_by("sequence")
    ]
    observations = [
        (o.observation_id, o.trust, o.content)
        for o in m.Observation.objects.filter(run_id=run_id).order_by("id")
    ]
    ledger = [
        (r.tool_name, r.status, r.attempt, r.outcome)
        for r in m.LedgerEntry.objects.filter(run_id=run_id).order_by("id")
    ]
    return events, observations, ledger


def test_the_gateway_makes_the_call_and_the_run_ends_as_it_does_inline(
    web_notes: NotesServer, settings: Any
) -> None:
    server = register_and_accept(web_notes, lookup=READ_POLICY, whoami=READ_POLICY)
    grants = [grant("notes:read", f"mcp/{server}")]

    # A worker's step records the call with the command's intent and lets go of the run.
    run = start(outputs(server), grants)
    state = services.run_advance(run_id=run.run_id)
    assert state is not None
    assert state.status.value == "running"
    (call,) = tool_calls(run.run_id)
    entry = m.LedgerEntry.objects.get(run_id=run.run_id)
    assert (call.status, entry.status) == (CallStatus.QUEUED, "started")
    assert call.request["token"] == entry.idempotency_token
    assert call.request["arguments"] == {"topic": "retries"}  # exactly what the gate checked
    assert call.endpoint == f"mcp:{server}"
    assert m.Run.objects.get(pk=run.run_id).lease_owner is None  # no worker holds it
    assert web_notes.calls() == []  # the worker did not call the server

    sent: list[str] = []
    for _ in range(2):  # each tool call: the gateway answers, a worker takes the outcome
        drain(gateway(sent=sent))
        state = services.run_advance(run_id=run.run_id)
    assert sent == [run.run_id, run.run_id]
    assert state is not None
    assert state.status.value == "completed"
    assert [c.status for c in tool_calls(run.run_id)] == [CallStatus.CONSUMED] * 2
    assert [c["tool"] for c in web_notes.calls()] == ["lookup", "whoami"]
    token = m.LedgerEntry.objects.filter(run_id=run.run_id).order_by("id")[0].idempotency_token
    assert web_notes.calls()[0]["meta"] == {"agentconsole/idempotency-token": token}
    # The gateway scrubbed the secret the server echoed before it recorded the outcome.
    assert all(TOKEN not in str(c.reply) for c in tool_calls(run.run_id))

    # The same run, inline: the same trace, observations and ledger.
    settings.AGENTCONSOLE_MODEL_CALLS = "inline"
    inline = start(outputs(server), grants)
    services.run_advance(run_id=inline.run_id)
    assert m.Run.objects.get(pk=inline.run_id).status == "completed"
    assert tool_calls(inline.run_id) == []
    assert record_of(run.run_id) == record_of(inline.run_id)


def test_the_gateway_sends_the_steps_trace_context_and_times_each_call(
    web_notes: NotesServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With tracing on, the worker records its step's trace context with the call and the
    gateway sends it as the executor would (the server's spans join the run's trace); each
    call's time goes to the MCP latency histogram, by server."""
    memory = InMemorySpanExporter()
    on = telemetry.build(service_name="agentconsole-test", processors=[SimpleSpanProcessor(memory)])
    monkeypatch.setattr(telemetry, "from_settings", lambda: on)
    server = register_and_accept(web_notes, lookup=READ_POLICY, whoami=READ_POLICY)
    run = start(outputs(server), [grant("notes:read", f"mcp/{server}")])
    services.run_advance(run_id=run.run_id)
    (call,) = tool_calls(run.run_id)
    recorded = call.request["trace"]["traceparent"]

    observed: list[tuple[str, str, float]] = []
    gw = gateway()
    gw.observe = observed.extend
    drain(gw)
    on.shutdown()
    (seen,) = web_notes.calls("lookup")
    assert seen["headers"]["traceparent"] == recorded
    (run_span,) = [s for s in memory.get_finished_spans() if s.name == "run"]
    assert int(recorded.split("-")[1], 16) == run_span.context.trace_id
    ((kind, lane, seconds),) = observed
    assert (kind, lane) == ("tool", f"mcp:{server}")
    assert 0 < seconds < 30


def test_cancelling_a_run_that_waits_on_its_tool_abandons_the_call(
    web_notes: NotesServer,
) -> None:
    server = register_and_accept(web_notes, lookup=READ_POLICY)
    run = start([tool_call("p1", f"mcp__{server}__lookup", {"topic": "a"})],
                [grant("notes:read", f"mcp/{server}")])  # fmt: skip
    services.run_advance(run_id=run.run_id)
    cancelling = services.run_cancel(run_id=run.run_id, reason="changed my mind")
    assert cancelling.status.value == "cancelling"  # its command is started
    (call,) = tool_calls(run.run_id)
    assert call.status == CallStatus.ABANDONED

    state = services.run_advance(run_id=run.run_id)
    assert state is not None
    assert state.status.value == "cancelled"
    entry = m.LedgerEntry.objects.get(run_id=run.run_id)
    assert (entry.status, entry.outcome["code"]) == ("failed", "CANCELLED")
    drain(gateway())  # nothing left to call
    assert web_notes.calls() == []


def test_the_deadline_reaches_a_run_waiting_on_its_tool(web_notes: NotesServer) -> None:
    server = register_and_accept(web_notes, lookup=READ_POLICY)
    run = start([tool_call("p1", f"mcp__{server}__lookup", {"topic": "a"})],
                [grant("notes:read", f"mcp/{server}")])  # fmt: skip
    services.run_advance(run_id=run.run_id)
    # No gateway runs; the deadline passes (the sweeper sends the run to a worker then).
    m.Run.objects.filter(pk=run.run_id).update(deadline_ms=1)

    state = services.run_advance(run_id=run.run_id)
    assert state is not None
    assert state.status.value == "cancelled"
    assert state.stop_reason == "DEADLINE_REACHED"
    assert tool_calls(run.run_id)[0].status == CallStatus.ABANDONED
    assert web_notes.calls() == []


def _lost_after_sending(run_id: str) -> None:
    """What a gateway that died mid-call leaves: the call claimed, marked sent, its lease
    lapsed (the real crash is tests/mcp/test_mcp_gateway_processes.py)."""
    now = timezone.now()
    (claimed,) = records.claim(
        kind="tool",
        endpoint=tool_calls(run_id)[0].endpoint,
        limit=4,
        owner="dead",
        now=now,
        lease=timedelta(seconds=1),
        batch=10,
    )
    assert records.mark_sent(owner="dead", call_id=claimed.call_id, attempt=1, now=now)
    m.ModelCall.objects.filter(pk=claimed.call_id).update(
        lease_expires_at=now - timedelta(seconds=1)
    )


def _lost_and_taken_over(run_id: str) -> RunState:
    """A worker records the call, its gateway is lost mid-call, another takes over, a worker
    takes the outcome."""
    services.run_advance(run_id=run_id)
    _lost_after_sending(run_id)
    drain(gateway("g2"))
    state = services.run_advance(run_id=run_id)
    assert state is not None
    return state


def test_a_read_lost_with_its_gateway_is_sent_again(web_notes: NotesServer) -> None:
    server = register_and_accept(web_notes, lookup=READ_POLICY)
    run = start(
        [
            tool_call("p1", f"mcp__{server}__lookup", {"topic": "a"}),
            {"kind": "final", "answer": "Read.", "citation_observation_ids": ["tool-1"]},
        ],
        [grant("notes:read", f"mcp/{server}")],
    )
    state = _lost_and_taken_over(run.run_id)
    assert state.status.value == "completed"
    (call,) = tool_calls(run.run_id)
    assert list(call.attempt_rows.order_by("attempt").values_list("outcome", flat=True)) == [
        "lost",
        "succeeded",
    ]
    assert len(web_notes.calls("lookup")) == 1  # the lost attempt never reached it here


def test_a_write_lost_with_its_gateway_after_sending_is_not_sent_again(
    web_notes: NotesServer,
) -> None:
    server = register_and_accept(web_notes, slow_post=SLOW_WRITE_POLICY)
    run = start(
        [tool_call("p1", f"mcp__{server}__slow_post", {"text": "hi", "seconds": 0})],
        [grant("notes:write", f"mcp/{server}")],
    )
    state = _lost_and_taken_over(run.run_id)
    assert state.status.value == "failed"
    assert state.stop_reason == "TOOL_OUTCOME_UNKNOWN"
    entry = m.LedgerEntry.objects.get(run_id=run.run_id)
    assert (entry.status, entry.outcome["code"]) == ("unknown", "GATEWAY_LOST")
    assert m.Handoff.objects.filter(run_id=run.run_id, reason="TOOL_OUTCOME_UNKNOWN").exists()
    assert web_notes.calls() == []  # not sent again


def test_a_run_waiting_on_its_tool_is_not_resent_by_the_sweeper(web_notes: NotesServer) -> None:
    """Its started ledger row is the gateway's call, not a dead worker's tool: a worker would
    only wake to find nothing to do (and a recovery would run the tool a second time)."""
    server = register_and_accept(web_notes, lookup=READ_POLICY)
    run = start([tool_call("p1", f"mcp__{server}__lookup", {"topic": "a"})],
                [grant("notes:read", f"mcp/{server}")])  # fmt: skip
    services.run_advance(run_id=run.run_id)
    m.Run.objects.filter(pk=run.run_id).update(updated_at=timezone.now() - timedelta(minutes=5))

    assert run.run_id not in sweep(enqueue=False).requeued
    assert web_notes.calls() == []


def test_a_retryable_failure_is_a_new_call_under_the_same_token(web_notes: NotesServer) -> None:
    """A read that times out is retried by the contract's policy (two attempts, 250 ms apart):
    each attempt is a call of its own, recorded with the retry's commit, same token."""
    server = register_and_accept(
        web_notes, nap={**READ_POLICY, "timeout_ms": 1500}, lookup=READ_POLICY
    )
    run = start(
        [
            tool_call("p1", f"mcp__{server}__nap", {"topic": "a", "seconds": 30}),
            tool_call("p2", f"mcp__{server}__lookup", {"topic": "a"}),
            {"kind": "final", "answer": "Read.", "citation_observation_ids": ["tool-2"]},
        ],
        [grant("notes:read", f"mcp/{server}")],
    )
    services.run_advance(run_id=run.run_id)
    drain(gateway())
    state = services.run_advance(run_id=run.run_id)  # records attempt 2, due in 250 ms
    assert state is not None
    assert state.status.value == "running"
    first, second = tool_calls(run.run_id)
    assert first.status == CallStatus.CONSUMED
    assert first.reply["outcome"]["code"] == "TOOL_TIMEOUT"
    assert (second.status, second.request["attempt"]) == (CallStatus.QUEUED, 2)
    assert second.not_before > first.answered_at

    later = Gateway(endpoints={}, owner="g3", send_advance=[].append, poll_s=0.05,
                    lease=timedelta(seconds=30), tools=wiring.gateway_tools,
                    clock=AheadClock(300))  # fmt: skip
    drain(later)
    services.run_advance(run_id=run.run_id)  # the nap fails for good; the lookup is recorded
    drain(gateway())
    state = services.run_advance(run_id=run.run_id)
    assert state is not None
    assert state.status.value == "completed"
    entry = m.LedgerEntry.objects.get(run_id=run.run_id, tool_name=f"mcp__{server}__nap")
    assert (entry.status, entry.attempt, entry.outcome["code"]) == ("failed", 2, "TOOL_TIMEOUT")
    retrying = m.TraceEvent.objects.get(run_id=run.run_id, event="tool.retrying")
    assert (retrying.details["attempt"], retrying.details["code"]) == (2, "TOOL_TIMEOUT")
    tokens = [c["meta"]["agentconsole/idempotency-token"] for c in web_notes.calls("nap")]
    assert tokens == [entry.idempotency_token] * 2

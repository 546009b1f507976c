"""Retries under a tool's RetryPolicy: the same command and idempotency token, the attempt
counted on the one ledger row; tools without a policy are never retried."""

from __future__ import annotations

from dataclasses import replace

import pytest

from agentconsole import wiring
from policy.domain.contracts import RetryPolicy
from runs import models as m
from runs import services
from tests.durable.durable_kit import Run, advance_in_thread, create, final, use
from tests.support.workers import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def _retrying(times: int, tool: str = "durable_flaky") -> Run:
    run = create(
        [use("p1", tool), final("tool-1")],
        faults={"tools": {tool: {"mode": "fail_retryable", "times": times}}},
    )
    services.run_advance(run_id=run.run_id)
    done = Run(run.run_id)
    done.check()
    return done


def test_two_retryable_failures_then_success_on_the_third_attempt(plugin_tools):
    done = _retrying(2)
    assert done.status == "completed"
    [row] = done.ledger
    assert (row["status"], row["attempt"]) == ("succeeded", 3)
    token = row["idempotency_token"]
    retrying = done.events("tool.retrying")
    assert [e["details"]["attempt"] for e in retrying] == [2, 3]
    assert {e["details"]["idempotency_token"] for e in retrying} == {token}
    assert [e["details"]["code"] for e in retrying] == ["INJECTED_RETRYABLE_FAILURE"] * 2
    # Backoff from the policy (10 ms, doubled).
    assert [e["details"]["delay_ms"] for e in retrying] == [10, 20]
    # One tool call, one start, one completion; the body ran once, under the same token.
    assert done.state["tool_calls"] == 1
    assert len(done.events("tool.started")) == len(done.events("tool.completed")) == 1
    assert plugin_tools.calls("durable_flaky") == [token]


def test_retries_stop_at_max_attempts_and_the_row_says_retryable(plugin_tools):
    done = _retrying(5)
    [row] = done.ledger
    assert (row["status"], row["attempt"]) == ("failed", 3)
    assert row["outcome"]["retryable"] is True
    assert row["outcome"]["code"] == "INJECTED_RETRYABLE_FAILURE"
    assert len(done.events("tool.retrying")) == 2
    assert plugin_tools.calls("durable_flaky") == []
    # A retryable failure is evidence for the planner, not citable, and not the end of the run:
    # the planner's final cites the failed result and is refused.
    obs = done.observation("tool-1")
    assert obs["citable"] is False
    assert obs["content"]["retryable"] is True
    assert (done.status, done.stop_reason) == ("failed", "FINAL_CITATION_VALIDATION_FAILED")


def test_a_tool_without_a_retry_policy_is_not_retried(plugin_tools):
    done = _retrying(1, tool="durable_steady")
    [row] = done.ledger
    assert (row["status"], row["attempt"]) == ("failed", 1)
    assert row["outcome"]["retryable"] is True
    assert done.events("tool.retrying") == []
    assert plugin_tools.calls("durable_steady") == []


@pytest.fixture
def slow_backoff(plugin_tools):
    """durable_flaky with a minute between attempts: a backoff slept through would outlast the
    generous join below, so a worker done within it shows the cancel cut it short."""
    original = list(plugin_tools.TOOLS)
    plugin_tools.TOOLS[:] = [
        replace(c, retry=RetryPolicy(max_attempts=3, backoff_ms=60_000))
        if c.name == "durable_flaky"
        else c
        for c in original
    ]
    wiring.registry.cache_clear()
    yield
    plugin_tools.TOOLS[:] = original
    wiring.registry.cache_clear()


def test_a_cancel_during_the_backoff_stops_the_retries(slow_backoff):
    run = create(
        [use("p1", "durable_flaky"), final("tool-1")],
        faults={"tools": {"durable_flaky": {"mode": "fail_retryable", "times": 5}}},
    )
    worker, _ = advance_in_thread(run.run_id)
    try:
        # Polls for the worker thread's first failed attempt (real work, generous timeout).
        wait_for(
            lambda: m.TraceEvent.objects.filter(run_id=run.run_id, event="tool.retrying").exists(),
            timeout_s=5,
            what="the first attempt failed",
        )
        services.run_cancel(run_id=run.run_id, by="ops", reason="stop retrying")
    finally:
        worker.join(30)
    assert not worker.is_alive(), "the backoff was slept through despite the cancel"
    done = Run(run.run_id)
    done.check()
    assert (done.status, done.stop_reason) == ("cancelled", "CANCELLED")
    [row] = done.ledger
    assert row["status"] == "failed"
    assert len(done.events("tool.retrying")) == 1
    # Exactly one attempt ran (each attempt fires the injected failure once).
    assert m.FaultFiring.objects.filter(run_id=run.run_id).count() == 1

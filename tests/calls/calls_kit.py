"""Shared by the gateway tests: a model run through the real runner and store, a gateway driven
in this process against the slow model server (bench.support.slow_model), and readers of what was
recorded."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from agentconsole import wiring
from bench.support.slow_model import SlowModel
from runs import models as m
from runs import services
from runs.calls.gateway import Gateway
from runs.domain.budgets import RunBudgets
from runs.domain.clock import SYSTEM_CLOCK, Clock
from runs.domain.runner import Runner
from runs.domain.state import RunState

SEARCH_GRANT = {"capability": "search:public", "resource_scope": "public", "expires_at_step": 100}
ENDPOINT = "slow"


def endpoint_settings(server: SlowModel, **overrides: Any) -> dict[str, dict[str, Any]]:
    config = {
        "base_url": server.base_url,
        "model": "slow-model",
        "timeout_s": 5.0,
        "max_attempts": 3,
        "max_in_flight": 64,
    }
    return {ENDPOINT: config | overrides}


def start_run(goal: str, *, subject: str = "alice", deadline_ms: int = 600_000) -> str:
    state = services.run_create(
        subject=subject,
        goal=goal,
        budgets=RunBudgets(max_steps=6, deadline_ms=deadline_ms),
        grants=[SEARCH_GRANT],
        planner={"kind": "openai", "endpoint": ENDPOINT},
    )
    return state.run_id


def runner(clock: Clock = SYSTEM_CLOCK) -> Runner:
    """A worker's runner: the step splits at the model call."""
    return wiring.runner(clock=clock, defer_calls=True)


def gateway(owner: str = "test-gateway", clock: Clock = SYSTEM_CLOCK, **kw: Any) -> Gateway:
    sent: list[str] = kw.pop("sent", [])
    return Gateway(
        endpoints=wiring.model_endpoints(),
        owner=owner,
        send_advance=sent.append,
        lease=kw.pop("lease", timedelta(seconds=30)),
        poll_s=kw.pop("poll_s", 0.05),
        clock=clock,
        **kw,
    )


def drain(gw: Gateway) -> None:
    asyncio.run(gw.run_until_idle())


def until_done(run_id: str, *, rounds: int = 10) -> RunState:
    """Advance, let the gateway answer, advance again ... until the run stops or waits for a
    person (each round is what a worker and the gateway do between two model calls)."""
    state = runner().advance(run_id)
    for _ in range(rounds):
        if state.status.value != "running":
            return state
        drain(gateway())
        state = runner().advance(run_id)
    return state


def calls(run_id: str) -> list[m.ModelCall]:
    return list(m.ModelCall.objects.filter(run_id=run_id).order_by("step"))


def attempts(call_id: str) -> list[tuple[int, str | None]]:
    rows = m.CallAttempt.objects.filter(call_id=call_id).order_by("attempt")
    return [(a.attempt, a.outcome) for a in rows]


def events(run_id: str) -> list[str]:
    return list(
        m.TraceEvent.objects.filter(run_id=run_id)
        .order_by("sequence")
        .values_list("event", flat=True)
    )

"""Planners propose; they never execute. The fixture planner replays scripted outputs and the
trace marks them ``source=fixture`` — never as model output (seed §12)."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from policy.domain.errors import DomainError
from runs.domain.calls import CallRecord, ModelRequest
from runs.domain.state import RunState


class PlannerError(DomainError):
    code = "PLANNER_FAILED"


def failure_details(exc: PlannerError) -> dict[str, int]:
    """What ``run.stopped`` says about a failed planner call: the endpoint's last HTTP status and
    the attempts made (numbers only; a plugin planner's other extras are not trace details)."""
    # "http_status": the event's own "status" is the run's.
    named = {"status": "http_status", "attempts": "attempts"}
    return {named[k]: v for k in named if isinstance(v := exc.extra.get(k), int)}


class PlannerExhausted(PlannerError):
    code = "PLANNER_EXHAUSTED"


@dataclass(frozen=True)
class PlannerContext:
    """The bounded view a planner sees: the goal, the recent observations (each with its trust
    label), the tools it may propose, and structured preferences — never the whole history."""

    goal: str
    step: int
    observations: list[dict[str, Any]] = field(default_factory=list)
    tools: list[dict[str, Any]] = field(default_factory=list)
    preferences: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PlannerReply:
    """A planner output with what producing it cost: a model planner's tokens, and a summary
    for the ``planner.output`` event (endpoint, model, token counts; names and counts only).
    A planner may also return the bare output (the fixture planner does): it cost nothing."""

    output: Any
    tokens: int = 0
    details: dict[str, Any] = field(default_factory=dict)


def unwrap(reply: Any) -> tuple[Any, int, dict[str, Any]]:
    """(output, tokens, trace details) of whatever ``Planner.next`` returned."""
    if isinstance(reply, PlannerReply):
        return reply.output, reply.tokens, dict(reply.details)
    return reply, 0, {}


class Planner(Protocol):
    source: str

    def next(self, state: RunState, context: PlannerContext) -> Any: ...


@runtime_checkable
class WaitingPlanner(Protocol):
    """A planner whose step waits on a model, asked in two halves so the wait holds no worker
    (runs.domain.calls): ``request`` builds what to send (pure), ``answer`` reads the recorded
    reply (pure; raises ``PlannerError`` when the call failed for good). ``next`` still makes
    the whole step in one call, for a runner that is not told to split (inline mode)."""

    source: str

    def next(self, state: RunState, context: PlannerContext) -> Any: ...

    def request(self, state: RunState, context: PlannerContext) -> ModelRequest: ...

    def answer(self, state: RunState, call: CallRecord) -> PlannerReply: ...


class FixturePlanner:
    source = "fixture"

    def __init__(self, outputs: list[Any]) -> None:
        self.outputs = outputs

    def next(self, state: RunState, context: PlannerContext) -> Any:
        # The cursor lives in the authoritative run state, so a resumed run continues where it
        # was and never replays step one.
        if state.planner_cursor >= len(self.outputs):
            raise PlannerExhausted("the fixture planner has no more outputs")
        return copy.deepcopy(self.outputs[state.planner_cursor])

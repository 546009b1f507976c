"""Planners propose; they never execute. The fixture planner replays scripted outputs and the
trace marks them ``source=fixture`` — never as model output (seed §12)."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from policy.domain.errors import DomainError
from runs.domain.gateway.calls import CallRecord, ModelRequest
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
    (runs.domain.gateway.calls): ``request`` builds what to send (pure), ``answer`` reads the
    recorded reply (pure; raises ``PlannerError`` when the call failed for good). ``next`` still
    makes the whole step in one call, for a runner that is not told to split (inline mode)."""

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
        return as_seen(copy.deepcopy(self.outputs[state.planner_cursor]), context)


# A scripted output that depends on what a step came to: ``{"kind": "final", "answer": …,
# "if_step_failed": {"step": 2, "answer": "Could not save …: {code}", …}}``.
IF_STEP_FAILED = "if_step_failed"
NOT_SEEN = "OUTCOME_NOT_SEEN"
_CODE = re.compile(r"[A-Z][A-Z0-9_]{0,63}")


def as_seen(output: Any, context: PlannerContext) -> Any:
    """A scripted output as the planner would write it having read its view (issue 21 item 2:
    a script must not claim an effect it did not get).

    An output with ``if_step_failed: {step, answer, citation_observation_ids?}`` is itself unless
    the planner's view shows that step's call did not succeed (the tool's result, or the gate's
    rejection, made at that step): then the alternative's ``answer`` (``{code}`` replaced by the
    outcome's code) and citations replace the output's. A step whose outcome is not in view
    counts as not succeeded (``OUTCOME_NOT_SEEN``): no claim without evidence. Anything not of
    that shape is left as it is, for the gate to refuse."""
    if not isinstance(output, dict) or not isinstance(output.get(IF_STEP_FAILED), dict):
        return output
    branch = output.pop(IF_STEP_FAILED)
    step, answer = branch.get("step"), branch.get("answer")
    if not isinstance(step, int) or not isinstance(answer, str):
        output[IF_STEP_FAILED] = branch  # malformed: a PARSE_ERROR, as any unknown field
        return output
    code = _failure_code(context.observations, step)
    if code is None:
        return output
    output["answer"] = answer.replace("{code}", code)
    if "citation_observation_ids" in branch:
        output["citation_observation_ids"] = branch["citation_observation_ids"]
    return output


def _failure_code(items: list[dict[str, Any]], step: int) -> str | None:
    """None if the view shows ``step``'s call succeeded; else the code of how it ended."""
    made = (f"tool-{step}", f"policy-{step}")
    found = [i for i in items if (i.get("source_ids") or [None])[0] in made]
    if not found:
        return NOT_SEEN
    item = found[-1]
    if item.get("kind") == "evidence-summary":
        return None  # search results: the call succeeded
    try:
        content = json.loads(item.get("content") or "")
    except ValueError:
        return NOT_SEEN  # clipped past reading: not seen
    if not isinstance(content, dict):
        return NOT_SEEN
    if content.get("status") == "succeeded":
        return None
    code = content.get("code")
    if isinstance(code, str) and _CODE.fullmatch(code):
        return code
    status = content.get("status")
    return str(status).upper() if status in ("rejected", "failed", "unknown") else NOT_SEEN


Extras = Callable[[RunState], dict[str, Any]] | None


def given_preferences(extras: Extras, state: RunState) -> dict[str, Any]:
    """The subject's preferences the planner is given (``Runner.context_extras``)."""
    return dict((extras(state) if extras else {}).get("preferences", {}))


def preference_values(
    given: Mapping[str, Any] | None, extras: Extras, state: RunState
) -> Callable[[], dict[str, Any]]:
    """The preferences a proposal's provenance counts as the user's, key → value (runs.domain.
    decide asks only for a tool proposal): those the planner was given with this step's
    context; when the context was built in an earlier iteration (a model's recorded reply, a
    confirmed proposal resumed), those it would be given now."""

    def values() -> dict[str, Any]:
        found = given if given is not None else given_preferences(extras, state)
        return {str(k): v.get("value") if isinstance(v, Mapping) else v for k, v in found.items()}

    return values

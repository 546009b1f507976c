"""Scenario files: the public way to drive a run from a file (tests, demos, integrators).

A scenario is JSON, snake_case; unknown keys are an error. ``planner`` outputs are *data from the
planner*, passed through unvalidated on purpose: a malformed or hostile output (one that names a
capability, say) becomes a recorded ``PARSE_ERROR`` rejection at run time, never an effect.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from policy.domain import strict_json
from policy.domain.errors import DomainError
from policy.domain.grants import Constraint
from policy.domain.strict_json import JsonRefused
from runs import selectors, services
from runs.context import RunsContext
from runs.domain.budgets import RunBudgets
from runs.domain.ids import INPUT_ID_PATTERN
from runs.domain.machine import Status
from runs.fault_lab.faults import FaultPlan
from runs.start.limits import RunLimits

MAX_SCENARIO_BYTES = 1024 * 1024


class ScenarioError(DomainError):
    code = "SCENARIO_INVALID"


class _Strict(BaseModel):
    # strict: a JSON `true` or "6" is not a step count; wrong types are errors, not coerced.
    model_config = ConfigDict(extra="forbid", strict=True)


class ScenarioGrant(_Strict):
    capability: Annotated[str, Field(min_length=1, max_length=64)]
    resource_scope: Annotated[str, Field(min_length=1, max_length=512)]
    expires_at_step: Annotated[int, Field(ge=0)]
    max_calls: Annotated[int, Field(ge=1)] | None = None
    constraints: dict[str, Constraint] = {}


class ScenarioProposal(_Strict):
    tool_name: Annotated[str, Field(min_length=1, max_length=128)]
    tool_version: Annotated[str, Field(min_length=1, max_length=32)]
    arguments: Any


class ScenarioConfirmation(_Strict):
    # INPUT_ID_PATTERN never admits the mark on ids the runtime mints (runs.domain.ids).
    confirmation_id: Annotated[str, Field(min_length=1, max_length=64, pattern=INPUT_ID_PATTERN)]
    proposal: ScenarioProposal
    approved: bool
    expires_at_step: Annotated[int, Field(ge=0)]


class HumanAction(_Strict):
    action: Literal["approve", "decline", "cancel"]
    reason: Annotated[str, Field(max_length=256)] = ""


class Scenario(_Strict):
    name: Annotated[str, Field(max_length=128)] = ""
    description: Annotated[str, Field(max_length=2000)] = ""
    subject: Annotated[str, Field(min_length=1, max_length=128)]
    goal: Annotated[str, Field(min_length=1, max_length=4000)]
    budgets: RunBudgets = RunBudgets()
    grants: list[ScenarioGrant] = []
    confirmations: list[ScenarioConfirmation] = []
    planner: Annotated[list[Any], Field(max_length=10_000)]
    human: list[HumanAction] = []
    faults: FaultPlan | None = None

    @model_validator(mode="after")
    def _unique_confirmation_ids(self) -> Scenario:
        ids = [c.confirmation_id for c in self.confirmations]
        if len(ids) != len(set(ids)):
            raise ValueError("confirmation ids must be unique within a scenario")
        return self


def parse_scenario(text: str | bytes) -> Scenario:
    if len(text) > MAX_SCENARIO_BYTES:
        raise ScenarioError("scenario file is larger than 1 MiB")
    try:
        # strict_json: NaN, a repeated key, a NUL or a lone surrogate is refused up front, also
        # inside planner outputs, which are passed through unvalidated on purpose.
        data = strict_json.loads(text)
    except JsonRefused as exc:
        raise ScenarioError(
            f"scenario is not valid JSON: {exc.message}", code="SCENARIO_NOT_JSON", reason=exc.code
        ) from None
    if not isinstance(data, dict):
        raise ScenarioError("a scenario is a JSON object")
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        problems = [
            f"{'.'.join(str(p) for p in e['loc']) or '$'}: {e['msg']}" for e in exc.errors()
        ]
        raise ScenarioError("; ".join(problems[:10]), problems=problems) from None


def create_run(
    scenario: Scenario,
    *,
    owner: Any = None,
    enqueue: bool = False,
    queue: str | None = None,
    ctx: RunsContext | None = None,
) -> Any:
    """The run a scenario describes: grants and confirmations bound to its new id.

    The subject's limits apply as to every run; the per-user creation rate does not: a scenario
    file (the demo's runs, ``run_fixture``) is no person's request, even where it names the
    run's owner."""
    limits = dataclasses.replace(RunLimits.from_settings(), create_rate="")
    return services.run_create(
        subject=scenario.subject,
        goal=scenario.goal,
        budgets=scenario.budgets,
        grants=[g.model_dump(exclude_unset=True) for g in scenario.grants],
        confirmations=[c.model_dump() for c in scenario.confirmations],
        planner={"kind": "fixture", "outputs": scenario.planner},
        owner=owner,
        faults=scenario.faults.model_dump() if scenario.faults else None,
        enqueue=enqueue,
        queue=queue,
        limits=limits,
        ctx=ctx,
    )


def run_scenario(
    scenario: Scenario, *, owner: Any = None, ctx: RunsContext | None = None
) -> dict[str, Any]:
    """Create the run, advance it in-process, apply ``human`` actions whenever it waits."""
    if scenario.faults and scenario.faults.crash_worker_at:
        # A crash is a real SIGKILL of the process that runs the tool: never this one.
        raise ScenarioError(
            "crash_worker_at needs a worker process: use faultlab", code="SCENARIO_NEEDS_WORKER"
        )
    state = create_run(scenario, owner=owner, ctx=ctx)
    human = list(scenario.human)
    while True:
        state = services.run_advance(run_id=state.run_id, ctx=ctx) or services.run_state(
            run_id=state.run_id, ctx=ctx
        )
        if state.status is not Status.WAITING_CONFIRMATION or not human:
            break
        action = human.pop(0)
        if action.action == "cancel":
            services.run_cancel(run_id=state.run_id, by="scenario", reason=action.reason, ctx=ctx)
            continue
        pending = selectors.confirmation_get(confirmation_id=state.pending_confirmation_id)
        services.confirmation_decide(
            confirmation_id=pending.pk,
            approved=action.action == "approve",
            shown_hash=pending.proposal_hash,
            by="scenario",
            ctx=ctx,
        )
    return selectors.run_export(run_id=state.run_id)

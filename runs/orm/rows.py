"""Rows to domain values and back: the conversions the store, its writers and selectors share."""

from __future__ import annotations

from typing import Any

from agentconsole.kernel import sqlbatch
from memory.domain.working import WorkingItem
from memory.working_rows import working_from_rows, working_read
from policy.domain.observations import Observation, ObservationKind, TrustLabel
from runs import models as m
from runs.domain.state import RunState

# Written once, when the run is created (``runs.orm.store``), never by a step's compare-and-set.
CREATED_FIELDS = ("run_id", "goal", "subject", "tool_policy")
STATE_FIELDS = [f for f in RunState.model_fields if f not in CREATED_FIELDS]


def row_to_state(run: m.Run) -> RunState:
    data = {f: getattr(run, f) for f in STATE_FIELDS}
    return RunState(
        run_id=run.id,
        subject=run.subject,
        goal=run.goal,
        tool_policy=run.tool_policy,
        **data,
    )


# The columns a RunState is made of (``load`` reads only these: not the planner configuration,
# budgets or faults, JSON documents a step never needs and the fixture planner's can be large).
LOAD_COLUMNS = ("id", *CREATED_FIELDS[1:], *STATE_FIELDS)


def run_read(run_id: str) -> sqlbatch.Read:
    return sqlbatch.select(m.Run, LOAD_COLUMNS, {"id": run_id})


def state_from_row(row: tuple[Any, ...]) -> RunState:
    """A RunState from a row of ``run_read``: no model instance is built."""
    return RunState(run_id=row[0], **dict(zip(LOAD_COLUMNS[1:], row[1:], strict=True)))


def state_fields(state: RunState) -> dict[str, Any]:
    dumped = state.model_dump(mode="json")
    return {f: dumped[f] for f in STATE_FIELDS}


def to_observation(row: m.Observation) -> Observation:
    return Observation(
        observation_id=row.observation_id,
        kind=ObservationKind(row.kind),
        trust=TrustLabel(row.trust),
        step=row.step,
        content=row.content,
        content_hash=row.content_hash,
        citable=row.citable,
    )


def working_items(run_id: str) -> list[WorkingItem]:
    """The run's stored working-memory items (bounded by ``memory.domain.working``), read as
    plain values on every step."""
    (rows,) = sqlbatch.fetch([working_read(run_id)])
    return working_from_rows(rows)

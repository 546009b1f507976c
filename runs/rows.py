"""Rows to domain values and back: the conversions the store, its writers and selectors share."""

from __future__ import annotations

from typing import Any

from memory.domain.working import WorkingItem
from memory.models import WorkingMemoryItem
from policy.domain.observations import Observation, ObservationKind, TrustLabel
from runs import models as m
from runs.domain.state import RunState

# Written once, when the run is created (``runs.store``), never by a step's compare-and-set.
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


def to_item(row: WorkingMemoryItem) -> WorkingItem:
    return WorkingItem(
        item_id=row.item_id,
        kind=row.kind,
        content=row.content,
        trust=row.trust,
        source_ids=tuple(row.source_ids),
        created_at_step=row.created_at_step,
        expires_after_step=row.expires_after_step,
        seq=row.seq,
    )

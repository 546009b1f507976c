"""Budgets (seed §8): steps and tool calls counted apart, a deadline, a repeat limit."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

MAX_STEPS_CEILING = 10_000
# The longest deadline a run may have (a week), whatever a deployment's own limit says.
MAX_DEADLINE_MS = 7 * 24 * 3600 * 1000


class RunBudgets(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    max_steps: Annotated[int, Field(ge=1, le=MAX_STEPS_CEILING)] = 8
    max_tool_calls: Annotated[int, Field(ge=0, le=MAX_STEPS_CEILING)] = 4
    max_repeated_proposal: Annotated[int, Field(ge=1, le=100)] = 2
    # Relative to the run's start; the absolute deadline is fixed when the run is created.
    deadline_ms: Annotated[int, Field(ge=1, le=MAX_DEADLINE_MS)] = 300_000

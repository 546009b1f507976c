"""Budgets (seed §8): steps and tool calls counted apart, a deadline, a repeat limit."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

MAX_STEPS_CEILING = 10_000
MAX_REPEATED_PROPOSAL_CEILING = 100
# The longest deadline a run may have (a week), whatever a deployment's own limit says.
MAX_DEADLINE_S = 7 * 24 * 3600
MAX_DEADLINE_MS = MAX_DEADLINE_S * 1000
# Model tokens (input + output, as the endpoint reports them) a run may spend. A fixture
# planner spends none; the default bounds what one model run costs.
MAX_TOKENS_CEILING = 100_000_000
DEFAULT_MAX_TOKENS = 200_000

# The bounds of each budget, shared by a run's budgets and a profile's (runs.domain.profiles).
Steps = Annotated[int, Field(ge=1, le=MAX_STEPS_CEILING)]
ToolCalls = Annotated[int, Field(ge=0, le=MAX_STEPS_CEILING)]
RepeatedProposals = Annotated[int, Field(ge=1, le=MAX_REPEATED_PROPOSAL_CEILING)]
Tokens = Annotated[int, Field(ge=1, le=MAX_TOKENS_CEILING)]


class RunBudgets(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    max_steps: Steps = 8
    max_tool_calls: ToolCalls = 4
    max_repeated_proposal: RepeatedProposals = 2
    # Relative to the run's start; the absolute deadline is fixed when the run is created.
    deadline_ms: Annotated[int, Field(ge=1, le=MAX_DEADLINE_MS)] = 300_000
    max_tokens: Tokens = DEFAULT_MAX_TOKENS


class StepsOwed:
    """A daily step quota (``runs.domain.ports.StepQuota``) that grants each step now and
    counts it, for a transaction that takes a step before the lock its quota is counted under
    (``runs.services.run_create``: a run's first step; ``admit_subject`` pays ``steps``)."""

    def __init__(self) -> None:
        self.steps = 0

    def take(self, subject: str, now_ms: int) -> bool:
        self.steps += 1
        return True

    def give_back(self, subject: str, now_ms: int) -> None:
        self.steps -= 1

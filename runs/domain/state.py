"""The authoritative run state (seed §2.1): small, versioned, the only thing that says what a run
may do next. Everything else (trace, observations, working memory) is derived or evidence."""

from __future__ import annotations

import copy
from typing import Any

from pydantic import BaseModel, ConfigDict

from runs.domain import writes
from runs.domain.budgets import DEFAULT_MAX_TOKENS
from runs.domain.machine import Status


class RunState(BaseModel):
    model_config = ConfigDict(extra="forbid")

    run_id: str
    subject: str
    goal: str
    status: Status = Status.CREATED
    version: int = 0
    step: int = 0
    max_steps: int
    tool_calls: int = 0
    max_tool_calls: int
    max_repeated_proposal: int
    deadline_ms: int
    pending_proposal: dict[str, Any] | None = None
    pending_confirmation_id: str | None = None
    last_observation_id: str | None = None
    stop_reason: str | None = None
    answer: str | None = None
    citations: list[str] = []
    planner_cursor: int = 0
    loop_guard: dict[str, Any] = {}
    knowledge_version: int = 0
    unresolved_effects: int = 0
    trace_seq: int = 0
    # The chain digest of the run's last trace event (runs.domain.trace_chain): "" before the
    # first, None for a run from before the chain (its events carry no digests).
    trace_head: str | None = ""
    observation_seq: int = 0
    # Model tokens spent by the run's planner steps, against its ``max_tokens`` budget.
    max_tokens: int = DEFAULT_MAX_TOKENS
    tokens_used: int = 0
    # The effective tool policy recorded when the run was created (policy.domain.tool_policy);
    # written once, never by a step ({} = each tool's contract mode, as before issue 12).
    tool_policy: dict[str, Any] = {}
    # How the run's writes ended so far (runs.domain.writes): counted in the commit of each
    # decision or outcome. None: a run from before the counting (issue 21), never counted.
    writes_succeeded: int | None = 0
    writes_rejected: int | None = 0
    writes_failed: int | None = 0
    writes_unknown: int | None = 0
    # How much content the run's provenance index holds (policy.domain.origins.taint.budget), in
    # characters. None: it overflowed, or the run is from before the index: every argument
    # then counts as untrusted-derived (fail closed).
    taint_chars: int | None = 0

    def fork(self) -> RunState:
        """A copy to change in place without touching this one: each container is new. Cheaper
        than ``model_copy(deep=True)`` (a generic deep copy: 7% of a step's profile, twice per
        step): the loop guard's entries are flat dicts of numbers, the citations a list of
        strings; the proposal and the policy, free-form JSON, are copied deep."""
        return self.model_copy(
            update={
                "citations": list(self.citations),
                "loop_guard": {k: dict(v) for k, v in self.loop_guard.items()},
                "pending_proposal": copy.deepcopy(self.pending_proposal),
                "tool_policy": copy.deepcopy(self.tool_policy),
            }
        )

    def public(self) -> dict[str, Any]:
        """The seed's RunState fields, snake_case, as scenario output and the API show them,
        with what the run's writes came to (``runs.domain.writes``)."""
        counts = writes.counts_of(self)
        return {
            **self._seed_fields(),
            "writes": counts,
            "outcome_flag": writes.outcome_flag(self.status, counts),
        }

    def _seed_fields(self) -> dict[str, Any]:
        return self.model_dump(
            mode="json",
            include={
                "run_id",
                "status",
                "version",
                "step",
                "max_steps",
                "tool_calls",
                "max_tool_calls",
                "max_repeated_proposal",
                "deadline_ms",
                "pending_proposal",
                "last_observation_id",
                "stop_reason",
                "answer",
                "citations",
            },
        )

"""The runner loop: small, around the pure step functions (STYLE: LangGraph's pregel loop).

    load → (start | precheck | plan → decide) → apply (one transaction) → execute tool (no
    transaction open) → settle → apply → …

The loop never holds a transaction while a planner or tool runs. Every write is
``store.apply(commit)``, a compare-and-set on the run version; on a conflict the loop reloads the
authoritative state and decides again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from policy.domain.contracts import CancelSignal, ToolContract
from policy.domain.decisions import ExecutableCommand
from policy.domain.errors import VersionConflict
from policy.domain.proposals import ToolOutcome, Verification
from policy.domain.registry import ToolRegistry
from runs.domain import step as steps
from runs.domain.machine import Status
from runs.domain.planning import Planner, PlannerContext, PlannerError
from runs.domain.ports import Clock, RunStore
from runs.domain.state import RunState

log = logging.getLogger(__name__)

CONTEXT_OBSERVATIONS = 8
MAX_CONFLICT_RETRIES = 50


@dataclass(frozen=True)
class Execution:
    outcome: ToolOutcome
    verification: Verification | None
    output_violation: str | None
    reconciled: bool
    duration_ms: int


class Executor(Protocol):
    def run(
        self,
        command: ExecutableCommand,
        contract: ToolContract,
        state: RunState,
        cancel: CancelSignal,
    ) -> Execution: ...


class SystemClock:
    def now_ms(self) -> int:
        return int(time.time() * 1000)


class Runner:
    def __init__(
        self,
        *,
        store: RunStore,
        registry: ToolRegistry,
        executor: Executor,
        planner_for: Callable[[dict[str, Any]], Planner],
        clock: Clock | None = None,
        context_extras: Callable[[RunState], dict[str, Any]] | None = None,
    ) -> None:
        self.store = store
        self.registry = registry
        self.executor = executor
        self.planner_for = planner_for
        self.clock = clock or SystemClock()
        self.context_extras = context_extras

    def advance(self, run_id: str, *, max_iterations: int = 100_000) -> RunState:
        """Advance the run until it waits for a person, stops or ends; return its state."""
        planners: list[Planner] = []

        def planner() -> Planner:
            # Built once per advance, from the configuration stored with the run.
            if not planners:
                planners.append(self.planner_for(self.store.planner_config(run_id)))
            return planners[0]

        conflicts = 0
        for _ in range(max_iterations):
            state = self.store.load(run_id)
            try:
                commit = self._next_commit(state, planner)
                if commit is None:
                    return state
                applied = self.store.apply(commit)
            except VersionConflict:
                # Someone else moved the run (a cancel, a decision, another worker): re-decide
                # from the authoritative state. Bounded so a livelock surfaces as an error.
                conflicts += 1
                if conflicts > MAX_CONFLICT_RETRIES:
                    raise
                continue
            if commit.command is not None:
                self._execute(applied, commit.command)
        raise RuntimeError(f"run {run_id} did not settle within {max_iterations} iterations")

    def _next_commit(self, state: RunState, planner: Callable[[], Planner]) -> steps.Commit | None:
        if state.status is Status.CREATED:
            return steps.start(state)
        if state.status is Status.CANCELLING:
            return None if self.store.active_tool(state.run_id) else steps.finish_cancel(state)
        if state.status is not Status.RUNNING:
            return None
        now = self.clock.now_ms()
        resuming = state.pending_proposal is not None
        pre = steps.precheck(state, now_ms=now, resuming=resuming)
        if pre is not None:
            return pre
        raw = None
        source = "pending"
        if not resuming:
            try:
                raw = planner().next(state, self._context(state))
            except PlannerError as exc:
                return steps.fail(state, exc.code)
            source = planner().source
        return steps.decide(
            state,
            raw,
            source=source,
            grants=self.store.grants(state.run_id),
            confirmations=self.store.confirmations(state.run_id),
            registry=self.registry,
            lookups=self.store.lookups(state.run_id),
            now_ms=now,
        )

    def _context(self, state: RunState) -> PlannerContext:
        observations = [
            {
                "observation_id": o.observation_id,
                "kind": o.kind.value,
                "trust": o.trust.value,
                "content": o.content,
            }
            for o in self.store.recent_observations(state.run_id, CONTEXT_OBSERVATIONS)
        ]
        extras = self.context_extras(state) if self.context_extras else {}
        return PlannerContext(
            goal=state.goal,
            step=state.step,
            observations=observations,
            tools=[c.describe() for c in self.registry],
            preferences=extras.get("preferences", {}),
        )

    def _execute(self, state: RunState, command: ExecutableCommand) -> None:
        registered = self.registry.get(command.tool_name, command.tool_version)
        if registered is None:  # the gate only issues commands for registered tools
            raise RuntimeError(f"command for unregistered tool {command.tool_name}")
        contract = registered.contract
        execution = self.executor.run(command, contract, state, CancelSignal())
        for _ in range(MAX_CONFLICT_RETRIES):
            current = self.store.load(state.run_id)
            commit = steps.settle(
                current,
                command,
                execution.outcome,
                contract=contract,
                output_violation=execution.output_violation,
                verification=execution.verification,
                reconciled=execution.reconciled,
                duration_ms=execution.duration_ms,
                lookups=self.store.lookups(state.run_id),
            )
            try:
                self.store.apply(commit)
                return
            except VersionConflict:
                continue  # a cancel landed while the tool ran: settle against the new state
        raise VersionConflict("could not record the tool outcome", run_id=state.run_id)

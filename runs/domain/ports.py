"""Ports the runner talks to (STYLE habit 2). An in-memory adapter (``inmemory_store``) and the ORM
adapter (``runs.orm.store``) implement them and pass one conformance suite."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from memory.domain.working import WorkingItem
from policy.domain.confirmation.confirmations import Confirmation
from policy.domain.contracts import CancelSignal, ToolContract
from policy.domain.decisions import ExecutableCommand
from policy.domain.grants import CapabilityGrant
from policy.domain.observations import Observation
from policy.domain.outcomes import ToolOutcome, Verification
from runs.domain.gateway.calls import CallRecord
from runs.domain.state import RunState
from runs.domain.step.commits import Commit, Lookups


class RunStore(Protocol):
    def create(
        self,
        state: RunState,
        *,
        grants: Sequence[CapabilityGrant],
        confirmations: Sequence[Confirmation],
        planner: dict[str, Any],
    ) -> RunState: ...

    def load(self, run_id: str, *, inputs: bool = False) -> RunState:
        """The run's state. ``inputs``: the caller will read this version's grants,
        confirmations and working memory next (passing ``version``), so an adapter may read
        them in the same round trip and answer those calls from what it read."""
        ...

    def apply(self, commit: Commit) -> RunState:
        """Write the commit atomically iff the run is still at ``commit.expected_version`` and
        every conditional write in it holds; raise ``VersionConflict`` otherwise (nothing
        written). A unique key broken past that check raises ``IntegrityViolation``."""
        ...

    def grants(self, run_id: str, version: int | None = None) -> list[CapabilityGrant]: ...

    def confirmations(self, run_id: str, version: int | None = None) -> list[Confirmation]: ...

    def lookups(self, run_id: str) -> Lookups: ...

    def active_tool(self, run_id: str) -> bool: ...

    def recent_observations(self, run_id: str, limit: int) -> list[Observation]: ...

    def planner_config(self, run_id: str, version: int | None = None) -> dict[str, Any]: ...

    def inputs_kept(self, state: RunState) -> bool:
        """Whether the store knows what a step of ``state``'s version reads (``load`` read it
        with ``inputs``, or the ``apply`` that returned ``state`` could say what it left): then
        the runner goes on from ``state`` without loading the run again. Going on from a state
        another writer has since moved is safe: the next commit's compare-and-set fails."""
        ...

    def working_view(self, run_id: str, step: int, version: int | None = None) -> list[WorkingItem]:
        """The run's bounded working memory as of ``step`` (expired items left out)."""
        ...

    def model_call(self, run_id: str, step: int, version: int | None = None) -> CallRecord | None:
        """The model call recorded for the run's ``step`` (runs.domain.gateway.calls), if any."""
        ...

    def tool_call(self, run_id: str, token: str, attempt: int) -> CallRecord | None:
        """The gateway's call of a command's ``attempt`` (runs.domain.gateway.calls), if one was
        recorded (None: the command runs, or ran, in a worker)."""
        ...

    def started_command(
        self, run_id: str, version: int | None = None
    ) -> tuple[ExecutableCommand, int] | None:
        """The command whose intent committed and whose outcome did not, with its attempt."""
        ...


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

    def recover(
        self,
        command: ExecutableCommand,
        contract: ToolContract,
        state: RunState,
        cancel: CancelSignal,
    ) -> tuple[str, Execution]: ...

    def take(
        self,
        command: ExecutableCommand,
        contract: ToolContract,
        state: RunState,
        outcome: ToolOutcome,
        duration_ms: int,
    ) -> Execution:
        """The outcome of a call made elsewhere (the gateway), through the checks ``run``
        makes after a call: reconcile an unknown outcome, scrub, output schema, verify."""
        ...


# Wraps a tool's execution: renews the worker's lease and turns a "cancelling" run into a
# cancel signal for the running tool. The default watches nothing (in-process runs).
Watch = Callable[[str, CancelSignal], AbstractContextManager[None]]


@contextlib.contextmanager
def no_watch(run_id: str, cancel: CancelSignal) -> Iterator[None]:
    yield


class StepQuota(Protocol):
    """A subject's daily step quota (``runs.start.limits``): one unit taken before each planner
    step."""

    def take(self, subject: str, now_ms: int) -> bool: ...

    def give_back(self, subject: str, now_ms: int) -> None: ...

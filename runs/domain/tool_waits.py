"""The runner's half of a tool call made by the gateway (issue 22 item 4;
runs.domain.gateway.calls).

A command whose contract can wait (``ToolContract.waiting``: an MCP tool), in a runner that
defers calls, is not run in the worker: its ledger intent commits with the request for the
gateway (``deferred``) and the worker lets go of the run. Once the gateway has recorded the
outcome, the next worker finds the command ``started`` and takes the outcome (``take``)
through the same code as a call it made itself: the executor's checks after a call
(``Executor.take``), the retry policy, ``settle``. Functions of the runner, kept apart so
the loop stays small.
"""

from __future__ import annotations

from typing import Protocol

from policy.domain.contracts import SideEffect, ToolContract
from policy.domain.decisions import ExecutableCommand, reissue
from policy.domain.outcomes import OutcomeStatus
from runs.domain import lifecycle
from runs.domain import telemetry as tel
from runs.domain.clock import Clock
from runs.domain.errors import VersionConflict
from runs.domain.gateway.calls import OPEN, SETTLED, ToolRequest, recorded_outcome, tool_call_id
from runs.domain.machine import Status
from runs.domain.ports import Execution, Executor, RunStore
from runs.domain.state import RunState
from runs.domain.step.commits import Commit
from runs.domain.telemetry import Telemetry


class Runner(Protocol):
    """What of ``runs.domain.runner.Runner`` these functions use (its own steps included)."""

    store: RunStore
    executor: Executor
    clock: Clock
    telemetry: Telemetry
    defer_calls: bool

    def _contract(self, command: ExecutableCommand) -> ToolContract: ...

    def _recover(self, state: RunState, command: ExecutableCommand, attempt: int) -> None: ...

    def _settle(
        self,
        state: RunState | None,
        command: ExecutableCommand,
        contract: ToolContract,
        execution: Execution,
        *,
        run_id: str = "",
        consume: str | None = None,
    ) -> RunState: ...


def deferred(runner: Runner, commit: Commit) -> tuple[str, ToolRequest] | None:
    """The gateway's call of the command ``commit`` records its intent of, or None: the
    worker runs it (the runner makes no deferred calls, or the tool cannot wait)."""
    command = commit.command
    if command is None or not runner.defer_calls:
        return None
    contract = runner._contract(command)
    if contract.waiting is None:
        return None
    return _request(runner, command, contract, commit.state, attempt=1, delay_ms=0)


def _request(
    runner: Runner,
    command: ExecutableCommand,
    contract: ToolContract,
    state: RunState,
    *,
    attempt: int,
    delay_ms: int,
) -> tuple[str, ToolRequest]:
    assert contract.waiting is not None  # noqa: S101 - only tools that can wait get here
    start = runner.clock.now_ms() + delay_ms
    # The tool's deadline counts from when it may be sent, as the executor's from its attempt.
    fresh = reissue(
        command, run_deadline_ms=state.deadline_ms, now_ms=start, timeout_ms=contract.timeout_ms
    )
    request = ToolRequest.of(
        fresh,
        contract,
        lane=contract.waiting.lane,
        attempt=attempt,
        step=state.step,
        not_before_ms=start if delay_ms else 0,
        trace=runner.telemetry.trace_headers() if runner.telemetry.enabled else None,
    )
    return tool_call_id(state.run_id, command.idempotency_token, attempt), request


def take(runner: Runner, state: RunState, command: ExecutableCommand, attempt: int) -> bool:
    """Settle a ``started`` command; True while the run waits on its call in the gateway.

    1. No call recorded for this attempt: the worker that ran the tool died. The ledger's
       recovery rule settles it (``Runner._recover``: reconcile, re-run or hand off).
    2. The call is open: the run waits (the gateway sends it back). Past the run's deadline
       it stops waiting: cancelling abandons the call, then 3.
    3. Answered, or let go by the run: its outcome through the executor's checks. A
       retryable failure with attempts left records the next attempt's call (the run waits
       again); anything else is settled, consuming the call.
    """
    call = runner.store.tool_call(state.run_id, command.idempotency_token, attempt)
    if call is None:
        runner._recover(state, command, attempt)
        return False
    if call.status in OPEN:
        if state.status is not Status.RUNNING or runner.clock.now_ms() < state.deadline_ms:
            return True
        try:
            state = runner.store.apply(lifecycle.deadline_during_tool(state))
        except VersionConflict:
            state = runner.store.load(state.run_id)  # a cancel landed first: it let go too
        call = runner.store.tool_call(state.run_id, command.idempotency_token, attempt)
        if call is None or call.status in OPEN:
            return True  # moved otherwise meanwhile: the sweeper sends the run again
    contract = runner._contract(command)
    read_only = contract.side_effect is SideEffect.READ
    outcome, duration_ms = recorded_outcome(call, read_only=read_only)
    with tel.tool_span(runner.telemetry, contract, attempt) as span:
        execution = runner.executor.take(command, contract, state, outcome, duration_ms)
        tel.describe_execution(runner.telemetry, span, execution)
    consume = call.call_id if call.status in SETTLED else None
    policy = contract.retry
    if (
        consume is not None
        and state.status is Status.RUNNING
        and outcome.status is OutcomeStatus.FAILED
        and outcome.retryable
        and policy is not None
        and attempt < policy.max_attempts
    ):
        delay = policy.delay_ms(attempt)
        commit = lifecycle.retrying(
            state, command, attempt=attempt + 1, code=outcome.code, delay_ms=delay
        )
        commit.tool_request = _request(
            runner, command, contract, state, attempt=attempt + 1, delay_ms=delay
        )
        commit.consume_call = consume
        try:
            runner.store.apply(commit)
            return True
        except VersionConflict:
            pass  # the run moved (a cancel): no new attempt; the failure is settled below
    runner._settle(None, command, contract, execution, run_id=state.run_id, consume=consume)
    return False

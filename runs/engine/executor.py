"""Runs one executable command: deadline, cooperative cancel, secrets injection, output scrub,
reconcile on an unknown outcome, output schema and post-condition check, crash recovery.

Plain Python (threads, and a child process for isolated tools). The Django wiring passes
``on_thread_exit`` to close the tool thread's database connection.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from policy.domain.contracts import CancelSignal, SideEffect, ToolContext, ToolContract
from policy.domain.decisions import ExecutableCommand
from policy.domain.outcomes import OutcomeStatus, ToolOutcome, Verification
from policy.domain.registry import ToolRegistry
from policy.domain.secrets.redaction import scrub
from runs.domain.clock import SYSTEM_CLOCK
from runs.domain.ports import Execution
from runs.domain.state import RunState

log = logging.getLogger(__name__)

# After a deadline or cancel, how long a tool may take to reach its next interruptible point
# before its outcome is declared unknown.
CANCEL_GRACE_S = 0.5

Call = Callable[[ToolContract, dict[str, Any], ToolContext, ExecutableCommand], ToolOutcome]


class ThreadExecutor:
    def __init__(
        self,
        *,
        registry: ToolRegistry,
        secrets: Mapping[str, Mapping[str, str]] | None = None,
        services: Mapping[str, Any] | None = None,
        on_thread_exit: Callable[[], None] | None = None,
        clock: Callable[[], int] = SYSTEM_CLOCK.now_ms,
        isolated_call: Call | None = None,
        trace_headers: Callable[[], Mapping[str, str]] | None = None,
    ) -> None:
        self.registry = registry
        self.secrets = secrets or {}
        self.services = services or {}
        self.on_thread_exit = on_thread_exit
        self.clock = clock
        # Runs a tool marked ``isolated`` in a child process that is killed at its deadline.
        self.isolated_call = isolated_call
        # The W3C trace context of the current (tool) span, handed to the tool so it (or the HTTP
        # server it calls) continues the trace. Read here, in the runner's thread: the tool's
        # own thread does not inherit the tracing context.
        self.trace_headers = trace_headers

    def run(
        self,
        command: ExecutableCommand,
        contract: ToolContract,
        state: RunState,
        cancel: CancelSignal,
    ) -> Execution:
        ctx = self.context(command, contract, state, cancel)
        started = time.monotonic()
        args = dict(command.validated_arguments)
        if contract.isolated and self.isolated_call is not None:
            isolated = self.isolated_call
            outcome = isolated(contract, args, ctx, command)
        else:
            outcome = self._call(lambda: contract.execute(args, ctx), command, cancel)
        return self._conclude(outcome, command, contract, ctx, started)

    def take(
        self,
        command: ExecutableCommand,
        contract: ToolContract,
        state: RunState,
        outcome: ToolOutcome,
        duration_ms: int,
    ) -> Execution:
        """A call the gateway made (runs.calls), concluded as ``run`` concludes its own."""
        ctx = self.context(command, contract, state, CancelSignal())
        started = time.monotonic() - duration_ms / 1000
        return self._conclude(outcome, command, contract, ctx, started)

    def _conclude(
        self,
        outcome: ToolOutcome,
        command: ExecutableCommand,
        contract: ToolContract,
        ctx: ToolContext,
        started: float,
    ) -> Execution:
        reconciled = False
        if outcome.status is OutcomeStatus.UNKNOWN and contract.reconcile is not None:
            # seed §15: never retry blind under a new token; ask the world with the same one.
            checked = self._reconcile(command, contract, ctx)
            if checked.status is not OutcomeStatus.UNKNOWN:
                outcome, reconciled = checked, True
        return self._finish(outcome, command, contract, ctx, started, reconciled)

    def recover(
        self,
        command: ExecutableCommand,
        contract: ToolContract,
        state: RunState,
        cancel: CancelSignal,
    ) -> tuple[str, Execution]:
        """Settle a command whose worker died between intent and outcome.

        1. ``reconcile(token)`` when the tool has one: the world says what happened. Present:
           the outcome is recorded as reconciled. Absent: executing the command now, under the
           same token, is its first effect, not a second one.
        2. Without an answer, a read or an idempotent write is executed again under the same
           token: a repeated call cannot make a second effect.
        3. Otherwise the effect is unknown: a person decides (handoff).
        """
        ctx = self.context(command, contract, state, cancel)
        started = time.monotonic()
        replayable = contract.side_effect in (SideEffect.READ, SideEffect.IDEMPOTENT_WRITE)
        if contract.reconcile is not None:
            checked = self._reconcile(command, contract, ctx)
            if checked.status is OutcomeStatus.SUCCEEDED:
                return "reconciled", self._finish(checked, command, contract, ctx, started, True)
            if checked.status is not OutcomeStatus.UNKNOWN:
                replayable = True  # known absent
        if replayable and cancel.cancelled:
            # Known absent (or harmless to repeat), but the run is being cancelled: nothing
            # starts; the effect is known not to have happened.
            stopped = ToolOutcome.failed("CANCELLED", "not re-run: the run is cancelling",
                                         retryable=False)  # fmt: skip
            return "not-rerun-cancelled", self._finish(
                stopped, command, contract, ctx, started, False
            )
        if replayable:
            # The base run on purpose: ``contract`` is already what the caller prepared (a
            # fault-injecting subclass has wrapped it once; its run() would wrap it again).
            return "re-executed", ThreadExecutor.run(self, command, contract, state, cancel)
        unknown = ToolOutcome.unknown("WORKER_LOST", "the worker died while the tool ran")
        return "unknown", self._finish(unknown, command, contract, ctx, started, False)

    def _reconcile(
        self, command: ExecutableCommand, contract: ToolContract, ctx: ToolContext
    ) -> ToolOutcome:
        reconcile = contract.reconcile
        if reconcile is None:
            return ToolOutcome.unknown("NO_RECONCILE", "the tool cannot be asked")
        args = dict(command.validated_arguments)
        token = command.idempotency_token
        return self._call(
            lambda: reconcile(token, args, ctx),
            command,
            CancelSignal(),
            budget_ms=contract.timeout_ms,
        )

    def _finish(
        self,
        outcome: ToolOutcome,
        command: ExecutableCommand,
        contract: ToolContract,
        ctx: ToolContext,
        started: float,
        reconciled: bool,
    ) -> Execution:
        outcome = scrubbed(outcome, ctx.secrets)
        violation = None
        verification = None
        if outcome.status is OutcomeStatus.SUCCEEDED:
            registered = self.registry.get(contract.name, contract.version)
            found = registered.output_violation(outcome.value) if registered else None
            violation = found.code if found else None
            if violation is None and contract.verify is not None:
                args = dict(command.validated_arguments)
                verification = self._verify(contract, args, outcome.value or {}, ctx)
                if ctx.secrets:
                    verification = verification.model_copy(
                        update={
                            "code": scrub(verification.code, ctx.secrets.values()),
                            "details": scrub(verification.details, ctx.secrets.values()),
                        }
                    )
        return Execution(
            outcome=outcome,
            verification=verification,
            output_violation=violation,
            reconciled=reconciled,
            duration_ms=int((time.monotonic() - started) * 1000),
        )

    def context(
        self,
        command: ExecutableCommand,
        contract: ToolContract,
        state: RunState,
        cancel: CancelSignal,
    ) -> ToolContext:
        secrets = tool_secrets(self.secrets, contract)
        return ToolContext(
            run_id=state.run_id,
            subject=state.subject,
            step=state.step,
            idempotency_token=command.idempotency_token,
            deadline_ms=command.deadline_ms,
            cancel=cancel,
            confirmation_id=command.confirmation_id,
            proposal_id=command.proposal_id,
            secrets=secrets,
            trace_headers=dict(self.trace_headers()) if self.trace_headers else {},
            services=self.services,
        )

    def _call(
        self,
        fn: Callable[[], ToolOutcome],
        command: ExecutableCommand,
        cancel: CancelSignal,
        budget_ms: int | None = None,
    ) -> ToolOutcome:
        remaining_ms = budget_ms if budget_ms is not None else command.deadline_ms - self.clock()
        if remaining_ms <= 0:
            return ToolOutcome.failed("TOOL_DEADLINE_EXCEEDED", "no time left", retryable=False)
        box: list[ToolOutcome] = []

        def target() -> None:
            try:
                box.append(_checked(fn()))
            except Exception as exc:  # an adapter bug: a stable internal code, never a traceback
                log.warning("tool %s raised %s", command.tool_name, type(exc).__name__)
                box.append(
                    ToolOutcome.failed("TOOL_INTERNAL_ERROR", type(exc).__name__, retryable=False)
                )
            finally:
                if self.on_thread_exit is not None:
                    self.on_thread_exit()

        thread = threading.Thread(target=target, name=f"tool-{command.tool_name}", daemon=True)
        thread.start()
        # Wake on completion, deadline or cancel, whichever comes first.
        deadline = time.monotonic() + remaining_ms / 1000
        while thread.is_alive() and time.monotonic() < deadline and not cancel.cancelled:
            thread.join(min(0.05, max(0.0, deadline - time.monotonic())))
        if thread.is_alive():
            if not cancel.cancelled:
                cancel.cancel("TOOL_TIMEOUT")
            thread.join(CANCEL_GRACE_S)
        if box:
            return box[0]
        code = "TOOL_TIMEOUT" if cancel.reason == "TOOL_TIMEOUT" else "TOOL_CANCEL_UNCONFIRMED"
        return ToolOutcome.unknown(code, "the tool did not stop or answer in time")

    def _verify(
        self, contract: ToolContract, args: dict[str, Any], value: dict[str, Any], ctx: ToolContext
    ) -> Verification:
        if contract.verify is None:
            return Verification(ok=True)
        try:
            return contract.verify(args, value, ctx)
        except Exception as exc:
            log.warning("verify of %s raised %s", contract.name, type(exc).__name__)
            return Verification(ok=False, code="VERIFY_INTERNAL_ERROR")


def tool_secrets(
    secrets: Mapping[str, Mapping[str, str]], contract: ToolContract
) -> dict[str, str]:
    """The secrets a tool gets: those its contract names, of the ones configured for it."""
    return {k: v for k, v in secrets.get(contract.name, {}).items() if k in contract.secret_names}


def _checked(value: Any) -> ToolOutcome:
    if not isinstance(value, ToolOutcome):
        return ToolOutcome.failed(
            "TOOL_CONTRACT_VIOLATION", "tool returned no ToolOutcome", retryable=False
        )
    return value


def scrubbed(outcome: ToolOutcome, secrets: Mapping[str, str]) -> ToolOutcome:
    """The outcome with the tool's secrets replaced wherever they show."""
    if not secrets:
        return outcome
    return outcome.model_copy(
        update={
            "value": scrub(outcome.value, secrets.values()),
            "message": scrub(outcome.message, secrets.values()),
            "code": scrub(outcome.code, secrets.values()),
        }
    )

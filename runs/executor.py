"""Runs one executable command: deadline, cooperative cancel, secrets injection, output scrub,
reconcile on an unknown outcome, output schema and post-condition check.

Plain Python (threads). The Django wiring passes ``on_thread_exit`` to close the tool thread's
database connection.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from policy.domain.contracts import CancelSignal, ToolContext, ToolContract
from policy.domain.decisions import ExecutableCommand
from policy.domain.proposals import OutcomeStatus, ToolOutcome, Verification
from policy.domain.redaction import scrub
from policy.domain.registry import ToolRegistry
from runs.domain.runner import Execution
from runs.domain.state import RunState

log = logging.getLogger(__name__)

# After a deadline or cancel, how long a tool may take to reach its next interruptible point
# before its outcome is declared unknown.
CANCEL_GRACE_S = 0.5


class ThreadExecutor:
    def __init__(
        self,
        *,
        registry: ToolRegistry,
        secrets: Mapping[str, Mapping[str, str]] | None = None,
        services: Mapping[str, Any] | None = None,
        on_thread_exit: Callable[[], None] | None = None,
        clock: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self.registry = registry
        self.secrets = secrets or {}
        self.services = services or {}
        self.on_thread_exit = on_thread_exit
        self.clock = clock

    def run(
        self,
        command: ExecutableCommand,
        contract: ToolContract,
        state: RunState,
        cancel: CancelSignal,
    ) -> Execution:
        secrets = {
            k: v
            for k, v in self.secrets.get(contract.name, {}).items()
            if k in contract.secret_names
        }
        ctx = ToolContext(
            run_id=state.run_id,
            subject=state.subject,
            step=state.step,
            idempotency_token=command.idempotency_token,
            deadline_ms=command.deadline_ms,
            cancel=cancel,
            confirmation_id=command.confirmation_id,
            secrets=secrets,
            services=self.services,
        )
        started = time.monotonic()
        args = dict(command.validated_arguments)
        outcome = self._call(lambda: contract.execute(args, ctx), command, cancel)
        reconciled = False
        if outcome.status is OutcomeStatus.UNKNOWN and contract.reconcile is not None:
            # seed §15: never retry blind under a new token; ask the world with the same one.
            checked = self._call(
                lambda: contract.reconcile(command.idempotency_token, args, ctx),
                command,
                CancelSignal(),
                budget_ms=contract.timeout_ms,
            )
            if checked.status is not OutcomeStatus.UNKNOWN:
                outcome, reconciled = checked, True
        outcome = _scrubbed(outcome, secrets)
        violation = None
        verification = None
        if outcome.status is OutcomeStatus.SUCCEEDED:
            registered = self.registry.get(contract.name, contract.version)
            found = registered.output_violation(outcome.value) if registered else None
            violation = found.code if found else None
            if violation is None and contract.verify is not None:
                verification = self._verify(contract, args, outcome.value or {}, ctx)
        return Execution(
            outcome=outcome,
            verification=verification,
            output_violation=violation,
            reconciled=reconciled,
            duration_ms=int((time.monotonic() - started) * 1000),
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
                box.append(_checked(fn(), command))
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
        thread.join(remaining_ms / 1000)
        if thread.is_alive():
            cancel.cancel("TOOL_TIMEOUT")
            thread.join(CANCEL_GRACE_S)
        if box:
            return box[0]
        return ToolOutcome.unknown("TOOL_TIMEOUT", "the tool did not answer before its deadline")

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


def _checked(value: Any, command: ExecutableCommand) -> ToolOutcome:
    if not isinstance(value, ToolOutcome):
        return ToolOutcome.failed(
            "TOOL_CONTRACT_VIOLATION", "tool returned no ToolOutcome", retryable=False
        )
    return value


def _scrubbed(outcome: ToolOutcome, secrets: Mapping[str, str]) -> ToolOutcome:
    if not secrets:
        return outcome
    return outcome.model_copy(
        update={
            "value": scrub(outcome.value, secrets.values()),
            "message": scrub(outcome.message, secrets.values()),
        }
    )

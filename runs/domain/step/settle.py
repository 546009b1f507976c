"""A tool call came back: its outcome → ledger settle, observation, and what the run does next."""

from __future__ import annotations

from typing import Any

from policy.domain import canonical as hashing
from policy.domain.contracts import ToolContract
from policy.domain.decisions import ExecutableCommand
from policy.domain.gate import command_fingerprint
from policy.domain.observations import ObservationKind, TrustLabel, at_most, least_trusted
from policy.domain.outcomes import OutcomeStatus, ToolOutcome, Verification
from policy.domain.secrets.redaction import redact_secrets
from runs.domain import trace as ev
from runs.domain.ledger import LedgerStatus
from runs.domain.machine import Event, Status, StopReason
from runs.domain.state import RunState
from runs.domain.step.commits import Builder, Commit, LedgerSettle, Lookups


def settle(
    state: RunState,
    command: ExecutableCommand,
    outcome: ToolOutcome,
    *,
    contract: ToolContract,
    output_violation: str | None,
    verification: Verification | None,
    reconciled: bool,
    duration_ms: int,
    lookups: Lookups,
) -> Commit:
    """Record what a tool call did and decide what the run does next.

    Only a succeeded call whose output matches its schema and whose post-condition holds
    becomes citable evidence (seed §18: post-condition before business state moves on).
    """
    b = Builder(state, lookups)
    # A tool's output is untrusted text: secrets in it are replaced before the ledger, the
    # trace hashes and the observation see it.
    outcome = _redacted_outcome(outcome)
    if verification is not None:
        verification = verification.model_copy(
            update={"details": redact_secrets(verification.details)}
        )
    out_size = len(hashing.canonical(outcome.value).encode("utf-8")) if outcome.value else 0
    b.emit(
        ev.TOOL_COMPLETED,
        command.proposal_id,
        tool=command.tool_name,
        status=outcome.status.value,
        code=outcome.code,
        duration_ms=duration_ms,
        output_bytes=out_size,
        reconciled=reconciled,
    )
    # Counted before the run may stop below, so ``run.stopped`` includes this write.
    b.count_write(contract, _write_outcome(outcome, output_violation, verification))
    if outcome.status is OutcomeStatus.SUCCEEDED and output_violation is not None:
        _output_invalid(b, command, outcome, output_violation)
    elif outcome.status is OutcomeStatus.SUCCEEDED:
        _succeeded(b, command, outcome, contract, verification, reconciled=reconciled)
    elif outcome.status is OutcomeStatus.UNKNOWN:
        _unknown(b, command, outcome)
    else:
        _no_effect(b, command, outcome)
    b.absorb(command_fingerprint(command))
    return b.done()


def _write_outcome(
    outcome: ToolOutcome, output_violation: str | None, verification: Verification | None
) -> OutcomeStatus:
    """How the call counts in the run's write summary (runs.domain.writes): a success whose
    output broke its schema or whose post-condition failed did not do what was asked."""
    if outcome.status is OutcomeStatus.SUCCEEDED and (
        output_violation is not None or (verification is not None and not verification.ok)
    ):
        return OutcomeStatus.FAILED
    return outcome.status


def _output_invalid(
    b: Builder, command: ExecutableCommand, outcome: ToolOutcome, violation: str
) -> None:
    b.commit.ledger_settle = LedgerSettle(
        command.idempotency_token,
        LedgerStatus.FAILED,
        _outcome_summary(outcome, "TOOL_OUTPUT_INVALID"),
    )
    b.emit(ev.TOOL_RESULT_VALIDATED, command.proposal_id, valid=False, code=violation)
    b.fail_or_cancel(StopReason.TOOL_OUTPUT_INVALID, command.proposal_id, known=True)


def _succeeded(
    b: Builder,
    command: ExecutableCommand,
    outcome: ToolOutcome,
    contract: ToolContract,
    verification: Verification | None,
    *,
    reconciled: bool,
) -> None:
    pid, token = command.proposal_id, command.idempotency_token
    if verification is not None and not verification.ok:
        code = verification.code or "TOOL_POSTCONDITION_FAILED"
        b.commit.ledger_settle = LedgerSettle(
            token,
            LedgerStatus.COMPENSATION_REQUIRED,
            _outcome_summary(outcome),
            verification.model_dump(),
        )
        b.emit(ev.TOOL_VERIFICATION_FAILED, pid, code=code)
        b.commit.handoff_reason = StopReason.TOOL_POSTCONDITION_FAILED
        b.fail_or_cancel(StopReason.TOOL_POSTCONDITION_FAILED, pid, known=True)
        return
    b.commit.ledger_settle = LedgerSettle(
        token,
        LedgerStatus.RECONCILED if reconciled else LedgerStatus.SUCCEEDED,
        _outcome_summary(outcome),
        verification.model_dump() if verification else None,
    )
    trust, parts = _labelled(outcome, contract.output_trust)
    b.emit(
        ev.TOOL_RESULT_VALIDATED,
        pid,
        valid=True,
        verified=verification is not None,
        output_hash=hashing.content_hash(outcome.value),
        **({"untrusted_parts": _untrusted(parts)} if parts else {}),
    )
    content = {**_base(command), "status": "succeeded", "value": outcome.value}
    if parts:
        content["part_trust"] = parts
    b.observe("tool", ObservationKind.TOOL_RESULT, trust, content, citable=True)
    b.continue_or_cancel(pid)


def _labelled(outcome: ToolOutcome, ceiling: TrustLabel) -> tuple[TrustLabel, dict[str, str]]:
    """The observation's label and, when the tool labelled parts, each part's label.

    Every label is capped at the contract's ``output_trust``; the observation as a whole is as
    trusted as its least trusted part, so ``when_untrusted`` and the planner's untrusted-data
    framing see a result that carries any retrieved text as untrusted."""
    if not outcome.part_trust or not isinstance(outcome.value, dict):
        return ceiling, {}
    parts = {k: at_most(outcome.part_trust.get(k, ceiling), ceiling) for k in outcome.value}
    return least_trusted(list(parts.values())), {k: v.value for k, v in sorted(parts.items())}


def _untrusted(parts: dict[str, str]) -> list[str]:
    # Key names only (the output schema's), cut short: the trace holds no output content.
    return [k[:64] for k, v in parts.items() if v == TrustLabel.UNTRUSTED_CONTENT][:32]


def _unknown(b: Builder, command: ExecutableCommand, outcome: ToolOutcome) -> None:
    """The effect may or may not have happened: the run stops and a person must look."""
    pid = command.proposal_id
    b.commit.ledger_settle = LedgerSettle(
        command.idempotency_token, LedgerStatus.UNKNOWN, _outcome_summary(outcome)
    )
    b.s.unresolved_effects += 1
    b.commit.handoff_reason = StopReason.TOOL_OUTCOME_UNKNOWN
    if b.s.status is Status.CANCELLING:
        b.stop(Event.UNKNOWN_EFFECT, StopReason.TOOL_OUTCOME_UNKNOWN, pid, code=outcome.code)
    else:
        b.stop(Event.FAIL, StopReason.TOOL_OUTCOME_UNKNOWN, pid, code=outcome.code)


def _no_effect(b: Builder, command: ExecutableCommand, outcome: ToolOutcome) -> None:
    """Rejected, or failed: known not to have taken effect."""
    pid = command.proposal_id
    b.commit.ledger_settle = LedgerSettle(
        command.idempotency_token, LedgerStatus(outcome.status.value), _outcome_summary(outcome)
    )
    content = {**_base(command), "status": outcome.status.value, "code": outcome.code}
    if outcome.status is OutcomeStatus.REJECTED and outcome.value:
        content["details"] = outcome.value
    if outcome.status is OutcomeStatus.FAILED:
        content["retryable"] = outcome.retryable
    b.observe("tool", ObservationKind.TOOL_RESULT, TrustLabel.TRUSTED_TOOL, content)
    if outcome.status is OutcomeStatus.FAILED and not outcome.retryable:
        b.fail_or_cancel(StopReason.TOOL_FAILED, pid, known=True, code=outcome.code)
        return
    b.continue_or_cancel(pid)


def _base(command: ExecutableCommand) -> dict[str, Any]:
    return {"tool": command.tool_name, "version": command.tool_version}


def _redacted_outcome(outcome: ToolOutcome) -> ToolOutcome:
    value = redact_secrets(outcome.value)
    message = redact_secrets(outcome.message)
    if value is outcome.value and message is outcome.message:
        return outcome
    return outcome.model_copy(update={"value": value, "message": message})


def _outcome_summary(outcome: ToolOutcome, code: str | None = None) -> dict[str, Any]:
    return {
        "status": outcome.status.value,
        "code": code or outcome.code,
        "retryable": outcome.retryable,
        "value_hash": hashing.content_hash(outcome.value) if outcome.value is not None else None,
    }

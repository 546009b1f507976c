"""The small step functions of a run's life outside planning and tool results: start, prechecks,
cancel, a person's confirmation answer, failures, deadlines, retries, recoveries, handoff events."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from policy.domain.confirmation.approvers import DEFAULT_RULE, ApproverRule, approvals_needed
from policy.domain.confirmation.confirmations import ConfirmationStatus
from policy.domain.contracts import ToolContract
from policy.domain.decisions import ExecutableCommand
from policy.domain.observations import ObservationKind, TrustLabel
from policy.domain.outcomes import OutcomeStatus
from runs.domain import trace as ev
from runs.domain import writes
from runs.domain.gateway.calls import ModelRequest
from runs.domain.machine import Event, Status, StopReason
from runs.domain.state import RunState
from runs.domain.step.commits import ApprovalRecord, Builder, Commit, proposal_id_of
from runs.domain.trace import MAX_DETAIL_STRING

MAX_DECISION_REASON = 1_000  # what a person writes with a decision (the console's form caps it)


def start(state: RunState) -> Commit:
    """created → running, with the user's request recorded as observation ``user-1``."""
    b = Builder(state, None)
    b.emit(ev.RUN_STARTED, None, step=0)
    b.move(Event.START)
    # The id ``user-1`` is fixed by SPEC §3 so that scenario files can cite the request.
    b.observe(
        "user",
        ObservationKind.USER_REQUEST,
        TrustLabel.USER,
        {"goal": state.goal},
        observation_id="user-1",
    )
    return b.done()


def precheck(state: RunState, *, now_ms: int, resuming: bool) -> Commit | None:
    """Before every step (seed §8): deadline, then the step budget. None means go on."""
    if state.status is not Status.RUNNING:
        return None
    if now_ms >= state.deadline_ms:
        b = Builder(state, None)
        b.stop(Event.DEADLINE_REACHED, StopReason.DEADLINE_REACHED, step=state.step)
        return b.done()
    if not resuming and state.step >= state.max_steps:
        b = Builder(state, None)
        b.stop(Event.FAIL, StopReason.MAX_STEPS_REACHED, step=state.step)
        b.commit.handoff_reason = StopReason.MAX_STEPS_REACHED
        return b.done()
    if not resuming and state.tokens_used >= state.max_tokens:
        return tokens_exhausted(state)
    return None


def tokens_exhausted(state: RunState) -> Commit:
    """The run's model tokens are spent: it stops as at MAX_STEPS_REACHED (failed, handoff)."""
    b = Builder(state, None)
    b.stop(
        Event.FAIL,
        StopReason.MAX_TOKENS_REACHED,
        None,
        tokens_used=state.tokens_used,
        max_tokens=state.max_tokens,
    )
    b.commit.handoff_reason = StopReason.MAX_TOKENS_REACHED
    return b.done()


def request_cancel(state: RunState, *, by: str, reason: str, active_tool: bool) -> Commit:
    """A cancel command. With no active tool there is no effect to check: cancelled at once."""
    b = Builder(state, None)
    b.emit(ev.RUN_CANCEL_REQUESTED, None, by=by, reason=reason[:256])
    if state.status is Status.RUNNING:
        b.move(Event.CANCEL_REQUESTED)
        if not active_tool:
            b.stop(Event.EFFECTS_CHECKED, StopReason.CANCELLED, None, by=by)
        return b.done()
    b.stop(Event.CANCEL_REQUESTED, StopReason.CANCELLED, None, by=by)
    b.commit.expire_pending_confirmations = True
    return b.done()


def decide_confirmation(
    state: RunState,
    *,
    confirmation_id: str,
    approved: bool,
    by: str,
    reason: str = "",
    rule: ApproverRule = DEFAULT_RULE,
    earlier: Sequence[tuple[str, str]] = (),
    independent: bool = False,
    contract: ToolContract | None = None,
) -> Commit:
    """A person answered the pending confirmation of this run (with their reason, if any).

    ``earlier`` are the approvals recorded before this answer, as (name, reason): the event
    names every approver (and the decline of a four-eyes item names who had approved).
    ``contract``: the pending tool's, so a declined write counts as rejected (an approved one
    is counted when it is settled)."""
    b = Builder(state, None)
    pid = proposal_id_of(state.pending_proposal)
    reason = reason[:MAX_DECISION_REASON]
    decision = ConfirmationStatus.APPROVED if approved else ConfirmationStatus.DECLINED
    b.commit.confirmation_decision = (confirmation_id, decision.value, reason)
    approvals = list(earlier)
    if approved:
        approvals.append((by, reason))
        b.commit.confirmation_approval = ApprovalRecord(confirmation_id, by, reason, independent)
    b.emit(
        ev.CONFIRMATION_DECIDED,
        pid,
        confirmation_id=confirmation_id,
        decision="approved" if approved else "declined",
        by=by,
        **_said(reason),
        **_approvals(rule, approvals),
    )
    if approved:
        b.move(Event.CONFIRMED, pid)
        b.s.stop_reason = None
        return b.done()
    b.s.pending_proposal = None
    b.s.pending_confirmation_id = None
    b.s.stop_reason = None
    b.move(Event.DECLINED, pid)
    b.count_write(contract, OutcomeStatus.REJECTED)
    b.reject(pid, "confirmation", "CONFIRMATION_DECLINED", confirmation_id=confirmation_id)
    return b.done()


def record_approval(
    state: RunState,
    *,
    confirmation_id: str,
    by: str,
    reason: str,
    rule: ApproverRule,
    earlier: Sequence[tuple[str, str]] = (),
    independent: bool,
) -> Commit:
    """One approval of several needed (four eyes): stored and traced; the run keeps waiting
    (no transition), its version moves so a concurrent approval of the same item conflicts."""
    b = Builder(state, None)
    reason = reason[:MAX_DECISION_REASON]
    b.commit.confirmation_approval = ApprovalRecord(confirmation_id, by, reason, independent)
    approvals = [*earlier, (by, reason)]
    b.emit(
        ev.CONFIRMATION_APPROVAL_RECORDED,
        proposal_id_of(state.pending_proposal),
        confirmation_id=confirmation_id,
        by=by,
        needed=approvals_needed(rule),
        **_said(reason),
        **_approvals(rule, approvals),
    )
    return b.done()


def _said(reason: str) -> dict[str, str]:
    # The trace holds a summary (MAX_DETAIL_STRING); the whole reason is on the confirmation.
    return {"reason": reason[:MAX_DETAIL_STRING]} if reason else {}


def _approvals(rule: ApproverRule, approvals: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """Who approved, in order, with their reasons (the audit of issue 12 item 3)."""
    return {
        "approvers": rule.value,
        "approved_by": [name for name, _ in approvals],
        "approval_reasons": [r[:MAX_DETAIL_STRING] for _, r in approvals],
    }


def fail(state: RunState, reason: str, **details: Any) -> Commit:
    """Stop a running run for a reason found outside the gate (planner exhausted, crashed)."""
    b = Builder(state, None)
    b.stop(Event.FAIL, reason, None, **details)
    return b.done()


def model_requested(state: RunState, call_id: str, request: ModelRequest) -> Commit:
    """A model planner's request for the next step, recorded with the run (intent before
    effect). The run stays ``running``; nothing else changes until the reply is recorded."""
    b = Builder(state, None)
    b.emit(
        ev.PLANNER_REQUESTED,
        None,
        step=state.step + 1,
        endpoint=request.endpoint[:64],
        model=request.model[:MAX_DETAIL_STRING],
        request_hash=request.request_hash,
        **request.summary,
    )
    b.commit.model_request = (call_id, request)
    return b.done()


def quota_exhausted(state: RunState, reason: str) -> Commit:
    """A quota outside the run's own budgets is spent (the subject's daily steps): the run
    stops as it does at MAX_STEPS_REACHED, failed with a handoff, never silently."""
    b = Builder(state, None)
    b.stop(Event.FAIL, reason, None, step=state.step)
    b.commit.handoff_reason = reason
    return b.done()


def finish_cancel(state: RunState) -> Commit:
    """cancelling → cancelled once no tool is active (its effect is already recorded)."""
    b = Builder(state, None)
    b.stop(Event.EFFECTS_CHECKED, b.cancel_reason(), None)
    return b.done()


def retrying(
    state: RunState, command: ExecutableCommand, *, attempt: int, code: str | None, delay_ms: int
) -> Commit:
    """A retryable failure will be retried: same command, same token, next attempt."""
    b = Builder(state, None)
    b.emit(
        ev.TOOL_RETRYING,
        command.proposal_id,
        tool=command.tool_name,
        attempt=attempt,
        code=code,
        delay_ms=delay_ms,
        idempotency_token=command.idempotency_token,
    )
    b.commit.ledger_attempt = (command.idempotency_token, attempt)
    return b.done()


def recovered(state: RunState, command: ExecutableCommand, *, how: str) -> Commit:
    """A ``started`` ledger row outlived its worker; say how it is being settled."""
    b = Builder(state, None)
    b.emit(
        ev.TOOL_RECOVERED,
        command.proposal_id,
        tool=command.tool_name,
        how=how,
        idempotency_token=command.idempotency_token,
    )
    return b.done()


def deadline_while_waiting(state: RunState) -> Commit:
    """waiting_confirmation past the deadline → cancelled (nothing runs while waiting)."""
    b = Builder(state, None)
    b.stop(
        Event.DEADLINE_REACHED, StopReason.DEADLINE_REACHED, proposal_id_of(state.pending_proposal)
    )
    b.commit.expire_pending_confirmations = True
    return b.done()


def deadline_during_tool(state: RunState) -> Commit:
    """running past the deadline while a tool is active → cancelling: stop it, check its effect."""
    b = Builder(state, None)
    b.move(Event.DEADLINE_DURING_TOOL)
    b.s.stop_reason = StopReason.DEADLINE_REACHED
    return b.done()


def handoff_event(
    state: RunState, event: str, *, recount: tuple[str, str] | None = None, **details: Any
) -> Commit:
    """A handoff was claimed or resolved: recorded in the run's trace, who and why included.
    ``recount``: (the ledger row's status before, the effect found) of a write the resolution
    settled, counted again in the run's write summary (runs.domain.writes.recount)."""
    b = Builder(state, None)
    b.emit(event, None, **details)
    if recount is not None:
        writes.recount(b.s, row_status=recount[0], effect=recount[1])
    return b.done()

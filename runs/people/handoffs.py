"""Handoff commands (seed §14, SPEC §5): claim and resolve, only through the state machine.

Each resolution is one transaction: a trace event on the run (who, which action, why), the
ledger row's settled status (compare-and-set on its current status) and the handoff's own
status. Nobody sets a run status by hand; ``cancel`` and ``fail`` go through the transition
table like any other command.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from agentconsole.kernel.roles import actor_name, user_or_none
from policy.domain.contracts import CancelSignal
from policy.domain.decisions import reissue
from policy.domain.errors import DomainError, NotFound
from policy.domain.outcomes import OutcomeStatus
from policy.domain.secrets.redaction import redact_secrets
from runs import models as m
from runs.context import RunsContext, resolve
from runs.domain import lifecycle
from runs.domain import trace as ev
from runs.domain.clock import SYSTEM_CLOCK, Clock
from runs.domain.handoff import (
    EFFECT_ACTIONS,
    RESOLUTION_ACTIONS,
    RUN_ACTIONS,
    HandoffStatus,
    resolution_refusal,
    resolver_refusal,
)
from runs.domain.ledger import LedgerStatus
from runs.domain.machine import TERMINAL, StopReason
from runs.domain.writes import is_write
from runs.engine.doorbell import ring_console
from runs.orm.step_inputs import command_from_row
from runs.people.handoff_selectors import can_compensate, unsettled_effect

ACTIONS = RESOLUTION_ACTIONS


class HandoffError(DomainError):
    code = "HANDOFF_INVALID"
    http_status = 409


class HandoffNotYours(HandoffError):
    """Claimed by another reviewer: only they (or an admin) resolve it."""

    code = "PERMISSION_DENIED"
    http_status = 403


def handoff_claim(*, handoff_id: int, by: Any, ctx: RunsContext | None = None) -> m.Handoff:
    """open → claimed by ``by``; a second claim is a conflict (compare-and-set on status)."""
    store = resolve(ctx).store()
    with transaction.atomic():
        n = m.Handoff.objects.filter(pk=handoff_id, status=HandoffStatus.OPEN).update(
            status=HandoffStatus.CLAIMED, assignee=user_or_none(by), claimed_at=timezone.now()
        )
        if n != 1:
            raise _not_open(handoff_id)
        handoff = m.Handoff.objects.get(pk=handoff_id)
        _record(store, handoff.run_id, ev.HANDOFF_CLAIMED, handoff=handoff.pk, by=actor_name(by))
        transaction.on_commit(ring_console)
    return handoff


def _not_open(handoff_id: int) -> DomainError:
    """Why a claim lost: no such handoff, or who holds it (the loser of a race reads the
    winner's row, committed before its own update matched nothing)."""
    held = m.Handoff.objects.filter(pk=handoff_id).select_related("assignee").first()
    if held is None:
        return NotFound("no such handoff", handoff_id=handoff_id)
    if held.status == HandoffStatus.RESOLVED:
        return HandoffError("this handoff is resolved already", code="HANDOFF_NOT_OPEN")
    holder = held.claimant_name
    return HandoffError(
        f"already claimed by {holder}" if holder else "already claimed",
        code="HANDOFF_NOT_OPEN",
        claimed_by=holder,
    )


def _record(
    store: Any, run_id: str, event: str, recount: tuple[str, str] | None = None, **details: Any
) -> None:
    for _ in range(20):
        try:
            commit = lifecycle.handoff_event(store.load(run_id), event, recount=recount, **details)
            store.apply(commit)
            return
        except DomainError:
            continue
    raise HandoffError("run too busy", code="RUN_BUSY")


def handoff_resolve(
    *,
    handoff_id: int,
    by: Any,
    action: str,
    reason: str,
    user_is_admin: bool | None = None,
    ctx: RunsContext | None = None,
    clock: Clock = SYSTEM_CLOCK,
) -> m.Handoff:
    """Resolve a claimed handoff with one command; the effect check comes from the reviewer
    (mark_*), from the world (retry_same_token, same idempotency token), or from undoing it.

    ``user_is_admin``: given for a signed-in person (API and console), who must be the
    claimant or an admin standing in; None for the system and tests (no claimant check)."""
    handoff = _resolvable(handoff_id, by=by, action=action, reason=reason, admin=user_is_admin)
    # The reason is stored in the ledger row and the trace: no secret a reviewer pasted.
    reason = redact_secrets(reason)
    row = unsettled_effect(run_id=handoff.run_id)
    ctx = resolve(ctx)
    refusal = resolution_refusal(
        action,
        effect_status=row.status if row is not None else None,
        can_compensate=row is not None and can_compensate(row=row, registry=ctx.registry()),
    )
    if refusal is not None:
        raise HandoffError(refusal[1], code=refusal[0])
    store = ctx.store()
    result: dict[str, Any] = {"action": action}
    new_status = None
    recount = None
    if action in EFFECT_ACTIONS:
        # Unreachable: resolution_refusal refused an effect action without a row already.
        assert row is not None  # noqa: S101
        new_status, outcome = _effect_action(
            action, row, store, ctx, by=actor_name(by), reason=reason, clock=clock
        )
        result.update(ledger_status=new_status, idempotency_token=row.idempotency_token, **outcome)
        if is_write(ctx.registry().contract(row.tool_name, row.tool_version)):
            # The run's write summary counts it as the reviewer found it (runs.domain.writes).
            recount = (row.status, str(outcome["effect"]))
    with transaction.atomic():
        if row is not None and new_status is not None:  # an effect action settles the row
            n = m.LedgerEntry.objects.filter(pk=row.pk, status=row.status).update(
                status=new_status,
                verification={"by": actor_name(by), "reason": reason[:256], **result},
                finished_at=timezone.now(),
            )
            if n != 1:
                raise HandoffError("the ledger row changed meanwhile", code="HANDOFF_CONFLICT")
        state = store.load(handoff.run_id)
        if action in RUN_ACTIONS and state.status not in TERMINAL:
            commit = (
                lifecycle.request_cancel(state, by=actor_name(by), reason=reason, active_tool=False)
                if action == "cancel"
                else lifecycle.fail(state, StopReason.FAILED_BY_REVIEWER, by=actor_name(by))
            )
            store.apply(commit)
        _record(
            store,
            handoff.run_id,
            ev.HANDOFF_RESOLVED,
            handoff=handoff.pk,
            action=action,
            by=actor_name(by),
            reason=reason[:256],
            ledger_status=new_status,
            recount=recount,
        )
        n = m.Handoff.objects.filter(pk=handoff.pk, status=HandoffStatus.CLAIMED).update(
            status=HandoffStatus.RESOLVED, resolution=result, resolved_at=timezone.now()
        )
        if n != 1:
            raise HandoffError("handoff resolved concurrently", code="HANDOFF_CONFLICT")
    transaction.on_commit(ring_console)
    handoff.refresh_from_db()
    return handoff


def _resolvable(
    handoff_id: int, *, by: Any, action: str, reason: str, admin: bool | None
) -> m.Handoff:
    """The handoff, or why ``by`` may not resolve it with ``action`` (in this order: no such
    handoff, claimed by someone else, unknown action, no reason, not claimed)."""
    handoff = m.Handoff.objects.filter(pk=handoff_id).select_related("assignee").first()
    if handoff is None:
        raise NotFound("no such handoff", handoff_id=handoff_id)
    # Checked before the resolve's transaction: a claimed handoff never changes hands (a claim
    # is only taken from "open"), so the claimant read here is the claimant at the resolve.
    # The system (admin None) may resolve any claimed handoff, as an admin may.
    claim_refusal = resolver_refusal(
        status=handoff.status,
        assignee_id=handoff.assignee_id,
        user_id=getattr(by, "pk", None),
        user_is_admin=admin is None or admin,
    )
    if claim_refusal == "PERMISSION_DENIED":
        holder = handoff.claimant_name or "another reviewer"
        raise HandoffNotYours(
            f"this handoff is claimed by {holder}: only they may resolve it",
            claimed_by=holder,
        )
    if action not in ACTIONS:
        raise HandoffError(f"unknown action {action!r}", code="HANDOFF_ACTION_UNKNOWN")
    if not reason.strip():
        raise HandoffError("a reason is required", code="HANDOFF_REASON_REQUIRED")
    if claim_refusal == "HANDOFF_NOT_CLAIMED":
        raise HandoffError("claim the handoff first", code="HANDOFF_NOT_CLAIMED")
    return handoff


def _effect_action(
    action: str,
    row: m.LedgerEntry,
    store: Any,
    ctx: RunsContext,
    *,
    by: str,
    reason: str,
    clock: Clock,
) -> tuple[LedgerStatus, dict[str, Any]]:
    if action == "mark_effect_present":
        return LedgerStatus.RECONCILED, {"effect": "present"}
    if action == "mark_effect_absent":
        return LedgerStatus.FAILED, {"effect": "absent"}
    registered = ctx.registry().get(row.tool_name, row.tool_version)
    if registered is None:
        raise HandoffError("the tool is no longer registered", code="UNKNOWN_TOOL_OR_VERSION")
    contract = registered.contract
    state = store.load(row.run_id)
    now_ms = clock.now_ms()
    command = reissue(
        command_from_row(row),
        run_deadline_ms=max(state.deadline_ms, now_ms + contract.timeout_ms),
        now_ms=now_ms,
        timeout_ms=contract.timeout_ms,
    )
    executor = ctx.executor(clock)
    if action == "retry_same_token":
        # Same command, same idempotency token: an idempotent tool cannot double the effect.
        execution = executor.run(command, contract, state, CancelSignal())
        outcome = execution.outcome
        verified = execution.verification is None or execution.verification.ok
        if outcome.status is OutcomeStatus.SUCCEEDED and verified:
            return LedgerStatus.RECONCILED, {"effect": "present", "retried": True}
        if outcome.status in (OutcomeStatus.FAILED, OutcomeStatus.REJECTED):
            return LedgerStatus.FAILED, {"effect": "absent", "retried": True, "code": outcome.code}
        raise HandoffError("the retry did not settle the effect", code="HANDOFF_RETRY_UNKNOWN")
    # Unreachable: resolution_refusal refused "compensate" for a tool without compensate().
    assert contract.compensate is not None  # noqa: S101
    tool_ctx = executor.context(command, contract, state, CancelSignal())
    outcome = contract.compensate(dict(command.validated_arguments), tool_ctx)
    if outcome.status is not OutcomeStatus.SUCCEEDED:
        raise HandoffError("compensation failed", code="COMPENSATION_FAILED")
    return LedgerStatus.RECONCILED, {"effect": "compensated"}

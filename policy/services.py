"""Writes of grants and confirmations: every change to their rows goes through here.

Each compare-and-set returns whether its row matched, and the caller decides what a miss means:
the run store (runs.orm.store, runs.orm.writers) calls these inside the one transaction of a step's
commit and turns a miss into a version conflict, which rolls the whole commit back. Nothing here
opens a transaction of its own, so a confirmation request commits with the run's own
compare-and-set or not at all. What a caller reads here is a plain value
(``PendingConfirmation``), never a row. A decision's whole path: ``policy.apis``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.utils import timezone

from agentconsole.kernel import sqlbatch
from policy.domain.confirmation.approvers import DEFAULT_RULE, PriorApproval
from policy.domain.confirmation.confirmations import Confirmation, ConfirmationStatus
from policy.domain.errors import DomainError, NotFound
from policy.domain.grants import CapabilityGrant
from policy.models import Confirmation as ConfirmationRow
from policy.models import ConfirmationApproval, Grant
from policy.selectors import prior_approvals


class ConfirmationMismatch(DomainError):
    code = "CONFIRMATION_HASH_MISMATCH"
    http_status = 409


class ConfirmationNotPending(DomainError):
    code = "CONFIRMATION_NOT_PENDING"
    http_status = 409


PROPOSAL_CHANGED = "This proposal changed since the page loaded; review it again."


@dataclass(frozen=True)
class RecordedApproval:
    """One approval already given: who and why (the trace names them), and the facts the
    approver rule reads."""

    username: str
    reason: str
    prior: PriorApproval


@dataclass(frozen=True)
class PendingConfirmation:
    """A pending confirmation as a person's answer reads it (plain values, no row)."""

    confirmation_id: str
    run_id: str
    proposal: Any
    approvers: str
    tool_name: str
    tool_version: str
    # Read only when asked for (a decision, whose approver rule counts them).
    approvals: tuple[RecordedApproval, ...] = ()


def confirmation_for_decision(
    *, confirmation_id: str, shown_hash: str, approvals: bool = False
) -> PendingConfirmation:
    """The pending confirmation a person answers, if it is still the one they were shown; with
    ``approvals``, the approvals recorded for it, in the order they were given (one query more).

    ``shown_hash`` is the proposal hash the person saw: if the pending proposal changed since,
    the decision is refused (a stale click can never approve a different proposal). The run
    side (``runs.services.answer_pending``) calls this under the run's row lock.
    """
    row = ConfirmationRow.objects.select_related("decided_by").filter(pk=confirmation_id).first()
    if row is None:
        raise NotFound("no such confirmation", confirmation_id=confirmation_id)
    if row.proposal_hash != shown_hash:
        raise ConfirmationMismatch(PROPOSAL_CHANGED, confirmation_id=row.pk)
    if row.status != ConfirmationStatus.PENDING.value:
        raise _refusal(row)
    found = ConfirmationApproval.objects.filter(confirmation_id=row.pk) if approvals else None
    recorded = list(found) if found is not None else []
    return PendingConfirmation(
        confirmation_id=row.pk,
        run_id=row.run_id,
        proposal=row.proposal,
        approvers=row.approvers,
        tool_name=row.tool_name,
        tool_version=row.tool_version,
        approvals=tuple(
            RecordedApproval(a.username, a.reason, prior)
            for a, prior in zip(recorded, prior_approvals(recorded), strict=True)
        ),
    )


def confirmation_refusal(*, confirmation_id: str) -> DomainError:
    """Why ``confirmation_id`` can no longer be decided, read now: for the loser of a race,
    whose compare-and-set found the row already decided by someone else."""
    row = ConfirmationRow.objects.select_related("decided_by").filter(pk=confirmation_id).first()
    if row is None:
        return NotFound("no such confirmation", confirmation_id=confirmation_id)
    return _refusal(row)


# How a confirmation that is no longer pending was ended, in the words of a refusal.
_DECIDED = {
    ConfirmationStatus.DECLINED.value: "declined",
    ConfirmationStatus.EDITED.value: "edited",
    ConfirmationStatus.RESPONDED.value: "answered with a note",
}


def _refusal(row: ConfirmationRow) -> DomainError:
    """The words for a confirmation that is not pending: who decided it, or that the run now
    asks about a different proposal (the page that was shown is stale), or that it expired."""
    decided = _DECIDED.get(row.status, "approved")
    who = row.decided_by.get_username() if row.decided_by is not None else None
    newer = (
        ConfirmationRow.objects.filter(run_id=row.run_id, status=ConfirmationStatus.PENDING.value)
        .exclude(pk=row.pk)
        .values_list("pk", flat=True)
        .first()
    )
    if newer is not None:
        # The run moved on (this one was declined, and its planner proposed something else):
        # what the page showed is no longer what the run asks; the person must look again.
        earlier = f" The one shown was {decided} by {who}." if who else ""
        return ConfirmationMismatch(
            PROPOSAL_CHANGED + earlier, confirmation_id=row.pk, current_confirmation_id=newer
        )
    if who is not None:
        return ConfirmationNotPending(
            f"Already decided by {who} ({decided}); nothing was changed.",
            decided_by=who,
            status=row.status,
        )
    return ConfirmationNotPending(
        f"This confirmation is {row.status}; there is nothing left to decide.", status=row.status
    )


def grants_create(*, run_id: str, grants: Sequence[CapabilityGrant], granted_by: Any) -> None:
    """A new run's grants: trusted input from its creator, bound to the run's id."""
    Grant.objects.bulk_create(
        Grant(
            id=g.grant_id,
            run_id=run_id,
            capability=g.capability,
            resource_scope=g.resource_scope,
            expires_at_step=g.expires_at_step,
            max_calls=g.max_calls,
            calls_used=g.calls_used,
            constraints={k: c.model_dump(exclude_unset=True) for k, c in g.constraints.items()},
            granted_by=granted_by,
        )
        for g in grants
    )


def confirmations_create(
    *,
    run_id: str,
    confirmations: Sequence[Confirmation],
    proposals: Mapping[str, dict[str, Any]],
) -> None:
    """A new run's confirmations decided in advance (a scenario file), with their proposals."""
    ConfirmationRow.objects.bulk_create(
        ConfirmationRow(
            id=c.confirmation_id,
            run_id=run_id,
            proposal_hash=c.proposal_hash,
            tool_name=proposals.get(c.confirmation_id, {}).get("tool_name", ""),
            tool_version=proposals.get(c.confirmation_id, {}).get("tool_version", ""),
            proposal=proposals.get(c.confirmation_id),
            status=c.status.value,
            expires_at_step=c.expires_at_step,
            origin="scenario",
            decided_at=timezone.now() if c.status is not ConfirmationStatus.PENDING else None,
        )
        for c in confirmations
    )


def confirmation_request(
    *,
    run_id: str,
    confirmation_id: str,
    proposal_hash: str,
    tool_name: str,
    tool_version: str,
    proposal: dict[str, Any],
    expires_at_step: int,
    cites_untrusted: bool,
    approvers: str = DEFAULT_RULE,
    edited_from: str | None = None,
    edit_diff: list[dict[str, Any]] | None = None,
    approved: bool = False,
    decided_by: Any = None,
) -> None:
    """A pending confirmation for a proposal the gate held for a person, and who may decide it.

    For a person's edit (``edited_from``: the confirmation it supersedes, ``edit_diff``: what
    changed): pending, or, when the edit was the last approval needed, ``approved`` by
    ``decided_by`` at once."""
    ConfirmationRow.objects.create(
        id=confirmation_id,
        run_id=run_id,
        proposal_hash=proposal_hash,
        tool_name=tool_name,
        tool_version=tool_version,
        proposal=proposal,
        status=(ConfirmationStatus.APPROVED if approved else ConfirmationStatus.PENDING).value,
        expires_at_step=expires_at_step,
        cites_untrusted=cites_untrusted,
        approvers=approvers,
        edited_from=edited_from or "",
        edit_diff=edit_diff or None,
        decided_by=decided_by if approved else None,
        decided_at=timezone.now() if approved else None,
    )


def confirmation_record_decision(
    *, run_id: str, confirmation_id: str, status: str, decided_by: Any, reason: str = ""
) -> bool:
    """pending -> approved/declined/edited/responded, with the reason (or the note) the person
    gave (already masked, as in the trace event); False if it was no longer pending (decided
    concurrently)."""
    status = ConfirmationStatus(status)
    n = ConfirmationRow.objects.filter(
        pk=confirmation_id, run_id=run_id, status=ConfirmationStatus.PENDING.value
    ).update(
        status=status.value,
        decided_at=timezone.now(),
        decided_by=decided_by,
        decision_reason=reason,
    )
    return n == 1


def confirmation_approval_record(
    *, confirmation_id: str, user: Any, username: str, reason: str, independent: bool
) -> None:
    """One person's approval, named (the run store writes it in the commit of that approval).
    A second approval by the same person breaks ``approval_one_per_person``: never two votes."""
    ConfirmationApproval.objects.create(
        confirmation_id=confirmation_id,
        user=user,
        username=username[:150],
        reason=reason,
        independent=independent,
    )


def confirmation_consume(*, run_id: str, confirmation_id: str) -> sqlbatch.Write:
    """approved -> consumed, once, as a write of the step's batch (``runs.orm.writers``); it changes
    no row if another command used the confirmation first."""
    return sqlbatch.update(
        ConfirmationRow,
        {"status": ConfirmationStatus.CONSUMED.value},
        {"id": confirmation_id, "run": run_id, "status": ConfirmationStatus.APPROVED.value},
        expect_one="confirmation already used",
    )


def confirmations_expire_pending(*, run_id: str) -> sqlbatch.Write:
    return sqlbatch.update(
        ConfirmationRow,
        {"status": ConfirmationStatus.EXPIRED.value},
        {"run": run_id, "status": ConfirmationStatus.PENDING.value},
    )


def grant_use(*, run_id: str, grant_id: str) -> sqlbatch.Write:
    """One call more on the grant, as a write of the step's batch (``runs.orm.writers``). It changes
    no row if the grant's calls ran out meanwhile (the race: two commands that each saw one call
    left; the condition is in the UPDATE, so only one matches)."""
    table, used, limit = map(sqlbatch.quote, (Grant._meta.db_table, "calls_used", "max_calls"))
    return sqlbatch.Write(
        f"UPDATE {table} SET {used} = {used} + 1 WHERE id = %s AND run_id = %s"  # noqa: S608 -- fixed names
        f" AND ({limit} IS NULL OR {used} < {limit})",
        (grant_id, run_id),
        expect_one="grant used up concurrently",
    )

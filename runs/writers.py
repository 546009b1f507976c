"""The writers of one commit: one small function per part, applied in one fixed order.

``OrmRunStore._apply`` (runs.store) runs ``write_run``, the run's compare-and-set, then every
writer in ``WRITERS``, all inside the one transaction of ``OrmRunStore.apply``. Each writer
writes one part of the commit and does nothing (no query) when the commit has no such part, so
a step's query count is the count of the parts it carries (tests/services/test_step_queries.py).

Grants and confirmations are the policy app's records: their writers call ``policy.services``
(inside this same transaction) and turn a compare-and-set miss into a ``VersionConflict``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.utils import timezone

from memory.domain.working import admit
from memory.models import WorkingMemoryItem
from policy import services as policy_services
from runs import models as m
from runs.domain.commits import Commit
from runs.domain.errors import LeaseLost, VersionConflict
from runs.domain.handoff import build_handoff_bundle
from runs.domain.state import RunState
from runs.rows import state_fields, working_items

HANDOFF_OBSERVATIONS = 5


@dataclass(frozen=True)
class At:
    """Where a commit is written: the run, its new state, the first new trace sequence."""

    run_id: str
    state: RunState
    first_seq: int
    decided_by: Any


def write_run(commit: Commit, state: RunState, lease_owner: str | None) -> None:
    run_id = state.run_id
    match = m.Run.objects.filter(pk=run_id, version=commit.expected_version)
    if lease_owner is not None:
        match = match.filter(lease_owner=lease_owner)
    updated = match.update(**state_fields(state), updated_at=timezone.now())
    if updated != 1:
        if (
            lease_owner is not None
            and not m.Run.objects.filter(pk=run_id, lease_owner=lease_owner).exists()
        ):
            raise LeaseLost("the run's lease passed to another worker", run_id=run_id)
        raise VersionConflict("run changed since it was read", run_id=run_id)


def _write_events(commit: Commit, at: At) -> None:
    if not commit.events:
        return
    m.TraceEvent.objects.bulk_create(
        m.TraceEvent(
            run_id=at.run_id,
            sequence=at.first_seq + i,
            event=d.event,
            proposal_id=d.proposal_id,
            details=d.details,
        )
        for i, d in enumerate(commit.events)
    )


def _write_observations(commit: Commit, at: At) -> None:
    if not commit.observations:
        return
    m.Observation.objects.bulk_create(
        m.Observation(
            run_id=at.run_id,
            observation_id=o.observation_id,
            kind=o.kind.value,
            trust=o.trust.value,
            step=o.step,
            content=o.content,
            content_hash=o.content_hash,
            citable=o.citable,
        )
        for o in commit.observations
    )


def _write_working(commit: Commit, at: At) -> None:
    """Apply the eviction rule to at most max_items + len(new) rows: constant per step."""
    if not commit.working_items:
        return
    current = working_items(at.run_id)
    kept = admit(current, commit.working_items, step=at.state.step)
    kept_ids = {i.item_id for i in kept}
    current_ids = {i.item_id for i in current}
    # Always one DELETE (of whatever is not kept), so a step costs the same number of
    # queries whether or not the caps evict something.
    WorkingMemoryItem.objects.filter(run_id=at.run_id).exclude(item_id__in=list(kept_ids)).delete()
    WorkingMemoryItem.objects.bulk_create(
        WorkingMemoryItem.from_item(at.run_id, i) for i in kept if i.item_id not in current_ids
    )


def _write_ledger_intent(commit: Commit, at: At) -> None:
    c = commit.ledger_intent
    if c is None:
        return
    m.LedgerEntry.objects.create(
        run_id=at.run_id,
        idempotency_token=c.idempotency_token,
        proposal_id=c.proposal_id,
        tool_name=c.tool_name,
        tool_version=c.tool_version,
        arguments_hash=c.arguments_hash,
        proposal_hash=c.proposal_hash,
        arguments=c.validated_arguments,
        resource=c.resource,
        deadline_ms=c.deadline_ms,
        confirmation_id=c.confirmation_id,
        grant_ids=list(c.grant_ids),
        step=at.state.step,
    )


def _write_ledger_settle(commit: Commit, at: At) -> None:
    s = commit.ledger_settle
    if s is None:
        return
    n = m.LedgerEntry.objects.filter(
        idempotency_token=s.idempotency_token, status__in=["started", "unknown"]
    ).update(
        status=s.status,
        outcome=s.outcome,
        verification=s.verification,
        finished_at=timezone.now(),
    )
    if n != 1:
        raise VersionConflict("ledger row already settled", run_id=at.run_id)


def _write_ledger_attempt(commit: Commit, at: At) -> None:
    if commit.ledger_attempt is None:
        return
    token, attempt = commit.ledger_attempt
    n = m.LedgerEntry.objects.filter(
        idempotency_token=token, status="started", attempt=attempt - 1
    ).update(attempt=attempt)
    if n != 1:
        raise VersionConflict("ledger attempt moved concurrently", run_id=at.run_id)


def _write_confirmation_request(commit: Commit, at: At) -> None:
    r = commit.confirmation_request
    if r is None:
        return
    policy_services.confirmation_request(
        run_id=at.run_id,
        confirmation_id=r.confirmation_id,
        proposal_hash=r.proposal_hash,
        tool_name=r.tool_name,
        tool_version=r.tool_version,
        proposal=r.proposal,
        expires_at_step=r.expires_at_step,
        cites_untrusted=r.cites_untrusted,
        approvers=r.approvers.value,
    )


def _write_confirmation_decision(commit: Commit, at: At) -> None:
    if commit.confirmation_decision is None:
        return
    cid, approved, reason = commit.confirmation_decision
    if not policy_services.confirmation_record_decision(
        run_id=at.run_id,
        confirmation_id=cid,
        approved=approved,
        decided_by=at.decided_by,
        reason=reason,
    ):
        raise VersionConflict("confirmation already decided", run_id=at.run_id)


def _write_confirmation_approval(commit: Commit, at: At) -> None:
    a = commit.confirmation_approval
    if a is None:
        return
    policy_services.confirmation_approval_record(
        confirmation_id=a.confirmation_id,
        user=at.decided_by,
        username=a.by,
        reason=a.reason,
        independent=a.independent,
    )


def _write_confirmation_consume(commit: Commit, at: At) -> None:
    if commit.consume_confirmation is None:
        return
    if not policy_services.confirmation_consume(
        run_id=at.run_id, confirmation_id=commit.consume_confirmation
    ):
        raise VersionConflict("confirmation already used", run_id=at.run_id)


def _write_grant_uses(commit: Commit, at: At) -> None:
    for grant_id in commit.grant_uses:
        if not policy_services.grant_use(run_id=at.run_id, grant_id=grant_id):
            raise VersionConflict("grant used up concurrently", run_id=at.run_id)


def _write_expired_confirmations(commit: Commit, at: At) -> None:
    if commit.expire_pending_confirmations:
        policy_services.confirmations_expire_pending(run_id=at.run_id)


def _write_handoff(commit: Commit, at: At) -> None:
    """The handoff bundle reads the run's latest trusted observations and unsettled ledger
    rows: written last, so it sees this commit's own observations and ledger writes."""
    if commit.handoff_reason is None:
        return
    trusted = m.Observation.objects.filter(run_id=at.run_id).exclude(trust="untrusted-content")
    observations = [
        {
            "observation_id": o.observation_id,
            "trust": o.trust,
            "kind": o.kind,
            "content": o.content,
        }
        for o in reversed(list(trusted.order_by("-id")[:HANDOFF_OBSERVATIONS]))
    ]
    effects = [
        {
            "idempotency_token": r.idempotency_token,
            "tool": r.tool_name,
            "version": r.tool_version,
            "status": r.status,
            "attempt": r.attempt,
            "outcome": r.outcome,
            "verification": r.verification,
        }
        for r in m.LedgerEntry.objects.filter(
            run_id=at.run_id, status__in=["started", "unknown", "compensation-required"]
        )
    ]
    bundle = build_handoff_bundle(
        state=at.state,
        reason=commit.handoff_reason,
        trusted_observations=observations,
        unknown_effects=effects,
        proposal=commit.handoff_proposal,
        proposal_hash=commit.handoff_proposal_hash,
    )
    m.Handoff.objects.create(run_id=at.run_id, reason=commit.handoff_reason, bundle=bundle)


# The fixed order of a commit's writes (after the run's compare-and-set). Why this order:
# - events, observations and working memory first: plain inserts owned by this run;
# - the ledger intent before its settle and attempt, which a commit never carries together but
#   which would have to see the row;
# - confirmation request, decision, consume, then grant uses: a decision and a consume name
#   different confirmations, and the grants a command uses are counted with its intent;
# - expiring pending confirmations after a request could be wrong in one commit, but no step
#   builds both (a waiting run's deadline expires what was already requested);
# - the handoff last: its bundle reads the observations and ledger rows written above.
WRITERS: tuple[Callable[[Commit, At], None], ...] = (
    _write_events,
    _write_observations,
    _write_working,
    _write_ledger_intent,
    _write_ledger_settle,
    _write_ledger_attempt,
    _write_confirmation_request,
    _write_confirmation_decision,
    _write_confirmation_approval,
    _write_confirmation_consume,
    _write_grant_uses,
    _write_expired_confirmations,
    _write_handoff,
)

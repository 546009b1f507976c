"""The writers of one commit: one small function per part, applied in one fixed order.

``OrmRunStore._apply`` (runs.orm.store) builds the run's compare-and-set (``run_write``) and the
batched parts (``BATCHED``: plain statements, ``agentconsole.kernel.sqlbatch``), sends them in one
round trip, checks their row counts, then runs the parts that need the database's answers as they go
(``AFTER``), all inside the one transaction of ``OrmRunStore.apply``. Each writer writes one part
of the commit and writes nothing when the commit has no such part, so a step's statement count is
the count of the parts it carries (tests/services/test_step_queries.py).

Grants and confirmations are the policy app's records: their statements come from
``policy.services``; a conditional write that changes no row is a ``VersionConflict``. A new
confirmation or handoff also writes its notification's outbox row (``notify.services``), in the
same transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from django.db.models import Subquery, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from agentconsole.kernel import sqlbatch
from agentconsole.kernel.sqlbatch import Write
from memory.domain.working import WorkingItem, admit
from memory.working_rows import working_writes
from notify import services as notify_services
from notify.domain.rules import EventKind, roles_for_confirmation, roles_for_handoff
from policy import services as policy_services
from policy.domain.canonical import TRACE_SCHEME
from runs import models as m
from runs.calls.models import ModelCall
from runs.domain.clock import as_datetime
from runs.domain.errors import VersionConflict
from runs.domain.gateway.calls import OPEN, SETTLED, CallKind, CallStatus, request_hash
from runs.domain.handoff import build_handoff_bundle
from runs.domain.state import RunState
from runs.domain.step.commits import Commit
from runs.domain.trace_chain import Link
from runs.orm.rows import state_fields

HANDOFF_OBSERVATIONS = 5


@dataclass(frozen=True)
class At:
    """Where a commit is written: the run, its new state, the first new trace sequence, and the
    run's working memory as it was at the commit's expected version."""

    run_id: str
    state: RunState
    first_seq: int
    decided_by: Any
    working: Sequence[WorkingItem] = ()
    # The events' hash-chain links (runs.domain.trace_chain), one per event; none when the
    # run is not chained.
    links: Sequence[Link] = ()


def run_write(commit: Commit, state: RunState, lease_owner: str | None) -> Write:
    """The run's compare-and-set: the first statement of every commit. It matches no row when
    another writer moved the run first, or (with ``lease_owner``) the lease passed on."""
    where: dict[str, Any] = {"id": state.run_id, "version": commit.expected_version}
    if lease_owner is not None:
        where["lease_owner"] = lease_owner
    values = {**state_fields(state), "updated_at": timezone.now()}
    return sqlbatch.update(m.Run, values, where, expect_one=RUN_MOVED)


# The run's compare-and-set matched no row (``OrmRunStore`` tells a lost lease from a conflict).
RUN_MOVED = "run changed since it was read"


def _events(commit: Commit, at: At) -> list[Write]:
    if not commit.events:
        return []
    scheme = TRACE_SCHEME if at.links else None
    links: Sequence[Link | None] = at.links or [None] * len(commit.events)
    return [
        sqlbatch.insert(
            [
                m.TraceEvent(
                    run_id=at.run_id,
                    sequence=at.first_seq + i,
                    event=d.event,
                    proposal_id=d.proposal_id,
                    details=d.details,
                    content_digest=link.content_digest if link else None,
                    chain_digest=link.chain_digest if link else None,
                    hash_scheme=scheme,
                )
                for i, (d, link) in enumerate(zip(commit.events, links, strict=True))
            ]
        )
    ]


def _inserted(rows: list[Any]) -> list[Write]:
    """One INSERT of ``rows``, none when there are none."""
    return [sqlbatch.insert(rows)] if rows else []


def _observations(commit: Commit, at: At) -> list[Write]:
    return _inserted(
        [
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
        ]
    )


def _working(commit: Commit, at: At) -> list[Write]:
    if not commit.working_items:
        return []
    # The eviction rule over at most max_items + len(new) items: constant per step.
    kept = admit(list(at.working), commit.working_items, step=at.state.step)
    return working_writes(at.run_id, kept, at.working)


def _taint_entries(commit: Commit, at: At) -> list[Write]:
    # The provenance index grows in the commit of the observations it indexes (issue 23).
    return _inserted(
        [
            m.TaintEntry(
                run_id=at.run_id,
                seq=e.seq,
                observation_id=e.observation_id,
                trust=e.trust,
                text=e.text,
            )
            for e in commit.taint_entries
        ]
    )


def _ledger_intent(commit: Commit, at: At) -> list[Write]:
    c = commit.ledger_intent
    if c is None:
        return []
    row = m.LedgerEntry(
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
    return [sqlbatch.insert([row])]


def _ledger_settle(commit: Commit, at: At) -> list[Write]:
    s = commit.ledger_settle
    if s is None:
        return []
    return [
        sqlbatch.update(
            m.LedgerEntry,
            {
                "status": s.status,
                "outcome": s.outcome,
                "verification": s.verification,
                "finished_at": timezone.now(),
            },
            {"idempotency_token": s.idempotency_token, "status": ("started", "unknown")},
            expect_one="ledger row already settled",
        )
    ]


def _ledger_attempt(commit: Commit, at: At) -> list[Write]:
    if commit.ledger_attempt is None:
        return []
    token, attempt = commit.ledger_attempt
    return [
        sqlbatch.update(
            m.LedgerEntry,
            {"attempt": attempt},
            {"idempotency_token": token, "status": "started", "attempt": attempt - 1},
            expect_one="ledger attempt moved concurrently",
        )
    ]


def _model_request(commit: Commit, at: At) -> list[Write]:
    if commit.model_request is None:
        return []
    call_id, r = commit.model_request
    row = ModelCall(
        id=call_id,
        run_id=at.run_id,
        step=at.state.step + 1,
        subject=at.state.subject,
        endpoint=r.endpoint,
        model=r.model[:128],
        request=r.body,
        request_hash=r.request_hash,
        hints=r.hints,
        summary=r.summary,
        deadline_ms=r.deadline_ms,
        not_before=timezone.now(),
    )
    return [sqlbatch.insert([row])]


def _tool_request(commit: Commit, at: At) -> list[Write]:
    if commit.tool_request is None:
        return []
    call_id, r = commit.tool_request
    body = r.body()
    row = ModelCall(
        id=call_id,
        run_id=at.run_id,
        kind=CallKind.TOOL.value,
        step=r.step,
        subject=at.state.subject,
        endpoint=r.lane,
        model=r.tool[:128],
        request=body,
        request_hash=request_hash(body),
        deadline_ms=r.deadline_ms,
        not_before=as_datetime(r.not_before_ms) if r.not_before_ms else timezone.now(),
    )
    return [sqlbatch.insert([row])]


def _model_consume(commit: Commit, at: At) -> list[Write]:
    # The step that took the reply commits with it: a worker that dies before this commit
    # finds the reply still there, and never asks the model again.
    if commit.consume_call is None:
        return []
    return [
        sqlbatch.update(
            ModelCall,
            {"status": CallStatus.CONSUMED.value},
            {"id": commit.consume_call, "status": [s.value for s in SETTLED]},
            expect_one="model call already consumed",
        )
    ]


def _calls_abandon(commit: Commit, at: At) -> list[Write]:
    if not commit.abandon_calls:
        return []
    return [
        sqlbatch.update(
            ModelCall,
            {"status": CallStatus.ABANDONED.value, "lease_owner": None, "lease_expires_at": None},
            {"run": at.run_id, "status": [s.value for s in OPEN]},
        )
    ]


def _confirmation_consume(commit: Commit, at: At) -> list[Write]:
    if commit.consume_confirmation is None:
        return []
    return [
        policy_services.confirmation_consume(
            run_id=at.run_id, confirmation_id=commit.consume_confirmation
        )
    ]


def _grant_uses(commit: Commit, at: At) -> list[Write]:
    return [policy_services.grant_use(run_id=at.run_id, grant_id=g) for g in commit.grant_uses]


def _expired_confirmations(commit: Commit, at: At) -> list[Write]:
    if not commit.expire_pending_confirmations:
        return []
    return [policy_services.confirmations_expire_pending(run_id=at.run_id)]


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
        edited_from=r.edited_from,
        edit_diff=list(r.edit_diff),
        approved=r.approved,
        decided_by=at.decided_by,
    )
    # The outbox row, in this same transaction (issue 24 item 4): it is delivered after the
    # commit, and a commit that rolls back takes it with it. The tool's name, never its
    # arguments.
    notify_services.notification_record(
        kind=EventKind.CONFIRMATION_WAITING,
        item_id=r.confirmation_id,
        run_id=at.run_id,
        tool_name=r.tool_name,
        roles=roles_for_confirmation(r.approvers.value),
        link_path=f"/runs/{at.run_id}/",
        profile=_run_profile(at.run_id),
    )


def _run_profile(run_id: str) -> Coalesce:
    # The name of the run's profile ("" when it was started otherwise), read by the outbox row's
    # INSERT itself: no extra round trip.
    name = Subquery(m.Run.objects.filter(pk=run_id).values("profile__name")[:1])
    return Coalesce(name, Value(""))


def _write_confirmation_decision(commit: Commit, at: At) -> None:
    if commit.confirmation_decision is None:
        return
    cid, status, reason = commit.confirmation_decision
    if not policy_services.confirmation_record_decision(
        run_id=at.run_id,
        confirmation_id=cid,
        status=status,
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
    row = m.Handoff.objects.create(run_id=at.run_id, reason=commit.handoff_reason, bundle=bundle)
    notify_services.notification_record(
        kind=EventKind.HANDOFF_OPENED,
        item_id=str(row.pk),
        run_id=at.run_id,
        roles=roles_for_handoff(),
        link_path=f"/handoffs/{row.pk}/",
        profile=_run_profile(at.run_id),
    )


# The fixed order of a commit's writes, after the run's compare-and-set. Why this order:
# - BATCHED first, in one round trip: events, observations and working memory (plain inserts
#   owned by this run); the ledger intent before its settle and attempt, which a commit never
#   carries together but which would have to see the row; the confirmation a command consumes
#   and the grants it uses are counted with its intent; expiring pending confirmations (a
#   waiting run's deadline) never comes with a new request in one commit;
# - AFTER, one by one, what needs the database's answer as it goes: a confirmation decision,
#   request and approval (policy.services checks and records them). The decision first: an
#   edit ends the pending confirmation it supersedes before it asks for the edited proposal,
#   which may have the same hash (a per-run confirmation) and "one pending per hash" holds;
# - the handoff last: its bundle reads the observations and ledger rows written above.
BATCHED: tuple[Callable[[Commit, At], list[Write]], ...] = (
    _events,
    _observations,
    _taint_entries,
    _working,
    _ledger_intent,
    _ledger_settle,
    _ledger_attempt,
    _confirmation_consume,
    _grant_uses,
    _expired_confirmations,
    _model_request,
    _tool_request,
    _model_consume,
    _calls_abandon,
)
AFTER: tuple[Callable[[Commit, At], None], ...] = (
    _write_confirmation_decision,
    _write_confirmation_request,
    _write_confirmation_approval,
    _write_handoff,
)


def writes_after(commit: Commit) -> bool:
    """Whether any of ``AFTER`` has something to write for ``commit`` (then the batch cannot
    carry the commit: these writes come after it, in the same transaction)."""
    return (
        commit.confirmation_request is not None
        or commit.confirmation_decision is not None
        or commit.confirmation_approval is not None
        or commit.handoff_reason is not None
    )

"""ORM adapter of the ``RunStore`` port (runs.domain.ports).

``apply`` writes one commit in one short transaction: a compare-and-set on the run version, then
the trace events, observations, ledger intent/outcome, confirmation and grant rows. Zero rows on
the compare-and-set means another writer moved the run first: ``VersionConflict``, nothing
written. This holds on SQLite too, where row locks do nothing (STYLE habit 3).

Every query here is indexed and bounded; none reads the run's history, so the cost of a step does
not grow with the run's length.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.utils import timezone

from memory.domain.working import WorkingItem, admit
from memory.models import WorkingMemoryItem
from policy.domain.confirmations import Confirmation, ConfirmationStatus
from policy.domain.decisions import ExecutableCommand, restore_command
from policy.domain.errors import NotFound
from policy.domain.grants import CapabilityGrant
from policy.domain.observations import Observation, ObservationKind, TrustLabel
from policy.models import Confirmation as ConfirmationRow
from policy.models import Grant
from runs import models as m
from runs.domain.commits import Commit
from runs.domain.errors import IntegrityViolation, LeaseLost, VersionConflict
from runs.domain.handoff import build_handoff_bundle
from runs.domain.ledger import LedgerStatus
from runs.domain.state import RunState

HANDOFF_OBSERVATIONS = 5

_STATE_FIELDS = [f for f in RunState.model_fields if f not in ("run_id", "goal", "subject")]


def _constraint(exc: IntegrityError) -> str:
    # The database's own words name the key (no values on SQLite or PostgreSQL's first line).
    return str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__


def _row_to_state(run: m.Run) -> RunState:
    data = {f: getattr(run, f) for f in _STATE_FIELDS}
    return RunState(run_id=run.id, subject=run.subject, goal=run.goal, **data)


def _state_fields(state: RunState) -> dict[str, Any]:
    dumped = state.model_dump(mode="json")
    return {f: dumped[f] for f in _STATE_FIELDS}


def _to_observation(row: m.Observation) -> Observation:
    return Observation(
        observation_id=row.observation_id,
        kind=ObservationKind(row.kind),
        trust=TrustLabel(row.trust),
        step=row.step,
        content=row.content,
        content_hash=row.content_hash,
        citable=row.citable,
    )


def _to_item(row: WorkingMemoryItem) -> WorkingItem:
    return WorkingItem(
        item_id=row.item_id,
        kind=row.kind,
        content=row.content,
        trust=row.trust,
        source_ids=tuple(row.source_ids),
        created_at_step=row.created_at_step,
        expires_after_step=row.expires_after_step,
        seq=row.seq,
    )


class OrmLookups:
    def __init__(self, run_id: str) -> None:
        self.run_id = run_id

    def seen_content(self, content_hash: str) -> bool:
        return m.Observation.objects.filter(run_id=self.run_id, content_hash=content_hash).exists()

    def trust_of(self, observation_ids: Collection[str]) -> Mapping[str, str]:
        if not observation_ids:
            return {}
        rows = m.Observation.objects.filter(
            run_id=self.run_id, observation_id__in=list(observation_ids)
        ).values_list("observation_id", "trust")
        return dict(rows)

    def citable(self, observation_ids: Collection[str]) -> set[str]:
        if not observation_ids:
            return set()
        return set(
            m.Observation.objects.filter(
                run_id=self.run_id, observation_id__in=list(observation_ids), citable=True
            ).values_list("observation_id", flat=True)
        )

    def ledger_has(self, idempotency_token: str) -> bool:
        return m.LedgerEntry.objects.filter(idempotency_token=idempotency_token).exists()


class OrmRunStore:
    def __init__(self, on_commit_events: Any = None, lease_owner: str | None = None) -> None:
        # Called after commit with (run_id, last_sequence): the realtime doorbell.
        self.on_commit_events = on_commit_events
        # When set, every write also requires that this worker still holds the run's lease.
        self.lease_owner = lease_owner

    def create(
        self,
        state: RunState,
        *,
        grants: Sequence[CapabilityGrant],
        confirmations: Sequence[Confirmation],
        planner: dict[str, Any],
        owner: Any = None,
        budgets: dict[str, Any] | None = None,
        granted_by: Any = None,
        proposals: Mapping[str, dict[str, Any]] | None = None,
        faults: dict[str, Any] | None = None,
    ) -> RunState:
        try:
            self._create(
                state,
                grants=grants,
                confirmations=confirmations,
                planner=planner,
                owner=owner,
                budgets=budgets,
                granted_by=granted_by,
                proposals=proposals or {},
                faults=faults,
            )
        except IntegrityError as exc:
            raise IntegrityViolation(
                "a new run broke a unique key", run_id=state.run_id, constraint=_constraint(exc)
            ) from exc
        return state

    def _create(
        self,
        state: RunState,
        *,
        grants: Sequence[CapabilityGrant],
        confirmations: Sequence[Confirmation],
        planner: dict[str, Any],
        owner: Any,
        budgets: dict[str, Any] | None,
        granted_by: Any,
        proposals: Mapping[str, dict[str, Any]],
        faults: dict[str, Any] | None,
    ) -> None:
        with transaction.atomic():
            m.Run.objects.create(
                id=state.run_id,
                subject=state.subject,
                goal=state.goal,
                owner=owner,
                planner=planner,
                budgets=budgets or {},
                faults=faults or {},
                **_state_fields(state),
            )
            Grant.objects.bulk_create(
                Grant(
                    id=g.grant_id,
                    run_id=state.run_id,
                    capability=g.capability,
                    resource_scope=g.resource_scope,
                    expires_at_step=g.expires_at_step,
                    max_calls=g.max_calls,
                    calls_used=g.calls_used,
                    constraints={
                        k: c.model_dump(exclude_unset=True) for k, c in g.constraints.items()
                    },
                    granted_by=granted_by,
                )
                for g in grants
            )
            ConfirmationRow.objects.bulk_create(
                ConfirmationRow(
                    id=c.confirmation_id,
                    run_id=state.run_id,
                    proposal_hash=c.proposal_hash,
                    tool_name=proposals.get(c.confirmation_id, {}).get("tool_name", ""),
                    tool_version=proposals.get(c.confirmation_id, {}).get("tool_version", ""),
                    proposal=proposals.get(c.confirmation_id),
                    status=c.status.value,
                    expires_at_step=c.expires_at_step,
                    origin="scenario",
                    decided_at=timezone.now()
                    if c.status is not ConfirmationStatus.PENDING
                    else None,
                )
                for c in confirmations
            )

    def load(self, run_id: str) -> RunState:
        try:
            return _row_to_state(m.Run.objects.get(pk=run_id))
        except m.Run.DoesNotExist:
            raise NotFound(f"no run {run_id}", run_id=run_id) from None

    def apply(self, commit: Commit, *, decided_by: Any = None) -> RunState:
        """Write ``commit`` atomically iff the run is still at ``commit.expected_version``."""
        state = commit.state
        run_id = state.run_id
        first_seq = state.trace_seq + 1
        last_seq = state.trace_seq + len(commit.events)
        state = state.model_copy(update={"trace_seq": last_seq})
        try:
            with transaction.atomic():
                self._apply(commit, state, first_seq, decided_by)
                if commit.events and self.on_commit_events is not None:
                    # Announced only once the outermost transaction commits (never a phantom).
                    ring = self.on_commit_events
                    queues = bool(
                        commit.confirmation_request
                        or commit.confirmation_decision
                        or commit.handoff_reason
                        or commit.expire_pending_confirmations
                    )
                    transaction.on_commit(lambda: ring(run_id, last_seq, queues_changed=queues))
        except IntegrityError as exc:
            # Not a race: the compare-and-set above is the first write, so a second writer of
            # this run waits for it (PostgreSQL row lock, SQLite write lock) and then matches 0
            # rows. A unique key broken after it is a bug in how a key was named; it fails the
            # same way on every retry, so it must never pass for a VersionConflict (issue 9
            # item 4: a retried clash once left a run stuck in running). Rolled back whole.
            raise IntegrityViolation(
                "a write broke a unique key", run_id=run_id, constraint=_constraint(exc)
            ) from exc
        return state

    def _apply(self, commit: Commit, state: RunState, first_seq: int, decided_by: Any) -> None:
        run_id = state.run_id
        # Compare-and-set: the race is two writers (workers, a cancel, a decision) that read the
        # same version; exactly one update matches, the other sees 0 rows.
        match = m.Run.objects.filter(pk=run_id, version=commit.expected_version)
        if self.lease_owner is not None:
            match = match.filter(lease_owner=self.lease_owner)
        updated = match.update(**_state_fields(state), updated_at=timezone.now())
        if updated != 1:
            if (
                self.lease_owner is not None
                and not m.Run.objects.filter(pk=run_id, lease_owner=self.lease_owner).exists()
            ):
                raise LeaseLost("the run's lease passed to another worker", run_id=run_id)
            raise VersionConflict("run changed since it was read", run_id=run_id)
        if commit.events:
            m.TraceEvent.objects.bulk_create(
                m.TraceEvent(
                    run_id=run_id,
                    sequence=first_seq + i,
                    event=d.event,
                    proposal_id=d.proposal_id,
                    details=d.details,
                )
                for i, d in enumerate(commit.events)
            )
        if commit.observations:
            m.Observation.objects.bulk_create(
                m.Observation(
                    run_id=run_id,
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
        if commit.working_items:
            self._admit_working(run_id, commit.working_items, state.step)
        if commit.ledger_intent is not None:
            c = commit.ledger_intent
            m.LedgerEntry.objects.create(
                run_id=run_id,
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
                step=state.step,
            )
        if commit.ledger_settle is not None:
            s = commit.ledger_settle
            n = m.LedgerEntry.objects.filter(
                idempotency_token=s.idempotency_token,
                status__in=[LedgerStatus.STARTED, LedgerStatus.UNKNOWN],
            ).update(
                status=s.status,
                outcome=s.outcome,
                verification=s.verification,
                finished_at=timezone.now(),
            )
            if n != 1:
                raise VersionConflict("ledger row already settled", run_id=run_id)
        if commit.ledger_attempt is not None:
            token, attempt = commit.ledger_attempt
            n = m.LedgerEntry.objects.filter(
                idempotency_token=token, status=LedgerStatus.STARTED, attempt=attempt - 1
            ).update(attempt=attempt)
            if n != 1:
                raise VersionConflict("ledger attempt moved concurrently", run_id=run_id)
        if commit.confirmation_request is not None:
            r = commit.confirmation_request
            ConfirmationRow.objects.create(
                id=r.confirmation_id,
                run_id=run_id,
                proposal_hash=r.proposal_hash,
                tool_name=r.tool_name,
                tool_version=r.tool_version,
                proposal=r.proposal,
                status=ConfirmationStatus.PENDING.value,
                expires_at_step=r.expires_at_step,
                cites_untrusted=r.cites_untrusted,
            )
        if commit.confirmation_decision is not None:
            cid, approved = commit.confirmation_decision
            status = ConfirmationStatus.APPROVED if approved else ConfirmationStatus.DECLINED
            n = ConfirmationRow.objects.filter(
                pk=cid, run_id=run_id, status=ConfirmationStatus.PENDING.value
            ).update(status=status.value, decided_at=timezone.now(), decided_by=decided_by)
            if n != 1:
                raise VersionConflict("confirmation already decided", run_id=run_id)
        if commit.consume_confirmation is not None:
            n = ConfirmationRow.objects.filter(
                pk=commit.consume_confirmation,
                run_id=run_id,
                status=ConfirmationStatus.APPROVED.value,
            ).update(status=ConfirmationStatus.CONSUMED.value)
            if n != 1:
                raise VersionConflict("confirmation already used", run_id=run_id)
        for grant_id in commit.grant_uses:
            n = Grant.objects.filter(
                Q(max_calls__isnull=True) | Q(calls_used__lt=F("max_calls")),
                pk=grant_id,
                run_id=run_id,
            ).update(calls_used=F("calls_used") + 1)
            if n != 1:
                raise VersionConflict("grant used up concurrently", run_id=run_id)
        if commit.expire_pending_confirmations:
            ConfirmationRow.objects.filter(
                run_id=run_id, status=ConfirmationStatus.PENDING.value
            ).update(status=ConfirmationStatus.EXPIRED.value)
        if commit.handoff_reason is not None:
            self._open_handoff(
                state,
                commit.handoff_reason,
                proposal=commit.handoff_proposal,
                proposal_hash=commit.handoff_proposal_hash,
            )

    def _admit_working(self, run_id: str, new: list[WorkingItem], step: int) -> None:
        """Apply the eviction rule to at most max_items + len(new) rows: constant per step."""
        rows = WorkingMemoryItem.objects.filter(run_id=run_id)
        current = [_to_item(r) for r in rows]
        kept = admit(current, new, step=step)
        kept_ids = {i.item_id for i in kept}
        current_ids = {i.item_id for i in current}
        # Always one DELETE (of whatever is not kept), so a step costs the same number of
        # queries whether or not the caps evict something.
        rows.exclude(item_id__in=list(kept_ids)).delete()
        WorkingMemoryItem.objects.bulk_create(
            WorkingMemoryItem.from_item(run_id, i) for i in kept if i.item_id not in current_ids
        )

    def working_view(self, run_id: str, step: int) -> list[WorkingItem]:
        rows = WorkingMemoryItem.objects.filter(run_id=run_id)
        return admit([_to_item(r) for r in rows], [], step=step)

    def _open_handoff(
        self,
        state: RunState,
        reason: str,
        *,
        proposal: dict[str, Any] | None = None,
        proposal_hash: str | None = None,
    ) -> None:
        trusted = m.Observation.objects.filter(run_id=state.run_id).exclude(
            trust="untrusted-content"
        )
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
                run_id=state.run_id,
                status__in=[
                    LedgerStatus.STARTED,
                    LedgerStatus.UNKNOWN,
                    LedgerStatus.COMPENSATION_REQUIRED,
                ],
            )
        ]
        bundle = build_handoff_bundle(
            state=state,
            reason=reason,
            trusted_observations=observations,
            unknown_effects=effects,
            proposal=proposal,
            proposal_hash=proposal_hash,
        )
        m.Handoff.objects.create(run_id=state.run_id, reason=reason, bundle=bundle)

    def grants(self, run_id: str) -> list[CapabilityGrant]:
        return [
            CapabilityGrant(
                grant_id=g.id,
                capability=g.capability,
                run_id=g.run_id,
                resource_scope=g.resource_scope,
                expires_at_step=g.expires_at_step,
                max_calls=g.max_calls,
                calls_used=g.calls_used,
                constraints=g.constraints,
            )
            for g in Grant.objects.filter(run_id=run_id)
        ]

    def confirmations(self, run_id: str) -> list[Confirmation]:
        # Used and expired ones authorize nothing; they are read so the trace can say why a
        # proposal still needs a person (CONFIRMATION_ALREADY_USED). At most one per step.
        rows = ConfirmationRow.objects.filter(run_id=run_id).order_by()
        return [
            Confirmation(
                confirmation_id=c.id,
                run_id=c.run_id,
                proposal_hash=c.proposal_hash,
                status=ConfirmationStatus(c.status),
                expires_at_step=c.expires_at_step,
                tool_name=c.tool_name or None,
                hash_scheme=c.hash_scheme,
            )
            for c in rows
        ]

    def lookups(self, run_id: str) -> OrmLookups:
        return OrmLookups(run_id)

    def active_tool(self, run_id: str) -> bool:
        return m.LedgerEntry.objects.filter(run_id=run_id, status=LedgerStatus.STARTED).exists()

    def recent_observations(self, run_id: str, limit: int) -> list[Observation]:
        rows = m.Observation.objects.filter(run_id=run_id).order_by("-id")[:limit]
        return [_to_observation(r) for r in reversed(list(rows))]

    def planner_config(self, run_id: str) -> dict[str, Any]:
        return m.Run.objects.values_list("planner", flat=True).get(pk=run_id)

    def started_command(self, run_id: str) -> tuple[ExecutableCommand, int] | None:
        """The command whose intent committed but whose outcome did not (a crashed worker)."""
        row = m.LedgerEntry.objects.filter(run_id=run_id, status=LedgerStatus.STARTED).first()
        if row is None:
            return None
        return command_from_row(row), row.attempt


def command_from_row(row: m.LedgerEntry) -> ExecutableCommand:
    return restore_command(
        command_id=f"{row.run_id}:{row.proposal_id}",
        run_id=row.run_id,
        proposal_id=row.proposal_id,
        tool_name=row.tool_name,
        tool_version=row.tool_version,
        validated_arguments=row.arguments,
        arguments_hash=row.arguments_hash,
        proposal_hash=row.proposal_hash,
        idempotency_token=row.idempotency_token,
        resource=row.resource,
        deadline_ms=row.deadline_ms,
        granted_capabilities=(),
        grant_ids=tuple(row.grant_ids),
        confirmation_id=row.confirmation_id,
        consume_confirmation=False,
    )

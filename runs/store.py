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

from memory.domain.working import WorkingItem, admit, untrusted_sources
from policy import selectors as policy_selectors
from policy import services as policy_services
from policy.domain.confirmations import Confirmation
from policy.domain.decisions import ExecutableCommand, restore_command
from policy.domain.errors import NotFound
from policy.domain.grants import CapabilityGrant
from policy.domain.observations import Observation
from runs import models as m
from runs.domain.commits import Commit
from runs.domain.errors import IntegrityViolation
from runs.domain.ledger import LedgerStatus
from runs.domain.state import RunState
from runs.rows import (
    LOAD_COLUMNS,
    state_fields,
    to_observation,
    values_to_state,
    working_items,
)
from runs.writers import WRITERS, At, write_run


def _constraint(exc: IntegrityError) -> str:
    # The database's own words name the key (no values on SQLite or PostgreSQL's first line).
    return str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__


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

    def untrusted_in_view(self, step: int) -> tuple[str, ...]:
        return untrusted_sources(admit(working_items(self.run_id), [], step=step))

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
                tool_policy=state.tool_policy,
                owner=owner,
                planner=planner,
                budgets=budgets or {},
                faults=faults or {},
                **state_fields(state),
            )
            policy_services.grants_create(run_id=state.run_id, grants=grants, granted_by=granted_by)
            policy_services.confirmations_create(
                run_id=state.run_id, confirmations=confirmations, proposals=proposals
            )

    def load(self, run_id: str) -> RunState:
        values = m.Run.objects.filter(pk=run_id).values(*LOAD_COLUMNS).first()
        if values is None:
            raise NotFound(f"no run {run_id}", run_id=run_id)
        return values_to_state(values)

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
                        or commit.confirmation_approval
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
        # The run's compare-and-set first (nothing else is written when it fails), then each
        # part of the commit by its writer, in the order of ``runs.writers.WRITERS``.
        write_run(commit, state, self.lease_owner)
        at = At(run_id=state.run_id, state=state, first_seq=first_seq, decided_by=decided_by)
        for write in WRITERS:
            write(commit, at)

    def working_view(self, run_id: str, step: int) -> list[WorkingItem]:
        return admit(working_items(run_id), [], step=step)

    def grants(self, run_id: str) -> list[CapabilityGrant]:
        return policy_selectors.run_grants(run_id=run_id)

    def confirmations(self, run_id: str) -> list[Confirmation]:
        return policy_selectors.run_confirmations(run_id=run_id)

    def lookups(self, run_id: str) -> OrmLookups:
        return OrmLookups(run_id)

    def active_tool(self, run_id: str) -> bool:
        return m.LedgerEntry.objects.filter(run_id=run_id, status=LedgerStatus.STARTED).exists()

    def recent_observations(self, run_id: str, limit: int) -> list[Observation]:
        rows = m.Observation.objects.filter(run_id=run_id).order_by("-id")[:limit]
        return [to_observation(r) for r in reversed(list(rows))]

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

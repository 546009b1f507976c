"""ORM adapter of the ``RunStore`` port (runs.domain.ports).

``apply`` writes one commit in one short transaction: a compare-and-set on the run version, then
the trace events, observations, ledger intent/outcome, confirmation and grant rows. Zero rows on
the compare-and-set means another writer moved the run first: ``VersionConflict``, nothing
written. This holds on SQLite too, where row locks do nothing (STYLE habit 3).

Every query here is indexed and bounded; none reads the run's history, so the cost of a step does
not grow with the run's length.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from django.db import IntegrityError, connection, transaction

from agentconsole.kernel import sqlbatch
from agentconsole.kernel.sqlbatch import Write
from memory.domain.working import WorkingItem, admit
from memory.working_rows import working_from_rows, working_read
from policy import selectors as policy_selectors
from policy import services as policy_services
from policy.domain.confirmation.confirmations import Confirmation
from policy.domain.decisions import ExecutableCommand
from policy.domain.errors import NotFound
from policy.domain.grants import CapabilityGrant
from policy.domain.observations import Observation
from policy.domain.origins.taint import RunIndex
from policy.selectors import (
    confirmations_from_rows,
    confirmations_read,
    grants_from_rows,
    grants_read,
)
from runs import models as m
from runs.domain.errors import IntegrityViolation, LeaseLost, VersionConflict
from runs.domain.gateway.calls import CallRecord, call_id, tool_call_id
from runs.domain.ledger import LedgerStatus
from runs.domain.state import RunState
from runs.domain.step.commits import Commit
from runs.domain.trace_chain import link_events
from runs.orm.rows import (
    run_read,
    state_fields,
    state_from_row,
    to_observation,
    working_items,
)
from runs.orm.step_inputs import (
    Inputs,
    Unknown,
    call_from_rows,
    call_read,
    latest_call_read,
    started_from_rows,
    started_read,
)
from runs.orm.step_inputs import after as inputs_after
from runs.orm.taint_store import run_index
from runs.orm.writers import AFTER, BATCHED, RUN_MOVED, At, run_write, writes_after


def _constraint(exc: IntegrityError) -> str:
    # The database's own words name the key (no values on SQLite or PostgreSQL's first line).
    return str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__


_inputs = threading.local()


class _Missed(Exception):
    """The run's compare-and-set matched no row: another writer or the lease moved on."""


def _rows(model: Any, columns: Sequence[str], where: dict[str, Any], **kw: Any) -> list[Any]:
    # One plain SELECT (``agentconsole.kernel.sqlbatch``): a step's lookups skip the ORM's query
    # building.
    (rows,) = sqlbatch.fetch([sqlbatch.select(model, columns, where, **kw)])
    return rows


class OrmLookups:
    def __init__(self, run_id: str) -> None:
        self.run_id = run_id

    def seen_content(self, content_hash: str) -> bool:
        where = {"run": self.run_id, "content_hash": content_hash}
        return bool(_rows(m.Observation, ("id",), where, limit=1))

    def trust_of(self, observation_ids: Collection[str]) -> Mapping[str, str]:
        if not observation_ids:
            return {}
        where = {"run": self.run_id, "observation_id": list(observation_ids)}
        return dict(_rows(m.Observation, ("observation_id", "trust"), where, order_by=("id",)))

    def taint_index(self, observation_seq: int | None = None) -> RunIndex:
        return run_index(self.run_id, observation_seq)

    def citable(self, observation_ids: Collection[str]) -> set[str]:
        if not observation_ids:
            return set()
        where = {"run": self.run_id, "observation_id": list(observation_ids), "citable": True}
        return {oid for (oid,) in _rows(m.Observation, ("observation_id",), where)}

    def ledger_has(self, idempotency_token: str) -> bool:
        where = {"idempotency_token": idempotency_token}
        return bool(_rows(m.LedgerEntry, ("id",), where, limit=1))


class OrmRunStore:
    def __init__(
        self,
        on_commit_events: Any = None,
        lease_owner: str | None = None,
        on_call_requested: Any = None,
        on_notification: Any = None,
    ) -> None:
        # Called after commit with (run_id, last_sequence): the realtime doorbell.
        self.on_commit_events = on_commit_events
        # Called after a commit that recorded a model or tool call: the gateway's doorbell.
        self.on_call_requested = on_call_requested
        # Called after a commit that wrote a notification's outbox row (a new confirmation or
        # handoff): the notifier's doorbell (notify.tasks.enqueue_deliver).
        self.on_notification = on_notification
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
        profile: Any = None,
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
                profile=profile,
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
        profile: Any,
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
                profile=profile,
                **state_fields(state),
            )
            policy_services.grants_create(run_id=state.run_id, grants=grants, granted_by=granted_by)
            policy_services.confirmations_create(
                run_id=state.run_id, confirmations=confirmations, proposals=proposals
            )

    def load(self, run_id: str, *, inputs: bool = False) -> RunState:
        """The run's state. With ``inputs``, what its next step reads (grants, confirmations,
        working memory, the planner configuration, a started ledger row, its latest call) is
        read with it in the same round trip and kept for this thread as the inputs of that
        version (``grants``, ``confirmations``, ``working_view``, ``planner_config``,
        ``started_command``, ``model_call`` and ``apply`` given that version use them instead
        of reading again)."""
        reads = [run_read(run_id)]
        if inputs:
            reads += [
                grants_read(run_id),
                confirmations_read(run_id),
                working_read(run_id),
                sqlbatch.select(m.Run, ("planner",), {"id": run_id}),
                started_read(run_id),
                latest_call_read(run_id),
            ]
        found = sqlbatch.fetch(reads)
        if not found[0]:
            raise NotFound(f"no run {run_id}", run_id=run_id)
        state = state_from_row(found[0][0])
        if inputs:
            _inputs.last = Inputs(
                run_id=run_id,
                version=state.version,
                grants=grants_from_rows(run_id, found[1]),
                confirmations=confirmations_from_rows(run_id, found[2]),
                working=working_from_rows(found[3]),
                planner=found[4][0][0],
                started=started_from_rows(found[5]),
                call=call_from_rows(found[6]),
            )
        return state

    def inputs_kept(self, state: RunState) -> bool:
        """Whether this thread knows the inputs of ``state``'s version (a load read them, or the
        commit that made it could say what it left): then the runner goes on from ``state``
        without loading the run again."""
        return self._inputs(state.run_id, state.version) is not None

    def _inputs(self, run_id: str, version: int | None) -> Inputs | None:
        last: Inputs | None = getattr(_inputs, "last", None)
        if version is None or last is None or (last.run_id, last.version) != (run_id, version):
            return None
        return last

    def apply(self, commit: Commit, *, decided_by: Any = None) -> RunState:
        """Write ``commit`` atomically iff the run is still at ``commit.expected_version``."""
        state = commit.state
        run_id = state.run_id
        first_seq = state.trace_seq + 1
        last_seq = state.trace_seq + len(commit.events)
        # Linked from the head the commit was decided on: the compare-and-set below makes it
        # the run's current head, or writes nothing (runs.domain.trace_chain).
        links, head = link_events(run_id, state.trace_head, commit.events)
        state = state.model_copy(update={"trace_seq": last_seq, "trace_head": head})
        at = At(run_id, state, first_seq, decided_by, links=links)
        after = writes_after(commit)
        ring = None
        if commit.events and self.on_commit_events is not None:
            # The realtime doorbell: rung only once the commit is durable (never a phantom).
            queues = after or commit.expire_pending_confirmations
            ring = functools.partial(self.on_commit_events, run_id, last_seq, queues_changed=queues)
        requested = commit.model_request is not None or commit.tool_request is not None
        if requested and self.on_call_requested is not None:
            ring = _both(ring, self.on_call_requested)
        notified = commit.confirmation_request is not None or commit.handoff_reason is not None
        if notified and self.on_notification is not None:
            ring = _both(ring, self.on_notification)
        try:
            if after or connection.in_atomic_block:
                with transaction.atomic():
                    self._apply(commit, at)
                    if ring is not None:
                        transaction.on_commit(ring)
            else:
                # Nothing to write after the batch, and no caller's transaction to join: the
                # batch is the transaction, BEGIN to COMMIT in one round trip.
                _, writes = self._writes(commit, at)
                _check(sqlbatch.transaction(writes), writes, run_id)
                if ring is not None:
                    ring()
        except _Missed:
            # Rolled back whole; told apart outside the failed transaction.
            raise self._why_missed(run_id) from None
        except IntegrityError as exc:
            # Not a race: a lost race is a compare-and-set that matched no row (``_Missed``,
            # whatever the writes sent with it then broke). A unique key broken after a
            # matching compare-and-set is a bug in how a key was named; it fails the same way
            # on every retry, so it must never pass for a VersionConflict (issue 9 item 4: a
            # retried clash once left a run stuck in running). Rolled back whole.
            raise IntegrityViolation(
                "a write broke a unique key", run_id=run_id, constraint=_constraint(exc)
            ) from exc
        _inputs.last = inputs_after(commit, state, self._inputs(run_id, commit.expected_version))
        return state

    def _writes(self, commit: Commit, at: At) -> tuple[At, list[Write]]:
        # The run's compare-and-set first (a second writer of this run waits for its row lock,
        # then matches no row), then the batched parts (``runs.orm.writers``).
        if commit.working_items:
            kept = self._inputs(at.run_id, commit.expected_version)
            # Read before the compare-and-set: a commit landing after this read moves the
            # version, and the compare-and-set then matches no row.
            working = kept.working if kept is not None else working_items(at.run_id)
            at = dataclasses.replace(at, working=working)
        writes = [run_write(commit, at.state, self.lease_owner)]
        for part in BATCHED:
            writes.extend(part(commit, at))
        return at, writes

    def _apply(self, commit: Commit, at: At) -> None:
        # In the caller's transaction: the batch in one round trip, its row counts checked, then
        # each part that needs the database's answer.
        at, writes = self._writes(commit, at)
        _check(sqlbatch.run(writes), writes, at.run_id)
        for write in AFTER:
            write(commit, at)

    def _why_missed(self, run_id: str) -> VersionConflict | LeaseLost:
        if (
            self.lease_owner is not None
            and not m.Run.objects.filter(pk=run_id, lease_owner=self.lease_owner).exists()
        ):
            return LeaseLost("the run's lease passed to another worker", run_id=run_id)
        return VersionConflict("run changed since it was read", run_id=run_id)

    def working_view(self, run_id: str, step: int, version: int | None = None) -> list[WorkingItem]:
        kept = self._inputs(run_id, version)
        return admit(kept.working if kept else working_items(run_id), [], step=step)

    def grants(self, run_id: str, version: int | None = None) -> list[CapabilityGrant]:
        kept = self._inputs(run_id, version)
        return list(kept.grants) if kept else policy_selectors.run_grants(run_id=run_id)

    def confirmations(self, run_id: str, version: int | None = None) -> list[Confirmation]:
        kept = self._inputs(run_id, version)
        if kept is not None:
            return list(kept.confirmations)
        return policy_selectors.run_confirmations(run_id=run_id)

    def lookups(self, run_id: str) -> OrmLookups:
        return OrmLookups(run_id)

    def active_tool(self, run_id: str) -> bool:
        where = {"run": run_id, "status": LedgerStatus.STARTED.value}
        return bool(_rows(m.LedgerEntry, ("id",), where, limit=1))

    def recent_observations(self, run_id: str, limit: int) -> list[Observation]:
        rows = m.Observation.objects.filter(run_id=run_id).order_by("-id")[:limit]
        return [to_observation(r) for r in reversed(list(rows))]

    def planner_config(self, run_id: str, version: int | None = None) -> dict[str, Any]:
        kept = self._inputs(run_id, version)
        if kept is not None:
            return kept.planner
        found = _rows(m.Run, ("planner",), {"id": run_id})
        if not found:
            raise m.Run.DoesNotExist(f"no run {run_id}")
        return found[0][0]

    def model_call(self, run_id: str, step: int, version: int | None = None) -> CallRecord | None:
        """The model call recorded for the run's ``step``, if any (one indexed row)."""
        kept = self._inputs(run_id, version)
        if kept is not None and not isinstance(kept.call, Unknown):
            return kept.call[1] if kept.call is not None and kept.call[0] == step else None
        (found,) = sqlbatch.fetch([call_read({"id": call_id(run_id, step)})])
        call = call_from_rows(found)
        return call[1] if call is not None else None

    def tool_call(self, run_id: str, token: str, attempt: int) -> CallRecord | None:
        """The gateway's call of a command's attempt, if any (one indexed row)."""
        (found,) = sqlbatch.fetch([call_read({"id": tool_call_id(run_id, token, attempt)})])
        call = call_from_rows(found)
        return call[1] if call is not None else None

    def started_command(
        self, run_id: str, version: int | None = None
    ) -> tuple[ExecutableCommand, int] | None:
        """The command whose intent committed but whose outcome did not (a crashed worker)."""
        kept = self._inputs(run_id, version)
        if kept is not None and not isinstance(kept.started, Unknown):
            return kept.started
        (found,) = sqlbatch.fetch([started_read(run_id)])
        return started_from_rows(found)


def _both(first: Any, then: Any) -> Any:
    def ring() -> None:
        if first is not None:
            first()
        then()

    return ring


def _check(ran: sqlbatch.Ran, writes: Sequence[Write], run_id: str) -> None:
    """Raise what a batch's outcome means: its compare-and-set matched no row (``_Missed``),
    a key it wrote was taken, or another of its expectations was not met."""
    missed = ran.missed_at(writes)
    if missed == 0:
        raise _Missed
    if ran.error is not None:
        raise ran.error
    if missed is not None:
        raise VersionConflict(writes[missed].expect_one or RUN_MOVED, run_id=run_id)

"""In-memory adapter of ``RunStore``: the reference the ORM adapter is checked against (the
conformance suite in tests/conformance runs both). A lock stands in for the database's atomicity.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from memory.domain.working import WorkingItem, admit
from policy.domain.confirmation.confirmations import Confirmation, ConfirmationStatus
from policy.domain.decisions import ExecutableCommand
from policy.domain.errors import NotFound
from policy.domain.grants import CapabilityGrant
from policy.domain.observations import Observation
from policy.domain.origins.taint import RunIndex
from runs.domain.errors import IntegrityViolation, VersionConflict
from runs.domain.gateway.calls import (
    OPEN,
    SETTLED,
    CallRecord,
    CallStatus,
    ModelRequest,
    call_id,
    tool_call_id,
)
from runs.domain.ledger import LedgerStatus
from runs.domain.state import RunState
from runs.domain.step.commits import Commit
from runs.domain.trace_chain import Link, link_events


class _Lookups:
    def __init__(self, store: InMemoryRunStore, run_id: str) -> None:
        self.store, self.run_id = store, run_id

    def seen_content(self, content_hash: str) -> bool:
        return content_hash in self.store.content[self.run_id]

    def trust_of(self, observation_ids: Collection[str]) -> Mapping[str, str]:
        obs = self.store.observations[self.run_id]
        return {i: obs[i].trust.value for i in observation_ids if i in obs}

    def taint_index(self, observation_seq: int | None = None) -> RunIndex:
        with self.store._lock:
            return self.store.taint[self.run_id]

    def citable(self, observation_ids: Collection[str]) -> set[str]:
        obs = self.store.observations[self.run_id]
        return {i for i in observation_ids if i in obs and obs[i].citable}

    def ledger_has(self, idempotency_token: str) -> bool:
        return idempotency_token in self.store.ledger


class InMemoryRunStore:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.runs: dict[str, RunState] = {}
        self.events: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self.observations: dict[str, dict[str, Observation]] = defaultdict(dict)
        self.content: dict[str, set[str]] = defaultdict(set)
        self.ledger: dict[str, dict[str, Any]] = {}
        self._grants: dict[str, dict[str, CapabilityGrant]] = defaultdict(dict)
        self._confirmations: dict[str, dict[str, Confirmation]] = defaultdict(dict)
        # The proposal each confirmation request shows a person (the ORM's Confirmation.proposal).
        self.asked: dict[str, dict[str, Any]] = {}
        self._planner: dict[str, dict[str, Any]] = {}
        self._commands: dict[str, ExecutableCommand] = {}
        self.handoffs: dict[str, list[str]] = defaultdict(list)
        self.working: dict[str, list[WorkingItem]] = defaultdict(list)
        # Each run's provenance index (the ORM adapter's ``TaintEntry`` rows), kept built.
        self.taint: dict[str, RunIndex] = defaultdict(RunIndex)
        # Model calls by id (runs.domain.gateway.calls): what the ORM adapter keeps in
        # ``ModelCall``.
        self.calls: dict[str, dict[str, Any]] = {}

    def create(
        self,
        state: RunState,
        *,
        grants: Sequence[CapabilityGrant],
        confirmations: Sequence[Confirmation],
        planner: dict[str, Any],
    ) -> RunState:
        with self._lock:
            ids = [c.confirmation_id for c in confirmations]
            if state.run_id in self.runs or len(ids) != len(set(ids)):
                raise IntegrityViolation("a new run broke a unique key", run_id=state.run_id)
            self.runs[state.run_id] = state.model_copy(deep=True)
            self._grants[state.run_id] = {g.grant_id: g for g in grants}
            self._confirmations[state.run_id] = {c.confirmation_id: c for c in confirmations}
            self._planner[state.run_id] = planner
            return state.model_copy(deep=True)

    def load(self, run_id: str, *, inputs: bool = False) -> RunState:
        with self._lock:
            if run_id not in self.runs:
                raise NotFound(f"no run {run_id}")
            return self.runs[run_id].model_copy(deep=True)

    def apply(self, commit: Commit) -> RunState:
        """All preconditions first, then all writes: the lock plays the transaction."""
        state = commit.state
        run_id = state.run_id
        with self._lock:
            self._check(commit)
            seq = state.trace_seq
            links, head = link_events(run_id, state.trace_head, commit.events)
            linked: Sequence[Link | None] = links or [None] * len(commit.events)
            for draft, link in zip(commit.events, linked, strict=True):
                seq += 1
                self.events[run_id].append(
                    {
                        "sequence": seq,
                        "event": draft.event,
                        "proposal_id": draft.proposal_id,
                        "details": dict(draft.details),
                        "content_digest": link.content_digest if link else None,
                        "chain_digest": link.chain_digest if link else None,
                    }
                )
            state = state.model_copy(update={"trace_seq": seq, "trace_head": head}, deep=True)
            for obs in commit.observations:
                self.observations[run_id][obs.observation_id] = obs
                self.content[run_id].add(obs.content_hash)
            self.taint[run_id].extend(commit.taint_entries)
            self._write_ledger(commit)
            self._write_calls(commit)
            self._write_confirmations(commit)
            for grant_id in commit.grant_uses:
                g = self._grants[run_id][grant_id]
                self._grants[run_id][grant_id] = g.model_copy(
                    update={"calls_used": g.calls_used + 1}
                )
            if commit.handoff_reason is not None:
                self.handoffs[run_id].append(commit.handoff_reason)
            if commit.working_items:
                self.working[run_id] = admit(
                    self.working[run_id], commit.working_items, step=state.step
                )
            self.runs[run_id] = state
            return state.model_copy(deep=True)

    def _write_ledger(self, commit: Commit) -> None:
        if commit.ledger_intent is not None:
            c = commit.ledger_intent
            self._commands[c.idempotency_token] = c
            self.ledger[c.idempotency_token] = {
                "run_id": commit.state.run_id,
                "idempotency_token": c.idempotency_token,
                "proposal_id": c.proposal_id,
                "tool_name": c.tool_name,
                "tool_version": c.tool_version,
                "arguments_hash": c.arguments_hash,
                "status": LedgerStatus.STARTED,
                "outcome": None,
                "verification": None,
                "attempt": 1,
            }
        if commit.ledger_attempt is not None:
            self.ledger[commit.ledger_attempt[0]]["attempt"] = commit.ledger_attempt[1]
        if commit.ledger_settle is not None:
            settle = commit.ledger_settle
            self.ledger[settle.idempotency_token].update(
                status=settle.status, outcome=settle.outcome, verification=settle.verification
            )

    def _write_calls(self, commit: Commit) -> None:
        run_id = commit.state.run_id
        for requested in (commit.model_request, commit.tool_request):
            if requested is not None:
                cid, request = requested
                self.calls[cid] = {
                    "run_id": run_id,
                    "request": request,
                    "status": CallStatus.QUEUED,
                    "reply": None,
                    "failure": None,
                    "attempts": 0,
                }
        if commit.consume_call is not None:
            self.calls[commit.consume_call]["status"] = CallStatus.CONSUMED
        if commit.abandon_calls:
            for call in self.calls.values():
                if call["run_id"] == run_id and call["status"] in OPEN:
                    call["status"] = CallStatus.ABANDONED

    def answer_call(
        self, cid: str, *, reply: Any = None, failure: dict[str, Any] | None = None
    ) -> bool:
        """The gateway's half, for the in-memory adapter: record a reply (or a failure) of an
        open call; False if it is no longer open (abandoned: the answer is dropped)."""
        with self._lock:
            call = self.calls[cid]
            if call["status"] not in OPEN:
                return False
            call.update(
                status=CallStatus.FAILED if failure is not None else CallStatus.ANSWERED,
                reply=reply,
                failure=failure,
                attempts=call["attempts"] + 1,
            )
            return True

    def model_call(self, run_id: str, step: int, version: int | None = None) -> CallRecord | None:
        return self._call(call_id(run_id, step))

    def tool_call(self, run_id: str, token: str, attempt: int) -> CallRecord | None:
        return self._call(tool_call_id(run_id, token, attempt))

    def _call(self, cid: str) -> CallRecord | None:
        with self._lock:
            call = self.calls.get(cid)
            if call is None:
                return None
            request = call["request"]
            model = isinstance(request, ModelRequest)
            return CallRecord(
                call_id=cid,
                status=call["status"],
                hints=dict(request.hints) if model else {},
                summary=dict(request.summary) if model else {},
                reply=call["reply"],
                failure=call["failure"],
                attempts=call["attempts"],
                sent=call.get("sent", False),
            )

    def _write_confirmations(self, commit: Commit) -> None:
        run_id = commit.state.run_id
        confirmations = self._confirmations[run_id]
        # The decision first, as the ORM adapter writes it (runs.orm.writers.AFTER).
        if commit.confirmation_decision is not None:
            cid, status, _reason = commit.confirmation_decision
            confirmations[cid] = confirmations[cid].model_copy(
                update={"status": ConfirmationStatus(status)}
            )
        if commit.confirmation_request is not None:
            r = commit.confirmation_request
            self.asked[r.confirmation_id] = r.proposal
            confirmations[r.confirmation_id] = Confirmation(
                confirmation_id=r.confirmation_id,
                run_id=run_id,
                proposal_hash=r.proposal_hash,
                status=ConfirmationStatus.APPROVED if r.approved else ConfirmationStatus.PENDING,
                expires_at_step=r.expires_at_step,
                tool_name=r.tool_name,
            )
        if commit.consume_confirmation is not None:
            cid = commit.consume_confirmation
            confirmations[cid] = confirmations[cid].model_copy(
                update={"status": ConfirmationStatus.CONSUMED}
            )
        if commit.expire_pending_confirmations:
            for cid, c in list(confirmations.items()):
                if c.status is ConfirmationStatus.PENDING:
                    confirmations[cid] = c.model_copy(update={"status": ConfirmationStatus.EXPIRED})

    def _check(self, commit: Commit) -> None:
        run_id = commit.state.run_id
        if self.runs[run_id].version != commit.expected_version:
            raise VersionConflict("run changed", run_id=run_id)
        if commit.ledger_intent and commit.ledger_intent.idempotency_token in self.ledger:
            # A unique key, as in the ORM adapter: not a race (the version matched), a bug.
            raise IntegrityViolation("idempotency token already used", run_id=run_id)
        if commit.ledger_attempt is not None:
            token, attempt = commit.ledger_attempt
            row = self.ledger.get(token)
            if (
                row is None
                or row["status"] != LedgerStatus.STARTED
                or row["attempt"] != attempt - 1
            ):
                raise VersionConflict("ledger attempt moved concurrently", run_id=run_id)
        if commit.ledger_settle is not None:
            row = self.ledger.get(commit.ledger_settle.idempotency_token)
            if row is None or row["status"] not in (LedgerStatus.STARTED, LedgerStatus.UNKNOWN):
                raise VersionConflict("ledger row already settled", run_id=run_id)
        confirmations = self._confirmations[run_id]
        if commit.confirmation_request is not None:
            r = commit.confirmation_request
            if r.confirmation_id in confirmations:
                raise IntegrityViolation("confirmation id already taken", run_id=run_id)
            # The one a decision of this commit ends (an edit's superseded one) is not pending
            # when the request is written (the decision is written first).
            ended = commit.confirmation_decision[0] if commit.confirmation_decision else None
            if any(
                c.proposal_hash == r.proposal_hash
                and c.status is ConfirmationStatus.PENDING
                and c.confirmation_id != ended
                for c in confirmations.values()
            ):
                raise IntegrityViolation("a confirmation is already pending", run_id=run_id)
        if commit.model_request is not None and commit.model_request[0] in self.calls:
            raise IntegrityViolation("a model call is already recorded", run_id=run_id)
        if commit.tool_request is not None and commit.tool_request[0] in self.calls:
            raise IntegrityViolation("a tool call is already recorded", run_id=run_id)
        if commit.consume_call is not None:
            call = self.calls.get(commit.consume_call)
            if call is None or call["status"] not in SETTLED:
                raise VersionConflict("model call already consumed", run_id=run_id)
        if commit.confirmation_decision is not None:
            current = confirmations.get(commit.confirmation_decision[0])
            if current is None or current.status is not ConfirmationStatus.PENDING:
                raise VersionConflict("confirmation already decided", run_id=run_id)
        if commit.consume_confirmation is not None:
            current = confirmations.get(commit.consume_confirmation)
            if current is None or current.status is not ConfirmationStatus.APPROVED:
                raise VersionConflict("confirmation already used", run_id=run_id)
        for grant_id in commit.grant_uses:
            g = self._grants[run_id].get(grant_id)
            if g is None or (g.max_calls is not None and g.calls_used >= g.max_calls):
                raise VersionConflict("grant used up concurrently", run_id=run_id)

    def grants(self, run_id: str, version: int | None = None) -> list[CapabilityGrant]:
        with self._lock:
            return list(self._grants[run_id].values())

    def confirmations(self, run_id: str, version: int | None = None) -> list[Confirmation]:
        # All of them, as the ORM adapter (the gate reads spent ones only to say why a proposal
        # still needs a person). ``version`` is the ORM adapter's hint; one lock reads it all.
        with self._lock:
            return list(self._confirmations[run_id].values())

    def lookups(self, run_id: str) -> _Lookups:
        return _Lookups(self, run_id)

    def active_tool(self, run_id: str) -> bool:
        with self._lock:
            return any(
                r["run_id"] == run_id and r["status"] == LedgerStatus.STARTED
                for r in self.ledger.values()
            )

    def recent_observations(self, run_id: str, limit: int) -> list[Observation]:
        with self._lock:
            return list(self.observations[run_id].values())[-limit:]

    def planner_config(self, run_id: str, version: int | None = None) -> dict[str, Any]:
        return self._planner[run_id]

    def inputs_kept(self, state: RunState) -> bool:
        # Everything a step reads is read live here: any state this store returned goes on.
        return True

    def started_command(
        self, run_id: str, version: int | None = None
    ) -> tuple[ExecutableCommand, int] | None:
        with self._lock:
            for token, row in self.ledger.items():
                if row["run_id"] == run_id and row["status"] == LedgerStatus.STARTED:
                    return self._commands[token], row["attempt"]
            return None

    def working_view(self, run_id: str, step: int, version: int | None = None) -> list[WorkingItem]:
        with self._lock:
            return admit(self.working[run_id], [], step=step)

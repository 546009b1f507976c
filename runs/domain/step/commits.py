"""What a step decides, as data: the ``Commit`` and the ``Builder`` every step function uses.

Step functions (``decide``, ``settle``, ``lifecycle``) are pure functions from (run state, input,
trusted facts, now) to a ``Commit``.

A ``Commit`` is everything one short transaction writes: the new run state, trace events,
observations, ledger intent or outcome, a confirmation request, grant uses. The runner applies it
with a compare-and-set on the run version; tools run *between* commits, never inside one.

Functions here never do I/O. The read-only questions they may ask about the run's history
(has this content been seen? which trust labels do these observation ids carry? which of these
ids are citable? what content has the run read, for provenance?) go through ``Lookups``, which
the store answers with indexed queries (the provenance index from a per-process copy that reads
only the entries added since), so the cost of a step does not depend on how long the run
already is.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from memory.domain.working import WorkingItem, item_from_observation
from policy.domain import canonical as hashing
from policy.domain.confirmation.approvers import DEFAULT_RULE, ApproverRule
from policy.domain.contracts import ToolContract
from policy.domain.decisions import ExecutableCommand
from policy.domain.observations import Observation, ObservationKind, TrustLabel
from policy.domain.origins.taint import UNTRUSTED, Entry, RunIndex, budget, entry_seq, entry_text
from policy.domain.outcomes import OutcomeStatus
from policy.domain.secrets.redaction import redact_secrets
from runs.domain import trace as ev
from runs.domain import writes
from runs.domain.gateway.calls import ModelRequest, ToolRequest
from runs.domain.ledger import LedgerStatus
from runs.domain.machine import TERMINAL, Event, Status, StopReason, transition
from runs.domain.state import RunState


class Lookups(Protocol):
    def seen_content(self, content_hash: str) -> bool: ...

    def trust_of(self, observation_ids: Collection[str]) -> Mapping[str, str]: ...

    def citable(self, observation_ids: Collection[str]) -> set[str]: ...

    def ledger_has(self, idempotency_token: str) -> bool: ...

    def taint_index(self, observation_seq: int | None = None) -> RunIndex:
        """The run's provenance index (policy.domain.origins.taint): every entry committed so far.
        ``observation_seq``: the run's, as the step read it (the entries that may exist)."""
        ...


@dataclass(frozen=True)
class ConfirmationRequest:
    confirmation_id: str
    proposal_hash: str
    tool_name: str
    tool_version: str
    proposal: dict[str, Any]
    expires_at_step: int
    cites_untrusted: bool
    # Who may approve it (policy.domain.confirmation.approvers), as the gate chose.
    approvers: ApproverRule = DEFAULT_RULE
    # A person's edit of a waiting proposal asks again for the edited one (issue 24 item 1): the
    # confirmation it supersedes, the changes (``policy.domain.confirmation.edits.Change.as_json``,
    # values as the person was shown them), and whether the edit was its last approval needed (then
    # it is born approved, decided by the editor; else pending, the edit one approval).
    edited_from: str | None = None
    edit_diff: tuple[dict[str, Any], ...] = ()
    approved: bool = False


@dataclass(frozen=True)
class ApprovalRecord:
    """One person's approval of a pending confirmation, stored beside it (every approval, the
    only one of a one-approver rule as each of a four-eyes pair). ``independent``: they were an
    operator with no stake in the run when they approved (policy.domain.confirmation.approvers)."""

    confirmation_id: str
    by: str
    reason: str
    independent: bool


@dataclass(frozen=True)
class LedgerSettle:
    idempotency_token: str
    status: LedgerStatus
    outcome: dict[str, Any]
    verification: dict[str, Any] | None = None


@dataclass
class Commit:
    expected_version: int
    state: RunState
    events: list[ev.TraceDraft] = field(default_factory=list)
    observations: list[Observation] = field(default_factory=list)
    ledger_intent: ExecutableCommand | None = None
    ledger_settle: LedgerSettle | None = None
    confirmation_request: ConfirmationRequest | None = None
    consume_confirmation: str | None = None
    # (confirmation_id, new status, reason): approved, declined, edited or responded; applied only
    # while that confirmation is still pending.
    confirmation_decision: tuple[str, str, str] | None = None
    # An approval to store (with the decision it completes, or alone: one of two still needed).
    confirmation_approval: ApprovalRecord | None = None
    grant_uses: tuple[str, ...] = ()
    handoff_reason: str | None = None
    # What the handoff is about when the state holds no pending proposal (a loop stop names the
    # repeated proposal and its hash; seed §14, §16 experiment two).
    handoff_proposal: dict[str, Any] | None = None
    handoff_proposal_hash: str | None = None
    # (idempotency_token, attempt): the next attempt of a started command, same token.
    ledger_attempt: tuple[str, int] | None = None
    # The run stops waiting for a person: its pending confirmations expire in this commit.
    expire_pending_confirmations: bool = False
    # The working-memory items the new observations become (the store admits and evicts).
    working_items: list[WorkingItem] = field(default_factory=list)
    # What the new observations add to the run's provenance index (policy.domain.origins.taint).
    taint_entries: list[Entry] = field(default_factory=list)
    # A model planner's request, recorded with the run (runs.domain.gateway.calls): the call's id
    # and what to send. The run then waits for the gateway, holding no worker.
    model_request: tuple[str, ModelRequest] | None = None
    # A command's call made by the gateway (its contract can wait: an MCP tool), recorded
    # with the command's intent or its retry: the call's id and what to make.
    tool_request: tuple[str, ToolRequest] | None = None
    # The call whose recorded reply (or failure) this step took: it is consumed with the step.
    consume_call: str | None = None
    # The run stops or starts cancelling in this commit: its open calls are abandoned (the
    # gateway drops them, and a reply that comes anyway is not recorded).
    abandon_calls: bool = False

    @property
    def command(self) -> ExecutableCommand | None:
        return self.ledger_intent


class Builder:
    """Builds one ``Commit``: a copy of the state (``RunState.fork``), changed in place, plus what
    to write."""

    def __init__(self, state: RunState, lookups: Lookups | None) -> None:
        self.commit = Commit(expected_version=state.version, state=state.fork())
        self.lookups = lookups
        self._hashes: set[str] = set()

    @property
    def s(self) -> RunState:
        return self.commit.state

    def emit(self, event: str, proposal_id: str | None = None, **details: Any) -> None:
        self.commit.events.append(ev.TraceDraft(event, proposal_id, details))

    def move(self, event: Event, proposal_id: str | None = None) -> None:
        old = self.s.status
        new = transition(old, event)
        self.s.status = new
        if new != old:
            self.emit(ev.STATE_TRANSITIONED, proposal_id, **{"from": old.value, "to": new.value})
            if new in TERMINAL or new is Status.CANCELLING:
                self.commit.abandon_calls = True

    def stop(
        self, event: Event, reason: str, proposal_id: str | None = None, **details: Any
    ) -> None:
        self.move(event, proposal_id)
        self.s.stop_reason = reason
        # What the run's writes came to, as counted up to this commit (the caller counts the
        # outcome that stops the run before it stops it).
        details = {**writes.stop_details(self.s), **details}
        self.emit(ev.RUN_STOPPED, proposal_id, status=self.s.status.value, reason=reason, **details)

    def count_write(self, contract: ToolContract | None, outcome: OutcomeStatus) -> None:
        """Count a call's outcome in the run's write summary, if the call is a write."""
        if writes.is_write(contract):
            writes.count(self.s, outcome)

    def observe(
        self,
        prefix: str,
        kind: ObservationKind,
        trust: TrustLabel,
        content: dict[str, Any],
        *,
        citable: bool = False,
        observation_id: str | None = None,
    ) -> Observation:
        # Every observation passes here: secrets are replaced before the content is hashed,
        # stored, put in working memory or shown to a planner (issue 9 item 12).
        content = redact_secrets(content)
        digest = hashing.content_hash(content)
        seen = digest in self._hashes or (
            self.lookups is not None and self.lookups.seen_content(digest)
        )
        if not seen:
            # Only content never seen before in this run counts as new knowledge (loop guard).
            self.s.knowledge_version += 1
        self._hashes.add(digest)
        self.s.observation_seq += 1
        obs = Observation(
            observation_id=observation_id or f"{prefix}-{self.s.step}",
            kind=kind,
            trust=trust,
            step=self.s.step,
            content=content,
            content_hash=digest,
            citable=citable,
        )
        self.commit.observations.append(obs)
        self.commit.working_items.append(
            item_from_observation(
                observation_id=obs.observation_id,
                kind=obs.kind.value,
                trust=obs.trust.value,
                step=obs.step,
                content=obs.content,
                seq=self.s.observation_seq,
            )
        )
        self.s.last_observation_id = obs.observation_id
        self._index(obs)
        return obs

    def _index(self, obs: Observation) -> None:
        """Add what the observation holds to the run's provenance index: its untrusted parts
        (sticky: the run stays tainted by them after they leave the planner's view), and a
        tool's trusted result (informational). Within the index's bound; past it the run
        fails closed (``taint.budget``)."""
        for trust, value in _indexed_parts(obs):
            text = entry_text(value)
            indexed, self.s.taint_chars = budget(self.s.taint_chars, text, trust)
            if indexed:
                seq = entry_seq(self.s.observation_seq, trust)
                self.commit.taint_entries.append(Entry(seq, obs.observation_id, trust, text))

    def absorb(self, fingerprint: str) -> None:
        """The first answer to a proposal (its result or its rejection) is that proposal's
        baseline, not news that justifies repeating it: fold it into the guard entry."""
        entry = self.s.loop_guard.get(fingerprint)
        if entry is not None and entry["n"] == 1:
            self.s.loop_guard = {
                **self.s.loop_guard,
                fingerprint: {**entry, "k": self.s.knowledge_version},
            }

    def reject(self, proposal_id: str | None, layer: str, code: str, **summary: Any) -> None:
        self.emit(ev.PROPOSAL_REJECTED, proposal_id, layer=layer, code=code, **summary)
        self.observe(
            "policy",
            ObservationKind.POLICY_REJECTION,
            TrustLabel.POLICY,
            {"layer": layer, "code": code, **summary},
        )

    def cancel_reason(self) -> StopReason:
        # A run cancelled by its deadline keeps saying so; otherwise a person or system did.
        return (
            StopReason.DEADLINE_REACHED
            if self.s.stop_reason == StopReason.DEADLINE_REACHED
            else StopReason.CANCELLED
        )

    def continue_or_cancel(self, pid: str) -> None:
        if self.s.status is Status.CANCELLING:
            self.stop(Event.EFFECTS_CHECKED, self.cancel_reason(), pid)
        elif self.s.status is Status.RUNNING:
            self.move(Event.STEP, pid)

    def fail_or_cancel(self, reason: str, pid: str, *, known: bool, **details: Any) -> None:
        if self.s.status is Status.CANCELLING:
            if known:
                self.stop(Event.EFFECTS_CHECKED, self.cancel_reason(), pid, cause=reason, **details)
            else:
                self.stop(Event.UNKNOWN_EFFECT, reason, pid, **details)
        elif self.s.status not in TERMINAL:
            self.stop(Event.FAIL, reason, pid, **details)

    def done(self) -> Commit:
        if self.commit.handoff_reason is not None:
            self.emit(ev.HANDOFF_OPENED, None, reason=self.commit.handoff_reason)
        self.s.version = self.commit.expected_version + 1
        return self.commit


def _indexed_parts(obs: Observation) -> list[tuple[str, Any]]:
    """(trust, value) of what an observation gives the index: a tool result's value split by
    its parts' labels; any other untrusted observation whole; nothing else (the user's request
    is the run's goal, which provenance reads from the run itself)."""
    content = obs.content
    if obs.kind is not ObservationKind.TOOL_RESULT or "value" not in content:
        return [(UNTRUSTED, content)] if obs.trust is TrustLabel.UNTRUSTED_CONTENT else []
    value = content["value"]
    parts = content.get("part_trust")
    if isinstance(parts, dict) and isinstance(value, dict):
        low = {k: v for k, v in value.items() if parts.get(k) == UNTRUSTED}
        high = {k: v for k, v in value.items() if parts.get(k) != UNTRUSTED}
        return [(UNTRUSTED, low), (TrustLabel.TRUSTED_TOOL.value, high)]
    return [(obs.trust.value, value)]


def proposal_id_of(raw: Any) -> str | None:
    """The proposal id of raw (untrusted) planner output, if any, cut to its maximum length."""
    pid = raw.get("proposal_id") if isinstance(raw, dict) else None
    return pid[:128] if isinstance(pid, str) else None

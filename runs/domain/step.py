"""Step decisions: pure functions from (run state, input, trusted facts, now) to a ``Commit``.

A ``Commit`` is everything one short transaction writes: the new run state, trace events,
observations, ledger intent or outcome, a confirmation request, grant uses. The runner applies it
with a compare-and-set on the run version; tools run *between* commits, never inside one.

Functions here never do I/O. The three read-only questions they may ask about the run's history
(has this content been seen? which trust labels do these observation ids carry? which of these
ids are citable?) go through ``Lookups``, which the store answers with indexed queries, so the
cost of a step does not depend on how long the run already is.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from memory.domain.working import WorkingItem, item_from_observation
from policy.domain import canonical as hashing
from policy.domain.confirmations import Confirmation
from policy.domain.contracts import CallFacts, ToolContract
from policy.domain.decisions import ExecutableCommand, Execute, NeedsConfirmation, Reject, Stop
from policy.domain.errors import CanonicalError, ParseError
from policy.domain.gate import RunView, command_fingerprint, evaluate, loop_fingerprint
from policy.domain.grants import CapabilityGrant
from policy.domain.observations import Observation, ObservationKind, TrustLabel
from policy.domain.outcomes import OutcomeStatus, ToolOutcome, Verification
from policy.domain.proposals import ActionProposal, FinalProposal, parse_planner_output
from policy.domain.redaction import redact_secrets
from policy.domain.registry import ToolRegistry
from runs.domain import trace as ev
from runs.domain.final import final_violation
from runs.domain.ids import minted_confirmation_id
from runs.domain.loop_guard import observe as loop_observe
from runs.domain.machine import TERMINAL, Event, Status, transition
from runs.domain.state import RunState

CONFIRMATION_TTL_STEPS = 3


class Lookups(Protocol):
    def seen_content(self, content_hash: str) -> bool: ...

    def trust_of(self, observation_ids: Collection[str]) -> Mapping[str, str]: ...

    def citable(self, observation_ids: Collection[str]) -> set[str]: ...

    def ledger_has(self, idempotency_token: str) -> bool: ...


@dataclass(frozen=True)
class ConfirmationRequest:
    confirmation_id: str
    proposal_hash: str
    tool_name: str
    tool_version: str
    proposal: dict[str, Any]
    expires_at_step: int
    cites_untrusted: bool


@dataclass(frozen=True)
class LedgerSettle:
    idempotency_token: str
    status: str  # succeeded | rejected | failed | unknown | reconciled | compensation-required
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
    # (confirmation_id, approved): applied only while that confirmation is still pending.
    confirmation_decision: tuple[str, bool] | None = None
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

    @property
    def command(self) -> ExecutableCommand | None:
        return self.ledger_intent


class _Builder:
    def __init__(self, state: RunState, lookups: Lookups | None) -> None:
        self.commit = Commit(expected_version=state.version, state=state.model_copy(deep=True))
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

    def stop(
        self, event: Event, reason: str, proposal_id: str | None = None, **details: Any
    ) -> None:
        self.move(event, proposal_id)
        self.s.stop_reason = reason
        self.emit(ev.RUN_STOPPED, proposal_id, status=self.s.status.value, reason=reason, **details)

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
        return obs

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

    def done(self) -> Commit:
        if self.commit.handoff_reason is not None:
            self.emit(ev.HANDOFF_OPENED, None, reason=self.commit.handoff_reason)
        self.s.version = self.commit.expected_version + 1
        return self.commit


def start(state: RunState) -> Commit:
    """created → running, with the user's request recorded as observation ``user-1``."""
    b = _Builder(state, None)
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
        b = _Builder(state, None)
        b.stop(Event.DEADLINE_REACHED, "DEADLINE_REACHED", step=state.step)
        return b.done()
    if not resuming and state.step >= state.max_steps:
        b = _Builder(state, None)
        b.stop(Event.FAIL, "MAX_STEPS_REACHED", step=state.step)
        b.commit.handoff_reason = "MAX_STEPS_REACHED"
        return b.done()
    return None


def _fingerprint_raw(raw: Any) -> str:
    try:
        return hashing.content_hash({"unparsed": raw})
    except CanonicalError:
        return hashing.sha256_hex(repr(raw))


def decide(
    state: RunState,
    raw_output: Any,
    *,
    source: str,
    grants: Iterable[CapabilityGrant],
    confirmations: Iterable[Confirmation],
    registry: ToolRegistry,
    lookups: Lookups,
    now_ms: int,
    confirmation_id: str | None = None,
    context_summary: dict[str, Any] | None = None,
) -> Commit:
    """One planner step, or the re-evaluation of a pending proposal after a confirmation.

    1. A new planner output costs a step (final answers and rejected proposals included); the
       re-evaluation of ``pending_proposal`` does not.
    2. Parse; a final answer is validated against citable observations and ends the run.
    3. A tool proposal passes the loop guard, then the gate; its decision becomes the commit.
    """
    b = _Builder(state, lookups)
    resuming = raw_output is None
    if resuming:
        raw_output = state.pending_proposal
        b.s.pending_proposal = None
    else:
        # Planner output is redacted before it is parsed, hashed or stored: a secret in an
        # argument reaches the tool as its tag. A tool that needs a secret gets it from
        # settings.AGENTCONSOLE_TOOL_SECRETS through its context, never from the planner.
        raw_output = redact_secrets(raw_output)
        b.s.step += 1
        b.s.planner_cursor += 1
        kind = raw_output.get("kind") if isinstance(raw_output, dict) else None
        kind = kind if kind in ("tool", "final") else "invalid"  # untrusted: never echoed
        b.emit(
            ev.PLANNER_OUTPUT,
            _pid(raw_output),
            kind=kind,
            step=b.s.step,
            source=source,
            **(context_summary or {}),
        )

    try:
        output = parse_planner_output(raw_output)
    except ParseError as exc:
        fingerprint = _fingerprint_raw(raw_output)
        if _loop_stop(b, fingerprint, None, None):
            return b.done()
        b.reject(_pid(raw_output), "parse", exc.code)
        b.absorb(fingerprint)
        return b.done()

    if isinstance(output, FinalProposal):
        return _final(b, output, lookups)
    return _tool(
        b, output, grants, confirmations, registry, lookups, now_ms, resuming, confirmation_id
    )


def _pid(raw: Any) -> str | None:
    pid = raw.get("proposal_id") if isinstance(raw, dict) else None
    return pid[:128] if isinstance(pid, str) else None


def _final(b: _Builder, final: FinalProposal, lookups: Lookups) -> Commit:
    citable = lookups.citable(final.citation_observation_ids)
    code = final_violation(final, citable)
    if code is not None:
        b.emit(
            ev.FINAL_REJECTED,
            final.proposal_id,
            code=code,
            citations=final.citation_observation_ids,
        )
        b.stop(Event.FAIL, code, final.proposal_id)
        return b.done()
    b.emit(ev.FINAL_VALIDATED, final.proposal_id, citations=final.citation_observation_ids)
    b.s.answer = final.answer
    b.s.citations = list(final.citation_observation_ids)
    b.stop(Event.FINAL_VALIDATED, "FINAL_ANSWER_VALIDATED", final.proposal_id)
    return b.done()


def _loop_stop(
    b: _Builder,
    fingerprint: str,
    proposal_id: str | None,
    max_polls: int | None,
    proposal: dict[str, Any] | None = None,
) -> bool:
    guard, verdict = loop_observe(
        b.s.loop_guard,
        fingerprint,
        knowledge_version=b.s.knowledge_version,
        max_repeated=b.s.max_repeated_proposal,
        max_polls=max_polls,
    )
    b.s.loop_guard = guard
    if not (verdict.repeated or verdict.poll_limit):
        return False
    reason = (
        "REPEATED_PROPOSAL_WITHOUT_NEW_OBSERVATION" if verdict.repeated else "POLLING_LIMIT_REACHED"
    )
    b.emit(
        ev.PROPOSAL_LOOP_DETECTED,
        proposal_id,
        count=verdict.count,
        polls=verdict.polls,
        fingerprint=fingerprint,
        code=reason,
    )
    b.stop(Event.FAIL, reason, proposal_id)
    b.commit.handoff_reason = reason
    b.commit.handoff_proposal = proposal
    b.commit.handoff_proposal_hash = fingerprint
    return True


def _tool(
    b: _Builder,
    proposal: ActionProposal,
    grants: Iterable[CapabilityGrant],
    confirmations: Iterable[Confirmation],
    registry: ToolRegistry,
    lookups: Lookups,
    now_ms: int,
    resuming: bool,
    confirmation_id: str | None,
) -> Commit:
    pid = proposal.proposal_id
    p_hash = proposal.hash()
    registered = registry.get(proposal.tool_name, proposal.tool_version)
    contract = registered.contract if registered else None
    # Counted on the arguments the tool would get: a respelled path is the same proposal.
    facts = CallFacts(run_id=b.s.run_id, subject=b.s.subject, step=b.s.step)
    fingerprint = loop_fingerprint(proposal, registry=registry, facts=facts)
    if not resuming:
        max_polls = contract.polling.max_polls if contract and contract.polling else None
        if _loop_stop(b, fingerprint, pid, max_polls, proposal.model_dump(mode="json")):
            return b.done()

    trust = lookups.trust_of(proposal.source_observation_ids)
    untrusted = sorted(i for i, t in trust.items() if t == TrustLabel.UNTRUSTED_CONTENT)
    b.emit(
        ev.PROPOSAL_RECEIVED,
        pid,
        tool=proposal.tool_name[:64],
        version=proposal.tool_version,
        proposal_hash=p_hash,
        arguments_bytes=len(proposal.canonical_arguments().encode("utf-8")),
        source_observation_ids=list(proposal.source_observation_ids),
        cites_untrusted=untrusted,
        **_logged_arguments(contract, proposal.arguments),
    )
    s = b.s
    decision = evaluate(
        proposal,
        run=RunView(
            run_id=s.run_id,
            subject=s.subject,
            status=s.status.value,
            step=s.step,
            tool_calls=s.tool_calls,
            max_tool_calls=s.max_tool_calls,
            deadline_ms=s.deadline_ms,
            unresolved_effects=s.unresolved_effects,
        ),
        grants=grants,
        confirmations=confirmations,
        registry=registry,
        now_ms=now_ms,
    )
    _layer_events(b, pid, decision)
    summary = {
        "tool": proposal.tool_name[:64],
        "version": proposal.tool_version,
        "proposal_hash": p_hash,
    }

    if isinstance(decision, Reject):
        b.reject(pid, decision.layer, decision.code, **summary)
        b.absorb(fingerprint)
        return b.done()
    if isinstance(decision, Stop):
        b.emit(ev.PROPOSAL_REJECTED, pid, layer=decision.layer, code=decision.reason, **summary)
        b.stop(Event.FAIL, decision.reason, pid)
        if decision.reason != "DEADLINE_REACHED":
            b.commit.handoff_reason = decision.reason
        return b.done()
    if isinstance(decision, NeedsConfirmation):
        cid = (
            decision.existing_confirmation_id
            or confirmation_id
            or minted_confirmation_id(s.run_id, s.step)
        )
        if decision.existing_confirmation_id is None:
            b.commit.confirmation_request = ConfirmationRequest(
                confirmation_id=cid,
                proposal_hash=decision.confirmation_hash,
                tool_name=proposal.tool_name,
                tool_version=proposal.tool_version,
                proposal=proposal.model_dump(mode="json"),
                expires_at_step=s.step + CONFIRMATION_TTL_STEPS,
                cites_untrusted=bool(untrusted),
            )
        s.pending_proposal = proposal.model_dump(mode="json")
        s.pending_confirmation_id = cid
        b.emit(
            ev.PROPOSAL_WAITING_CONFIRMATION,
            pid,
            proposal_hash=decision.confirmation_hash,
            confirmation_id=cid,
            code="USER_CONFIRMATION_REQUIRED",
        )
        b.move(Event.NEEDS_CONFIRMATION, pid)
        s.stop_reason = "USER_CONFIRMATION_REQUIRED"
        return b.done()

    if not isinstance(decision, Execute):
        raise TypeError(f"unexpected gate decision {decision!r}")
    command = decision.command
    if lookups.ledger_has(command.idempotency_token):
        # Same run, proposal id and arguments as a command already issued: its token is taken.
        # Executing again would be a second effect under the same identity; refuse instead.
        b.reject(pid, "state", "PROPOSAL_ALREADY_EXECUTED", **summary)
        b.absorb(fingerprint)
        return b.done()
    s.tool_calls += 1
    s.stop_reason = None
    s.pending_confirmation_id = None
    b.commit.ledger_intent = command
    b.commit.grant_uses = command.grant_ids
    if command.consume_confirmation:
        b.commit.consume_confirmation = command.confirmation_id
    b.emit(
        ev.TOOL_STARTED,
        pid,
        tool=command.tool_name,
        version=command.tool_version,
        idempotency_token=command.idempotency_token,
        deadline_ms=command.deadline_ms,
        confirmation_id=command.confirmation_id,
        step=s.step,
    )
    return b.done()


def _logged_arguments(contract: ToolContract | None, arguments: Any) -> dict[str, Any]:
    """Only the fields the contract names as loggable, truncated; never the redacted ones."""
    if contract is None or not isinstance(arguments, dict):
        return {}
    out: dict[str, Any] = {}
    for name in contract.logged_fields:
        value = arguments.get(name)
        if isinstance(value, str | int | float | bool):
            out[f"arg_{name}"] = value[: ev.MAX_DETAIL_STRING] if isinstance(value, str) else value
    return out


def _layer_events(b: _Builder, pid: str, decision: Any) -> None:
    passed = decision.passed
    layer = getattr(decision, "layer", None)
    if "schema" in passed:
        b.emit(ev.PROPOSAL_SCHEMA_VALIDATED, pid)
    if "authorization" in passed:
        grant_ids = decision.command.grant_ids if isinstance(decision, Execute) else ()
        b.emit(ev.POLICY_CAPABILITY_CHECKED, pid, result="granted", grant_ids=list(grant_ids))
    elif layer == "authorization":
        b.emit(ev.POLICY_CAPABILITY_CHECKED, pid, result="denied", code=decision.code)
    if "confirmation" in passed:
        cid = decision.command.confirmation_id if isinstance(decision, Execute) else None
        result = "confirmed" if cid else "not-required"
        b.emit(ev.POLICY_CONFIRMATION_CHECKED, pid, result=result, confirmation_id=cid)
    elif isinstance(decision, NeedsConfirmation):
        b.emit(ev.POLICY_CONFIRMATION_CHECKED, pid, result="required", code=decision.why)
    elif layer == "confirmation":
        b.emit(ev.POLICY_CONFIRMATION_CHECKED, pid, result="declined", code=decision.code)


def settle(
    state: RunState,
    command: ExecutableCommand,
    outcome: ToolOutcome,
    *,
    contract: ToolContract,
    output_violation: str | None,
    verification: Verification | None,
    reconciled: bool,
    duration_ms: int,
    lookups: Lookups,
) -> Commit:
    """Record what a tool call did and decide what the run does next.

    Only a succeeded call whose output matches its schema and whose post-condition holds
    becomes citable evidence (seed §18: post-condition before business state moves on).
    """
    b = _Builder(state, lookups)
    # A tool's output is untrusted text: secrets in it are replaced before the ledger, the
    # trace hashes and the observation see it.
    outcome = _redacted_outcome(outcome)
    if verification is not None:
        verification = verification.model_copy(
            update={"details": redact_secrets(verification.details)}
        )
    pid = command.proposal_id
    token = command.idempotency_token
    out_size = len(hashing.canonical(outcome.value).encode("utf-8")) if outcome.value else 0
    b.emit(
        ev.TOOL_COMPLETED,
        pid,
        tool=command.tool_name,
        status=outcome.status.value,
        code=outcome.code,
        duration_ms=duration_ms,
        output_bytes=out_size,
        reconciled=reconciled,
    )
    base = {"tool": command.tool_name, "version": command.tool_version}
    ledger_ok = "reconciled" if reconciled else "succeeded"

    if outcome.status is OutcomeStatus.SUCCEEDED and output_violation is not None:
        b.commit.ledger_settle = LedgerSettle(
            token, "failed", _outcome_summary(outcome, "TOOL_OUTPUT_INVALID")
        )
        b.emit(ev.TOOL_RESULT_VALIDATED, pid, valid=False, code=output_violation)
        _fail_or_cancel(b, "TOOL_OUTPUT_INVALID", pid, known=True)
        return _settled(b, command)

    if outcome.status is OutcomeStatus.SUCCEEDED:
        if verification is not None and not verification.ok:
            code = verification.code or "TOOL_POSTCONDITION_FAILED"
            b.commit.ledger_settle = LedgerSettle(
                token, "compensation-required", _outcome_summary(outcome), verification.model_dump()
            )
            b.emit(ev.TOOL_VERIFICATION_FAILED, pid, code=code)
            b.commit.handoff_reason = "TOOL_POSTCONDITION_FAILED"
            _fail_or_cancel(b, "TOOL_POSTCONDITION_FAILED", pid, known=True)
            return _settled(b, command)
        b.commit.ledger_settle = LedgerSettle(
            token,
            ledger_ok,
            _outcome_summary(outcome),
            verification.model_dump() if verification else None,
        )
        b.emit(
            ev.TOOL_RESULT_VALIDATED,
            pid,
            valid=True,
            verified=verification is not None,
            output_hash=hashing.content_hash(outcome.value),
        )
        b.observe(
            "tool",
            ObservationKind.TOOL_RESULT,
            contract.output_trust,
            {**base, "status": "succeeded", "value": outcome.value},
            citable=True,
        )
        _continue_or_cancel(b, pid)
        return _settled(b, command)

    if outcome.status is OutcomeStatus.UNKNOWN:
        b.commit.ledger_settle = LedgerSettle(token, "unknown", _outcome_summary(outcome))
        b.s.unresolved_effects += 1
        b.commit.handoff_reason = "TOOL_OUTCOME_UNKNOWN"
        if b.s.status is Status.CANCELLING:
            b.stop(Event.UNKNOWN_EFFECT, "TOOL_OUTCOME_UNKNOWN", pid, code=outcome.code)
        else:
            b.stop(Event.FAIL, "TOOL_OUTCOME_UNKNOWN", pid, code=outcome.code)
        return _settled(b, command)

    # rejected, or failed: known not to have taken effect.
    b.commit.ledger_settle = LedgerSettle(token, outcome.status.value, _outcome_summary(outcome))
    content = {**base, "status": outcome.status.value, "code": outcome.code}
    if outcome.status is OutcomeStatus.REJECTED and outcome.value:
        content["details"] = outcome.value
    if outcome.status is OutcomeStatus.FAILED:
        content["retryable"] = outcome.retryable
    b.observe("tool", ObservationKind.TOOL_RESULT, TrustLabel.TRUSTED_TOOL, content)
    if outcome.status is OutcomeStatus.FAILED and not outcome.retryable:
        _fail_or_cancel(b, "TOOL_FAILED", pid, known=True, code=outcome.code)
        return _settled(b, command)
    _continue_or_cancel(b, pid)
    return _settled(b, command)


def _redacted_outcome(outcome: ToolOutcome) -> ToolOutcome:
    value = redact_secrets(outcome.value)
    message = redact_secrets(outcome.message)
    if value is outcome.value and message is outcome.message:
        return outcome
    return outcome.model_copy(update={"value": value, "message": message})


def _settled(b: _Builder, command: ExecutableCommand) -> Commit:
    b.absorb(command_fingerprint(command))
    return b.done()


def _outcome_summary(outcome: ToolOutcome, code: str | None = None) -> dict[str, Any]:
    return {
        "status": outcome.status.value,
        "code": code or outcome.code,
        "retryable": outcome.retryable,
        "value_hash": hashing.content_hash(outcome.value) if outcome.value is not None else None,
    }


def _cancel_reason(b: _Builder) -> str:
    # A run cancelled by its deadline keeps saying so; otherwise a person or system cancelled it.
    return "DEADLINE_REACHED" if b.s.stop_reason == "DEADLINE_REACHED" else "CANCELLED"


def _continue_or_cancel(b: _Builder, pid: str) -> None:
    if b.s.status is Status.CANCELLING:
        b.stop(Event.EFFECTS_CHECKED, _cancel_reason(b), pid)
    elif b.s.status is Status.RUNNING:
        b.move(Event.STEP, pid)


def _fail_or_cancel(b: _Builder, reason: str, pid: str, *, known: bool, **details: Any) -> None:
    if b.s.status is Status.CANCELLING:
        if known:
            b.stop(Event.EFFECTS_CHECKED, _cancel_reason(b), pid, cause=reason, **details)
        else:
            b.stop(Event.UNKNOWN_EFFECT, reason, pid, **details)
    elif b.s.status not in TERMINAL:
        b.stop(Event.FAIL, reason, pid, **details)


def request_cancel(state: RunState, *, by: str, reason: str, active_tool: bool) -> Commit:
    """A cancel command. With no active tool there is no effect to check: cancelled at once."""
    b = _Builder(state, None)
    b.emit(ev.RUN_CANCEL_REQUESTED, None, by=by, reason=reason[:256])
    if state.status is Status.RUNNING:
        b.move(Event.CANCEL_REQUESTED)
        if not active_tool:
            b.stop(Event.EFFECTS_CHECKED, "CANCELLED", None, by=by)
        return b.done()
    b.stop(Event.CANCEL_REQUESTED, "CANCELLED", None, by=by)
    b.commit.expire_pending_confirmations = True
    return b.done()


def decide_confirmation(
    state: RunState, *, confirmation_id: str, approved: bool, by: str
) -> Commit:
    """A person answered the pending confirmation of this run."""
    b = _Builder(state, None)
    pid = _pid(state.pending_proposal)
    b.commit.confirmation_decision = (confirmation_id, approved)
    b.emit(
        ev.CONFIRMATION_DECIDED,
        pid,
        confirmation_id=confirmation_id,
        decision="approved" if approved else "declined",
        by=by,
    )
    if approved:
        b.move(Event.CONFIRMED, pid)
        b.s.stop_reason = None
        return b.done()
    b.s.pending_proposal = None
    b.s.pending_confirmation_id = None
    b.s.stop_reason = None
    b.move(Event.DECLINED, pid)
    b.reject(pid, "confirmation", "CONFIRMATION_DECLINED", confirmation_id=confirmation_id)
    return b.done()


def fail(state: RunState, reason: str, **details: Any) -> Commit:
    """Stop a running run for a reason found outside the gate (planner exhausted, crashed)."""
    b = _Builder(state, None)
    b.stop(Event.FAIL, reason, None, **details)
    return b.done()


def quota_exhausted(state: RunState, reason: str) -> Commit:
    """A quota outside the run's own budgets is spent (the subject's daily steps): the run
    stops as it does at MAX_STEPS_REACHED, failed with a handoff, never silently."""
    b = _Builder(state, None)
    b.stop(Event.FAIL, reason, None, step=state.step)
    b.commit.handoff_reason = reason
    return b.done()


def finish_cancel(state: RunState) -> Commit:
    """cancelling → cancelled once no tool is active (its effect is already recorded)."""
    b = _Builder(state, None)
    b.stop(Event.EFFECTS_CHECKED, _cancel_reason(b), None)
    return b.done()


def retrying(
    state: RunState, command: ExecutableCommand, *, attempt: int, code: str | None, delay_ms: int
) -> Commit:
    """A retryable failure will be retried: same command, same token, next attempt."""
    b = _Builder(state, None)
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
    b = _Builder(state, None)
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
    b = _Builder(state, None)
    b.stop(Event.DEADLINE_REACHED, "DEADLINE_REACHED", _pid(state.pending_proposal))
    b.commit.expire_pending_confirmations = True
    return b.done()


def deadline_during_tool(state: RunState) -> Commit:
    """running past the deadline while a tool is active → cancelling: stop it, check its effect."""
    b = _Builder(state, None)
    b.move(Event.DEADLINE_DURING_TOOL)
    b.s.stop_reason = "DEADLINE_REACHED"
    return b.done()


def handoff_event(state: RunState, event: str, **details: Any) -> Commit:
    """A handoff was claimed or resolved: recorded in the run's trace, who and why included."""
    b = _Builder(state, None)
    b.emit(event, None, **details)
    return b.done()

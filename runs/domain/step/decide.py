"""A planner step: planner output → parse → loop guard → gate → the commit of its decision.

Also the re-evaluation of a pending proposal once a person confirmed it. Pure: no I/O; the run's
history is asked through ``Lookups``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from policy.domain import canonical as hashing
from policy.domain.confirmation.confirmations import Confirmation
from policy.domain.confirmation.edits import split_edit
from policy.domain.contracts import CallFacts, ToolContract
from policy.domain.decisions import ExecutableCommand, Execute, NeedsConfirmation, Reject, Stop
from policy.domain.errors import CanonicalError, ParseError
from policy.domain.gate import RunView, evaluate, loop_fingerprint
from policy.domain.grants import CapabilityGrant
from policy.domain.observations import TrustLabel
from policy.domain.origins.provenance import ArgumentProvenance, EditedBy, compute, first_party
from policy.domain.outcomes import OutcomeStatus
from policy.domain.proposals import ActionProposal, FinalProposal, parse_planner_output
from policy.domain.registry import ToolRegistry
from policy.domain.secrets.redaction import redact_secrets, shown_proposal
from policy.domain.tool_policy import stored_policy
from runs.domain import trace as ev
from runs.domain.gateway.model_planning import PARSE_PROBLEMS
from runs.domain.ids import minted_confirmation_id
from runs.domain.machine import Event, StopReason
from runs.domain.state import RunState
from runs.domain.step.commits import Builder, Commit, ConfirmationRequest, Lookups, proposal_id_of
from runs.domain.step.final import final_violation
from runs.domain.step.loop_guard import observe as loop_observe

CONFIRMATION_TTL_STEPS = 3


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
    tokens: int = 0,
    preferences: Callable[[], Mapping[str, Any]] | None = None,
) -> Commit:
    """One planner step, or the re-evaluation of a pending proposal after a confirmation.

    1. A new planner output costs a step (final answers and rejected proposals included); the
       re-evaluation of ``pending_proposal`` does not. Its model tokens (``tokens``) are
       counted; past the run's ``max_tokens`` the run stops and the output is not acted on.
    2. Parse; a final answer is validated against citable observations and ends the run.
    3. A tool proposal passes the loop guard, then the gate; its decision becomes the commit.
    """
    b = Builder(state, lookups)
    resuming = raw_output is None
    edited = None
    if resuming:
        # The proposal as the planner made it (or as a person edited it), secrets included:
        # the gate checks it again and the tool gets exactly what the person approved.
        raw_output, edited = split_edit(state.pending_proposal)
        recorded = raw_output
        b.s.pending_proposal = None
    else:
        # Mask what is recorded and shown, never what is executed (issue 21 item 1): the
        # output's ids and texts are masked before anything reads them, its arguments are
        # kept as written, for the gate, the proposal hash and the tool. What leaves this
        # function as a record (events, observations, a confirmation request, a handoff)
        # carries the arguments masked (``_shown``).
        recorded = redact_secrets(raw_output)
        raw_output = _with_arguments_of(raw_output, recorded)
        b.s.step += 1
        b.s.planner_cursor += 1
        kind = raw_output.get("kind") if isinstance(raw_output, dict) else None
        kind = kind if kind in ("tool", "final") else "invalid"  # untrusted: never echoed
        b.emit(
            ev.PLANNER_OUTPUT,
            proposal_id_of(raw_output),
            kind=kind,
            step=b.s.step,
            source=source,
            **(context_summary or {}),
        )
        b.s.tokens_used += tokens
        if b.s.tokens_used > b.s.max_tokens:
            b.stop(
                Event.FAIL,
                StopReason.MAX_TOKENS_REACHED,
                proposal_id_of(raw_output),
                tokens_used=b.s.tokens_used,
                max_tokens=b.s.max_tokens,
            )
            b.commit.handoff_reason = StopReason.MAX_TOKENS_REACHED
            return b.done()

    try:
        output = parse_planner_output(raw_output)
    except ParseError as exc:
        # Fingerprinted masked: the hash of an unparsed output is a trace detail, and a hash
        # of a low-entropy secret among known text is reversed by a dictionary.
        fingerprint = _fingerprint_raw(redact_secrets(recorded))
        if _loop_stop(b, fingerprint, None, None):
            return b.done()
        b.reject(proposal_id_of(raw_output), "parse", exc.code, **_parse_problem(raw_output))
        b.absorb(fingerprint)
        return b.done()

    if isinstance(output, FinalProposal):
        return _final(b, output, lookups)
    args = (confirmations, registry, lookups, now_ms, resuming, confirmation_id, edited)
    return _tool(b, output, _People(grants, preferences), *args)


def _with_arguments_of(raw: Any, recorded: Any) -> Any:
    """``recorded`` (the masked output) with the planner's own ``arguments``, unmasked."""
    if isinstance(raw, dict) and isinstance(recorded, dict) and "arguments" in raw:
        return {**recorded, "arguments": raw["arguments"]}
    return recorded


def shown_record(proposal: ActionProposal) -> dict[str, Any]:
    """The proposal as it may be recorded and shown (``shown_proposal``: masked, with the
    length of each masked secret for the person who decides on it)."""
    return shown_proposal(proposal.model_dump(mode="json"))


def _parse_problem(raw: Any) -> dict[str, str]:
    """Why a model planner's response was refused, for the model to read next turn: only a
    word of the closed ``PARSE_PROBLEMS`` vocabulary, never text the planner wrote."""
    problem = raw.get("problem") if isinstance(raw, dict) else None
    return {"problem": problem} if problem in PARSE_PROBLEMS else {}


def _final(b: Builder, final: FinalProposal, lookups: Lookups) -> Commit:
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
    b.stop(Event.FINAL_VALIDATED, StopReason.FINAL_ANSWER_VALIDATED, final.proposal_id)
    return b.done()


def _loop_stop(
    b: Builder,
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
        StopReason.REPEATED_PROPOSAL_WITHOUT_NEW_OBSERVATION
        if verdict.repeated
        else StopReason.POLLING_LIMIT_REACHED
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


class _People:
    """The first-party facts of a step: the run's grants, and ``preferences``: key → value of
    the user's preferences the planner is given, read only when a tool proposal asks for its
    provenance (a first-party origin, policy.domain.origins.provenance; none when not given)."""

    def __init__(
        self,
        grants: Iterable[CapabilityGrant],
        preferences: Callable[[], Mapping[str, Any]] | None,
    ) -> None:
        self.grants = list(grants)
        self._preferences = preferences

    def preferences(self) -> Mapping[str, Any]:
        return self._preferences() if self._preferences is not None else {}


def _tool(
    b: Builder,
    proposal: ActionProposal,
    people: _People,
    confirmations: Iterable[Confirmation],
    registry: ToolRegistry,
    lookups: Lookups,
    now_ms: int,
    resuming: bool,
    confirmation_id: str | None,
    edited: EditedBy | None = None,
) -> Commit:
    """A tool proposal: the loop guard (new proposals only), then the gate; the gate's decision
    becomes the commit. ``edited``: the values a person typed into it (a resumed edit)."""
    pid = proposal.proposal_id
    registered = registry.get(proposal.tool_name, proposal.tool_version)
    contract = registered.contract if registered else None
    # Counted on the arguments the tool would get: a respelled path is the same proposal.
    facts = CallFacts(run_id=b.s.run_id, subject=b.s.subject, step=b.s.step)
    fingerprint = loop_fingerprint(proposal, registry=registry, facts=facts)
    if not resuming:
        max_polls = contract.polling.max_polls if contract and contract.polling else None
        if _loop_stop(b, fingerprint, pid, max_polls, shown_record(proposal)):
            return b.done()

    p_hash = proposal.hash()
    grants = people.grants
    cited = _received(b, proposal, p_hash, contract, lookups)
    provenance = provenance_of(
        b.s, proposal, cited, grants, lookups, edited, preferences=people.preferences()
    )
    b.emit(ev.PROPOSAL_PROVENANCE, proposal.proposal_id, **provenance.summary())
    # The card's flag: an argument derives from untrusted content, or the planner says it used
    # some (a citation may only add).
    untrusted = bool(provenance.tainted()) or TrustLabel.UNTRUSTED_CONTENT in cited.values()
    run = run_view(b.s)
    decision = evaluate(
        proposal,
        run=run,
        grants=grants,
        confirmations=confirmations,
        registry=registry,
        now_ms=now_ms,
        provenance=provenance,
    )
    _layer_events(b, pid, decision)
    summary = {
        "tool": proposal.tool_name[:64],
        "version": proposal.tool_version,
        "proposal_hash": p_hash,
    }

    if isinstance(decision, Reject):
        b.count_write(contract, OutcomeStatus.REJECTED)
        b.reject(pid, decision.layer, decision.code, **summary)
        b.absorb(fingerprint)
    elif isinstance(decision, Stop):
        b.emit(ev.PROPOSAL_REJECTED, pid, layer=decision.layer, code=decision.reason, **summary)
        b.count_write(contract, OutcomeStatus.REJECTED)
        b.stop(Event.FAIL, decision.reason, pid)
        if decision.reason != StopReason.DEADLINE_REACHED:
            b.commit.handoff_reason = decision.reason
    elif isinstance(decision, NeedsConfirmation):
        _wait_for_confirmation(b, proposal, decision, confirmation_id, cites_untrusted=untrusted)
    elif isinstance(decision, Execute):
        _execute(b, pid, decision.command, lookups, fingerprint, summary, contract)
    else:
        raise TypeError(f"unexpected gate decision {decision!r}")
    return b.done()


def run_view(s: RunState) -> RunView:
    return RunView(
        run_id=s.run_id,
        subject=s.subject,
        status=s.status.value,
        step=s.step,
        tool_calls=s.tool_calls,
        max_tool_calls=s.max_tool_calls,
        deadline_ms=s.deadline_ms,
        unresolved_effects=s.unresolved_effects,
        tool_policy=stored_policy(s.tool_policy),
    )


def provenance_of(
    s: RunState,
    proposal: ActionProposal,
    cited: Mapping[str, str],
    grants: Iterable[CapabilityGrant],
    lookups: Lookups,
    edited: EditedBy | None = None,
    preferences: Mapping[str, Any] | None = None,
) -> ArgumentProvenance:
    """Where each argument came from (policy.domain.origins.provenance), from everything the run
    read since it started (its index), not from what the planner says it used: the planner's
    citations of untrusted observations may only add origins; the values a person typed into the
    proposal (``edited``) are theirs. Recorded as ``proposal.provenance`` (paths and origins, never
    values). ``preferences``: the user's preferences the planner was given, by key (a first-party
    origin)."""
    people = first_party(
        s.goal, ((g.grant_id, _constraint_values(g)) for g in grants), preferences or {}
    )
    return compute(
        proposal.arguments,
        index=lookups.taint_index(s.observation_seq),
        people=people,
        cited_untrusted=[i for i, t in cited.items() if t == TrustLabel.UNTRUSTED_CONTENT],
        overflow=s.taint_chars is None,
        edited=edited,
    )


def _constraint_values(grant: CapabilityGrant) -> list[Any]:
    return [c.model_dump(exclude_unset=True) for c in grant.constraints.values()]


def _received(
    b: Builder,
    proposal: ActionProposal,
    p_hash: str,
    contract: ToolContract | None,
    lookups: Lookups,
) -> Mapping[str, str]:
    """Record the proposal as received; the trust label of each cited observation it names."""
    trust = lookups.trust_of(proposal.source_observation_ids)
    untrusted = sorted(i for i, t in trust.items() if t == TrustLabel.UNTRUSTED_CONTENT)
    b.emit(
        ev.PROPOSAL_RECEIVED,
        proposal.proposal_id,
        tool=proposal.tool_name[:64],
        version=proposal.tool_version,
        proposal_hash=p_hash,
        arguments_bytes=len(proposal.canonical_arguments().encode("utf-8")),
        source_observation_ids=list(proposal.source_observation_ids),
        cites_untrusted=untrusted,
        **_logged_arguments(contract, proposal.arguments),
    )
    return trust


def confirmation_request(
    cid: str,
    proposal: ActionProposal,
    decision: NeedsConfirmation,
    *,
    step: int,
    cites_untrusted: bool,
) -> ConfirmationRequest:
    """The confirmation the gate's ``decision`` asks for at ``step``: the proposal as shown,
    its hash, who may approve it (a person's edit adds what it changed: runs.domain.step.edits)."""
    return ConfirmationRequest(
        confirmation_id=cid,
        proposal_hash=decision.confirmation_hash,
        tool_name=proposal.tool_name,
        tool_version=proposal.tool_version,
        proposal=shown_record(proposal),
        expires_at_step=step + CONFIRMATION_TTL_STEPS,
        cites_untrusted=cites_untrusted,
        approvers=decision.approvers,
    )


def _wait_for_confirmation(
    b: Builder,
    proposal: ActionProposal,
    decision: NeedsConfirmation,
    confirmation_id: str | None,
    *,
    cites_untrusted: bool,
) -> None:
    """Park the proposal until a person answers; ask for a confirmation unless one exists."""
    s, pid = b.s, proposal.proposal_id
    cid = (
        decision.existing_confirmation_id
        or confirmation_id
        or minted_confirmation_id(s.run_id, s.step)
    )
    if decision.existing_confirmation_id is None:
        b.commit.confirmation_request = confirmation_request(
            cid, proposal, decision, step=s.step, cites_untrusted=cites_untrusted
        )
    # The real arguments wait in the run's state, which only the runner reads back (the
    # handoff bundle and the admin mask it): after the wait, and after a worker's crash, the
    # gate sees again exactly what the person was asked about.
    s.pending_proposal = proposal.model_dump(mode="json")
    s.pending_confirmation_id = cid
    b.emit(
        ev.PROPOSAL_WAITING_CONFIRMATION,
        pid,
        proposal_hash=decision.confirmation_hash,
        confirmation_id=cid,
        code=StopReason.USER_CONFIRMATION_REQUIRED,
    )
    b.move(Event.NEEDS_CONFIRMATION, pid)
    s.stop_reason = StopReason.USER_CONFIRMATION_REQUIRED


def _execute(
    b: Builder,
    pid: str,
    command: ExecutableCommand,
    lookups: Lookups,
    fingerprint: str,
    summary: dict[str, Any],
    contract: ToolContract | None,
) -> None:
    """Commit the intent of a command the gate built (intent before effect, STYLE habit 5).
    Its outcome is counted when it is settled (runs.domain.step.settle), not here."""
    s = b.s
    if lookups.ledger_has(command.idempotency_token):
        # Same run, proposal id and arguments as a command already issued: its token is taken.
        # Executing again would be a second effect under the same identity; refuse instead.
        b.count_write(contract, OutcomeStatus.REJECTED)
        b.reject(pid, "state", "PROPOSAL_ALREADY_EXECUTED", **summary)
        b.absorb(fingerprint)
        return
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


def _logged_arguments(contract: ToolContract | None, arguments: Any) -> dict[str, Any]:
    """Only the fields the contract names as loggable, truncated; never the redacted ones."""
    if contract is None or not isinstance(arguments, dict):
        return {}
    out: dict[str, Any] = {}
    for name in contract.logged_fields:
        value = arguments.get(name)
        if isinstance(value, str):
            # Masked before it is cut: a secret cut in two may no longer look like one.
            out[f"arg_{name}"] = redact_secrets(value)[: ev.MAX_DETAIL_STRING]
        elif isinstance(value, int | float | bool):
            out[f"arg_{name}"] = value
    return out


def _layer_events(b: Builder, pid: str, decision: Any) -> None:
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
        why: dict[str, Any] = {}
        if decision.trigger is not None:
            # Which tool-policy rule asked, and the untrusted observations it saw (ids only).
            why = {
                "why": decision.trigger,
                "untrusted_observation_ids": list(decision.untrusted_ids)[:32],
            }
        if decision.untrusted_arguments:
            why["untrusted_arguments"] = list(decision.untrusted_arguments)[:32]
        b.emit(ev.POLICY_CONFIRMATION_CHECKED, pid, result="required", code=decision.why, **why)
    elif layer == "confirmation":
        b.emit(ev.POLICY_CONFIRMATION_CHECKED, pid, result="declined", code=decision.code)

"""A person's two other answers to a waiting proposal (issue 24 item 1): edit it, or respond to
the planner with a note. Step functions like ``lifecycle``'s: pure, from the run's state and the
trusted facts to one ``Commit``; a refusal raises and nothing is written.

An **edit is an approval of a different proposal**. The edited call is a new proposal (a new
id, so a new hash and idempotency token) attributed to the editor, and it passes the whole gate
again, for this run's state, before anything is written: schema, semantic checks, grants and
their constraints, argument rules, the confirmation policy. The person's edit never widens what
the approver rule allows: who may edit is who may approve, and if the edited call needs a
confirmation, the edit counts as an approval only as far as the rule lets this person approve
(four eyes: one approval, and the second approver sees the edited proposal).

A **response** ends the wait without a decision: the note becomes a trusted observation from
that person (``human-decision``, trust ``user``) and the run goes back to planning.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Sequence
from typing import Any

from policy.domain.confirmation.approvers import ApproverRule, Person, may_approve, may_decline
from policy.domain.confirmation.confirmations import Confirmation, ConfirmationStatus
from policy.domain.confirmation.edits import Change, edited_arguments, path_text, pending_with_edit
from policy.domain.decisions import NeedsConfirmation, Reject, Stop
from policy.domain.errors import DomainError, ParseError
from policy.domain.gate import evaluate
from policy.domain.grants import CapabilityGrant
from policy.domain.observations import ObservationKind, TrustLabel
from policy.domain.origins.provenance import EditedBy
from policy.domain.proposals import ActionProposal, parse_planner_output
from policy.domain.registry import ToolRegistry
from policy.domain.secrets.redaction import redact_secrets
from runs.domain import trace as ev
from runs.domain.lifecycle import MAX_DECISION_REASON
from runs.domain.machine import Event, Status, StopReason
from runs.domain.state import RunState
from runs.domain.step.commits import (
    ApprovalRecord,
    Builder,
    Commit,
    Lookups,
    proposal_id_of,
)
from runs.domain.step.decide import confirmation_request, provenance_of, run_view
from runs.domain.trace import MAX_DETAIL_STRING

MAX_NOTE = 2_000  # what a person writes back to the planner (the console's form caps it too)
_EDIT_SUFFIX = re.compile(r"~e(\d+)$")
_PID_SUFFIX = re.compile(r"-edit\d+$")


class EditRefused(DomainError):
    """The gate refused the edited call: the code is the gate's own (``CAPABILITY_CONSTRAINT_
    VIOLATED``, ``MEMORY_VALUE_INVALID``, ...), and nothing was written."""

    http_status = 422


class NoteInvalid(DomainError):
    code = "NOTE_REQUIRED"
    http_status = 400


def edited_confirmation_id(previous: str) -> str:
    """``<run>~c3`` → ``<run>~c3~e1`` → ``<run>~c3~e2``: minted (runs.domain.ids), so never an
    id an input can name, and never one a later step mints (``<run>~c<step>``)."""
    found = _EDIT_SUFFIX.search(previous)
    if found is None:
        return f"{previous}~e1"
    return f"{previous[: found.start()]}~e{int(found.group(1)) + 1}"


def _edited_proposal_id(proposal_id: str, confirmation_id: str) -> str:
    found = _EDIT_SUFFIX.search(confirmation_id)
    suffix = f"-edit{found.group(1) if found else 1}"
    base = _PID_SUFFIX.sub("", proposal_id)
    return base[: 128 - len(suffix)] + suffix


@dataclasses.dataclass(frozen=True)
class EditFacts:
    """What the gate reads for the edited call: the run's grants and confirmations, the tool
    registry, the run's history (provenance) and the time."""

    grants: Sequence[CapabilityGrant]
    confirmations: Iterable[Confirmation]
    registry: ToolRegistry
    lookups: Lookups
    now_ms: int


def edit(
    state: RunState,
    *,
    confirmation_id: str,
    rule: ApproverRule,
    shown_arguments: Any,
    typed: Any,
    by: str,
    person: Person | None,
    reason: str,
    facts: EditFacts,
) -> Commit:
    """The commit of a person's edit of the waiting proposal, or a refusal (nothing written).

    1. Who may edit is who may approve under the confirmation's rule (APPROVER_NOT_ALLOWED).
       ``person`` None: a trusted caller that is no user (as ``confirmation_decide``).
    2. The edit is a diff against the arguments the person was shown, applied to the real ones
       (``policy.domain.confirmation.edits``); the tool and its version never change.
    3. The edited call, a new proposal, passes the gate for this run's state as it will be once
       the wait ends; any refusal is ``EditRefused`` with the gate's code.
    4. The old confirmation ends ``edited``; the edited call's own is approved by this edit
       (or pending with it as the first of four eyes), or, needing none, the call goes on.
    """
    reason = reason[:MAX_DECISION_REASON]
    if person is not None:
        may_approve(rule, person).raise_if_refused()
    pending = state.pending_proposal if isinstance(state.pending_proposal, dict) else {}
    arguments, changes = edited_arguments(
        real=pending.get("arguments"), shown=shown_arguments, typed=typed
    )
    new_cid = edited_confirmation_id(confirmation_id)
    old_pid = proposal_id_of(pending) or "proposal"
    proposal = _proposal(pending, arguments, _edited_proposal_id(old_pid, new_cid))
    checked = _checked(
        state, proposal, changes, confirmation_id=confirmation_id, by=by, person=person, facts=facts
    )
    decision = checked.decision
    b = Builder(state, None)
    b.commit.confirmation_decision = (confirmation_id, ConfirmationStatus.EDITED.value, reason)
    b.emit(
        ev.CONFIRMATION_EDITED,
        old_pid,
        confirmation_id=confirmation_id,
        edited_into=new_cid if decision is not None else None,
        new_proposal_id=proposal.proposal_id,
        proposal_hash=proposal.hash(),
        by=by,
        **({"reason": reason[:MAX_DETAIL_STRING]} if reason else {}),
        **_trace_diff(changes, facts.registry, proposal),
    )
    b.s.pending_proposal = pending_with_edit(
        proposal.model_dump(mode="json"), by=by, edited_from=confirmation_id, changes=changes
    )
    if decision is None:
        # The edited call needs no confirmation: the run goes on with it (the gate checks it
        # once more when it resumes, and the tool gets exactly those arguments).
        b.s.pending_confirmation_id = None
        b.s.stop_reason = None
        b.move(Event.EDITED, proposal.proposal_id)
        return b.done()
    asked = confirmation_request(
        new_cid, proposal, decision, step=state.step, cites_untrusted=checked.untrusted
    )
    b.commit.confirmation_request = dataclasses.replace(
        asked,
        edited_from=confirmation_id,
        edit_diff=tuple(redact_secrets(c.as_json()) for c in changes),
        approved=checked.completes,
    )
    independent = person is not None and person.independent
    b.commit.confirmation_approval = ApprovalRecord(new_cid, by, reason, independent)
    b.s.pending_confirmation_id = new_cid
    _approved_or_waiting(
        b, proposal, decision, new_cid, by=by, reason=reason, done=checked.completes
    )
    return b.done()


@dataclasses.dataclass(frozen=True)
class _Checked:
    decision: NeedsConfirmation | None  # None: the edited call needs no confirmation
    completes: bool  # the edit is the last approval its confirmation needs
    untrusted: bool  # an argument derives from untrusted content (the card's flag)


def _checked(
    state: RunState,
    proposal: ActionProposal,
    changes: Sequence[Change],
    *,
    confirmation_id: str,
    by: str,
    person: Person | None,
    facts: EditFacts,
) -> _Checked:
    """The whole gate on the edited call, for the run as it will be once the wait ends
    (running, the step unchanged), the values the person typed counted as theirs; a refusal
    raises ``EditRefused`` with the gate's code, or APPROVER_NOT_ALLOWED when the approval the
    edited call needs is not this person's to give."""
    cited = facts.lookups.trust_of(proposal.source_observation_ids)
    edited = EditedBy(by=by, paths=tuple(c.path for c in changes))
    provenance = provenance_of(state, proposal, cited, facts.grants, facts.lookups, edited)
    decision = evaluate(
        proposal,
        run=dataclasses.replace(run_view(state), status=Status.RUNNING.value),
        grants=facts.grants,
        # The confirmation being edited is superseded: it answers nothing about the new call.
        confirmations=[c for c in facts.confirmations if c.confirmation_id != confirmation_id],
        registry=facts.registry,
        now_ms=facts.now_ms,
        provenance=provenance,
    )
    if isinstance(decision, Reject | Stop):
        code = decision.code if isinstance(decision, Reject) else decision.reason
        raise EditRefused(
            f"The edited call is refused ({decision.layer}): {decision.message or code}"[:300],
            code=code,
            layer=decision.layer,
        )
    untrusted = bool(provenance.tainted()) or TrustLabel.UNTRUSTED_CONTENT in cited.values()
    if not isinstance(decision, NeedsConfirmation):
        return _Checked(None, True, untrusted)
    if person is None:
        return _Checked(decision, True, untrusted)
    approval = may_approve(decision.approvers, person)
    approval.raise_if_refused()
    return _Checked(decision, approval.completes, untrusted)


def _proposal(pending: dict[str, Any], arguments: dict[str, Any], pid: str) -> ActionProposal:
    """The edited call: the waiting proposal's tool, version, reason and citations, the new
    arguments and id, parsed as any planner output is (its size limits included)."""
    raw = {
        "kind": "tool",
        "proposal_id": pid,
        "tool_name": pending.get("tool_name"),
        "tool_version": pending.get("tool_version"),
        "arguments": arguments,
        "reason_summary": pending.get("reason_summary", ""),
        "source_observation_ids": pending.get("source_observation_ids", []),
    }
    try:
        parsed = parse_planner_output(raw)
    except ParseError as exc:
        raise EditRefused(
            f"The edited call is refused (parse): {exc.message}", code=exc.code, layer="parse"
        ) from None
    assert isinstance(parsed, ActionProposal)  # noqa: S101 -- kind "tool" parses as one
    return parsed


def _approved_or_waiting(
    b: Builder,
    proposal: ActionProposal,
    decision: NeedsConfirmation,
    cid: str,
    *,
    by: str,
    reason: str,
    done: bool,
) -> None:
    """The edited call's confirmation: approved by the edit (the run resumes with it), or
    waiting for a second approver with the edit as the first approval (four eyes)."""
    pid = proposal.proposal_id
    approvals = {
        "approvers": decision.approvers.value,
        "approved_by": [by],
        "approval_reasons": [reason[:MAX_DETAIL_STRING]],
    }
    said = {"reason": reason[:MAX_DETAIL_STRING]} if reason else {}
    if done:
        b.emit(
            ev.CONFIRMATION_DECIDED,
            pid,
            confirmation_id=cid,
            decision="approved",
            by=by,
            **said,
            **approvals,
        )
        b.s.stop_reason = None
        b.move(Event.EDITED, pid)
        return
    b.emit(
        ev.PROPOSAL_WAITING_CONFIRMATION,
        pid,
        proposal_hash=decision.confirmation_hash,
        confirmation_id=cid,
        code=StopReason.USER_CONFIRMATION_REQUIRED,
    )
    b.emit(
        ev.CONFIRMATION_APPROVAL_RECORDED,
        pid,
        confirmation_id=cid,
        by=by,
        needed=2,
        **said,
        **approvals,
    )


def _trace_diff(
    changes: list[Change], registry: ToolRegistry, proposal: ActionProposal
) -> dict[str, Any]:
    """The diff as the trace may hold it: every changed path, and old → new only for values
    of the fields the tool's contract names as loggable (masked, cut), as ``proposal.received``
    logs arguments; ``changed``/``added``/``removed`` for the others."""
    registered = registry.get(proposal.tool_name, proposal.tool_version)
    logged = set(registered.contract.logged_fields) if registered else set()
    lines = []
    for c in changes[:32]:
        text = path_text(c.path)
        if c.path and c.path[0] in logged and c.op == "changed":
            text += f": {_short(c.old)} → {_short(c.new)}"
        else:
            text += f": {c.op}"
        lines.append(redact_secrets(text)[:MAX_DETAIL_STRING])
    return {
        "paths": [path_text(c.path)[:MAX_DETAIL_STRING] for c in changes[:32]],
        "changes": lines,
    }


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text[:80]


def respond(
    state: RunState,
    *,
    confirmation_id: str,
    rule: ApproverRule,
    note: str,
    by: str,
    person: Person | None,
    tool_name: str,
) -> Commit:
    """The person answers the waiting proposal with a note instead of a decision: the
    confirmation ends ``responded``, the note becomes a trusted observation from them, and the
    run plans a new step (the planner reads the note; the proposal is neither run nor counted
    as a rejected write). Who may respond is who may decide it."""
    if person is not None:
        may_decline(rule, person).raise_if_refused()
    note = note.strip()
    if not note:
        raise NoteInvalid("Write a note for the planner (it cannot be empty).")
    if len(note) > MAX_NOTE:
        raise NoteInvalid(f"A note holds at most {MAX_NOTE} characters.", code="NOTE_TOO_LONG")
    note = redact_secrets(note)
    b = Builder(state, None)
    pid = proposal_id_of(state.pending_proposal)
    b.commit.confirmation_decision = (confirmation_id, ConfirmationStatus.RESPONDED.value, note)
    b.emit(
        ev.CONFIRMATION_RESPONDED,
        pid,
        confirmation_id=confirmation_id,
        by=by,
        note=note[:MAX_DETAIL_STRING],
    )
    b.s.pending_proposal = None
    b.s.pending_confirmation_id = None
    b.s.stop_reason = None
    b.move(Event.RESPONDED, pid)
    b.observe(
        "note",
        ObservationKind.HUMAN_DECISION,
        TrustLabel.USER,
        {
            "note": note,
            "from": by,
            "instead_of": {"proposal_id": pid, "tool": tool_name[:64]},
        },
    )
    return b.done()

"""A person's answers to a waiting proposal besides approve and decline (issue 24 item 1):
edit its arguments, or respond to the planner with a note. Services: the API and the console
call these; every write goes through ``runs.services.answer_pending`` (the run's row lock, the
shown hash, one commit through the run's compare-and-set), as a decision does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentconsole.kernel.roles import actor_name, user_or_none
from policy.approvers import approver_facts
from policy.domain.confirmation.approvers import approver_rule
from policy.domain.secrets.redaction import redact_secrets
from policy.services import PendingConfirmation
from runs.context import RunsContext, resolve
from runs.domain.clock import SYSTEM_CLOCK, Clock
from runs.domain.state import RunState
from runs.domain.step import edits
from runs.domain.step.commits import Commit
from runs.services import answer_pending


@dataclass(frozen=True)
class Edited:
    """What an edit came to: the run now, and the confirmation of the edited call (None when
    the edited call needed none and the run went on with it)."""

    state: RunState
    confirmation_id: str | None


def _person(by: Any, *, run_owner_id: Any, subject: str) -> Any:
    # ``by`` that is no user (a replayed scenario, a script's name): trusted, as in
    # ``confirmation_decide``; a user is checked against the approver rule.
    if user_or_none(by) is None:
        return None
    return approver_facts(by, run_owner_id=run_owner_id, run_subject=subject)


def confirmation_edit(
    *,
    confirmation_id: str,
    shown_hash: str,
    arguments: Any,
    by: Any = None,
    reason: str = "",
    enqueue: bool = False,
    ctx: RunsContext | None = None,
    run_id: str | None = None,
    clock: Clock = SYSTEM_CLOCK,
) -> Edited:
    """Edit the arguments of the waiting proposal the person was shown (``shown_hash``) and
    approve the edited call as far as the approver rule lets them (runs.domain.step.edits.edit).
    Refusals carry stable codes and write nothing: CONFIRMATION_HASH_MISMATCH (a stale page),
    APPROVER_NOT_ALLOWED (403), EDIT_* (400: not an object, unchanged, a mask kept), the gate's
    own code (422: a grant's constraint, the tool's schema or semantic check, ...)."""
    reason = redact_secrets(reason.strip())
    ctx = resolve(ctx)
    store = ctx.store()
    made: list[Commit] = []

    def answer(row: PendingConfirmation, state: RunState, owner_id: Any) -> Commit:
        shown = row.proposal.get("arguments") if isinstance(row.proposal, dict) else None
        facts = edits.EditFacts(
            grants=store.grants(row.run_id),
            confirmations=store.confirmations(row.run_id),
            registry=ctx.registry(),
            lookups=store.lookups(row.run_id),
            now_ms=clock.now_ms(),
        )
        commit = edits.edit(
            state,
            confirmation_id=row.confirmation_id,
            rule=approver_rule(row.approvers),
            shown_arguments=shown,
            typed=arguments,
            by=actor_name(by),
            person=_person(by, run_owner_id=owner_id, subject=state.subject),
            reason=reason,
            facts=facts,
        )
        made[:] = [commit]
        return commit

    state = answer_pending(
        confirmation_id=confirmation_id,
        shown_hash=shown_hash,
        by=by,
        answer=answer,
        enqueue=enqueue,
        ctx=ctx,
        run_id=run_id,
    )
    request = made[-1].confirmation_request if made else None
    return Edited(state, request.confirmation_id if request is not None else None)


def confirmation_respond(
    *,
    confirmation_id: str,
    shown_hash: str,
    note: str,
    by: Any = None,
    enqueue: bool = False,
    ctx: RunsContext | None = None,
    run_id: str | None = None,
) -> RunState:
    """Answer the waiting proposal with a note for the planner instead of a decision
    (runs.domain.step.edits.respond): NOTE_REQUIRED, NOTE_TOO_LONG (400), APPROVER_NOT_ALLOWED
    (403), CONFIRMATION_HASH_MISMATCH / CONFIRMATION_NOT_PENDING (409)."""

    def answer(row: PendingConfirmation, state: RunState, owner_id: Any) -> Commit:
        return edits.respond(
            state,
            confirmation_id=row.confirmation_id,
            rule=approver_rule(row.approvers),
            note=note,
            by=actor_name(by),
            person=_person(by, run_owner_id=owner_id, subject=state.subject),
            tool_name=row.tool_name,
        )

    return answer_pending(
        confirmation_id=confirmation_id,
        shown_hash=shown_hash,
        by=by,
        answer=answer,
        enqueue=enqueue,
        ctx=resolve(ctx),
        run_id=run_id,
    )

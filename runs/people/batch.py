"""A service: identical proposals waiting in several runs, decided together (issue 24 item 3).

Beside ``runs.services`` (which is near the module size limit) and built only from its one
decision service: a batch is N single decisions, each with its own hash check, approver rule,
row lock, trace event and transaction. Nothing is decided "for the group".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from policy.confirmation_selectors import confirmations_facts
from policy.domain.canonical import per_run_confirmation_hash
from policy.domain.errors import DomainError
from runs import services
from runs.context import RunsContext
from runs.domain.machine import Status

MAX_BATCH = 200  # as policy.queue_similar.MAX_BATCH: the page never offers more


class BatchInvalid(DomainError):
    http_status = 400


class NothingDecided(DomainError):
    """Every confirmation of a batch was refused: nothing was written (the API's 409)."""

    code = "BATCH_NOTHING_DECIDED"
    http_status = 409


@dataclass(frozen=True)
class BatchOutcome:
    confirmation_id: str
    run_id: str | None
    # "approved", "declined", "approval_recorded" (the first of four eyes: the run still waits
    # for a second approver) or "refused" (``code`` and ``message`` say why; nothing written).
    outcome: str
    code: str = ""
    message: str = ""

    @property
    def refused(self) -> bool:
        return self.outcome == "refused"


def _checked(ids: Sequence[str], shown_hash: str) -> dict[str, str]:
    """The run of each listed confirmation that exists (one query), after the batch-wide checks."""
    wanted = list(dict.fromkeys(ids))
    if not wanted or len(wanted) != len(ids):
        raise BatchInvalid("List each confirmation once, at least one.", code="BATCH_INVALID")
    if len(wanted) > MAX_BATCH:
        raise BatchInvalid(
            f"At most {MAX_BATCH} confirmations at once.", code="BATCH_TOO_LARGE", max=MAX_BATCH
        )
    runs: dict[str, str] = {}
    for c in confirmations_facts(confirmation_ids=wanted):
        # A per-run confirmation's hash is the tool's in every run: equal hashes prove nothing
        # about the calls, so it is decided alone, where its card says what it binds.
        if shown_hash == per_run_confirmation_hash(c.tool_name, c.tool_version, c.hash_scheme):
            raise BatchInvalid(
                "A per-run confirmation is decided on its own.",
                code="BATCH_PER_RUN",
                confirmation_id=c.confirmation_id,
            )
        runs[c.confirmation_id] = c.run_id
    return runs


def confirmations_decide_batch(
    *,
    confirmation_ids: Sequence[str],
    approved: bool,
    shown_hash: str,
    by: Any,
    reason: str = "",
    enqueue: bool = False,
    ctx: RunsContext | None = None,
) -> list[BatchOutcome]:
    """Decide each listed confirmation as the person was shown it (``shown_hash``: the one
    exact proposal they saw in every run), one after the other.

    1. Batch-wide checks first, nothing written when they fail: each id once, at most
       MAX_BATCH, no per-run confirmation (BATCH_PER_RUN), a decline says why
       (REASON_REQUIRED).
    2. Each confirmation through ``runs.services.confirmation_decide`` in its own transaction:
       its hash is checked against ``shown_hash`` (a proposal that differs is refused,
       CONFIRMATION_MISMATCH), its approver rule against ``by``, under its run's row lock.
       One run's lock at a time, never two held together: no lock order between runs to get
       wrong, and a refusal of one leaves the others decided.
    3. The outcome of each, in the order given: the caller says which were refused and why.
    """
    if not approved and not reason.strip():
        raise DomainError("Say why you decline them.", code=services.REASON_REQUIRED)
    runs = _checked(confirmation_ids, shown_hash)
    outcomes: list[BatchOutcome] = []
    for cid in confirmation_ids:
        if cid not in runs:
            outcomes.append(
                BatchOutcome(cid, None, "refused", "NOT_FOUND", "No such confirmation.")
            )
            continue
        try:
            state = services.confirmation_decide(
                confirmation_id=cid,
                approved=approved,
                shown_hash=shown_hash,
                by=by,
                reason=reason,
                enqueue=enqueue,
                ctx=ctx,
                run_id=runs[cid],
            )
        except DomainError as exc:
            outcomes.append(BatchOutcome(cid, runs[cid], "refused", exc.code, exc.message))
            continue
        waiting = approved and state.status is Status.WAITING_CONFIRMATION
        outcome = "approval_recorded" if waiting else ("approved" if approved else "declined")
        outcomes.append(BatchOutcome(cid, runs[cid], outcome))
    return outcomes

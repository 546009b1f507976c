"""What a run's writes came to (issue 21 item 2): counted as the run goes, flagged when it ends.

A *write* is a call of a tool whose contract's side effect is not ``read``. Each write proposal
that reaches a decision is counted once, by how it ended:

- ``succeeded``: the tool ran, its output matched its schema and its post-condition held (a
  recovery that found the effect, ``reconciled``, too);
- ``rejected``: the gate refused it (any layer after the registry: schema, semantic,
  authorization, a declined confirmation, state, budget) or the tool itself answered
  ``rejected`` (``PREFERENCE_VERSION_CONFLICT``, say);
- ``failed``: the tool failed (after its retries), its output broke its schema, or its
  post-condition failed (the effect may be there, but not as asked: compensation required);
- ``unknown``: nobody can tell whether the effect happened (the run stops with a handoff).

A proposal the loop guard stops, or one naming no registered tool, is no write: it never reached
a contract. A proposal still waiting for a person is not counted until the person answers. A
write a reviewer settles later (a handoff: the effect present, absent, compensated) is counted
again as they found it (``recount``), so ``unknown`` means still in doubt.

The counts live in the run's authoritative state (``RunState.writes_*``) and move in the same
commit as the decision or outcome they count, so the summary costs a step nothing and never needs
the history read back. ``None`` counts: a run started before the counting existed (its counts
would be partial, so they are not shown as if they were complete).

A run that *completed* although a write did not take effect (rejected, failed, or unknown) is
flagged ``writes_not_applied``: its final answer may say otherwise, and its status alone reads as
success. ``runs.models.OUTCOME_FLAGGED`` is the same rule as a SQL filter (a partial index serves
it); tests/domain/test_writes.py holds the two together.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from policy.domain.contracts import SideEffect, ToolContract
from policy.domain.outcomes import OutcomeStatus
from runs.domain.ledger import LedgerStatus
from runs.domain.machine import Status

# The run state's counter of each outcome (also the Run model's column names).
FIELDS: dict[OutcomeStatus, str] = {o: f"writes_{o.value}" for o in OutcomeStatus}
NOT_APPLIED = (OutcomeStatus.REJECTED, OutcomeStatus.FAILED, OutcomeStatus.UNKNOWN)

# The flag of a completed run with a write that did not take effect.
WRITES_NOT_APPLIED = "writes_not_applied"
OUTCOME_FLAGS = (WRITES_NOT_APPLIED,)


def is_write(contract: ToolContract | None) -> bool:
    """A call of this tool is a write (no contract: no call, nothing to count)."""
    return contract is not None and contract.side_effect is not SideEffect.READ


def count(state: Any, outcome: OutcomeStatus) -> None:
    """One more write of ``outcome`` on ``state``, a ``RunState`` (a ``Builder``'s own copy,
    changed in place; not named here: state.py imports this module for ``public``).
    A run whose counts were never started (``None``) stays uncounted."""
    name = FIELDS[outcome]
    current = getattr(state, name)
    if current is not None:
        setattr(state, name, current + 1)


# How a ledger row that a person settles (a handoff) was counted when the runtime left it.
_COUNTED_AS = {
    LedgerStatus.UNKNOWN: OutcomeStatus.UNKNOWN,
    LedgerStatus.COMPENSATION_REQUIRED: OutcomeStatus.FAILED,
}


def recount(state: Any, *, row_status: str, effect: str) -> None:
    """A reviewer settled a write the runtime could not (runs.people.handoffs): it no longer counts
    as it was left (unknown; a failed post-condition) but as the reviewer found it: present
    is a write that took effect, absent or compensated one that did not. A row never settled
    (a crashed worker's ``started``) was not counted before, so it is only counted now."""
    if counts_of(state) is None:
        return
    before = _COUNTED_AS.get(LedgerStatus(row_status))
    if before is not None:
        name = FIELDS[before]
        setattr(state, name, max(0, getattr(state, name) - 1))
    count(state, OutcomeStatus.SUCCEEDED if effect == "present" else OutcomeStatus.FAILED)


def counts_of(source: Any) -> dict[str, int] | None:
    """``{"succeeded": n, "rejected": n, "failed": n, "unknown": n}`` of a run state or row, or
    None for a run whose writes were not counted."""
    values = {o.value: getattr(source, name) for o, name in FIELDS.items()}
    if any(v is None for v in values.values()):
        return None
    return values


def not_applied(counts: Mapping[str, int] | None) -> int:
    """How many writes did not take effect (or may not have)."""
    return sum(counts[o.value] for o in NOT_APPLIED) if counts else 0


def outcome_flag(status: str, counts: Mapping[str, int] | None) -> str | None:
    """``writes_not_applied`` for a completed run with a write that did not take effect; None
    for every other run (a failed or cancelled run already says so in its status)."""
    if status == Status.COMPLETED and not_applied(counts):
        return WRITES_NOT_APPLIED
    return None


def summary_text(counts: Mapping[str, int] | None) -> str:
    """The counts in words, the outcomes that happened only: "1 succeeded, 1 rejected"."""
    if counts is None:
        return "not recorded"
    parts = [f"{counts[o.value]} {o.value}" for o in OutcomeStatus if counts[o.value]]
    return ", ".join(parts) or "none"


def stop_details(state: Any) -> dict[str, Any]:
    """What ``run.stopped`` says of the run's writes: each count, and the flag when it is set."""
    counts = counts_of(state)
    if counts is None:
        return {}
    details: dict[str, Any] = {FIELDS[o]: counts[o.value] for o in OutcomeStatus}
    flag = outcome_flag(state.status, counts)
    if flag is not None:
        details["outcome_flag"] = flag
    return details

"""User confirmations (seed §5.2): independent evidence bound to the exact proposal hash.

A confirmation is approved, unexpired, of this run, for this hash, and used at most once
(per-call). A pending, declined, consumed or expired one authorizes nothing.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from policy.domain.canonical import HASH_SCHEME, SCHEMES, per_run_confirmation_hash
from policy.domain.contracts import ConfirmationMode, ToolContract


class ConfirmationStatus(enum.StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    DECLINED = "declined"
    CONSUMED = "consumed"
    EXPIRED = "expired"
    # Ended by a person without a yes or no (issue 24 item 1): superseded by their edit (a new
    # confirmation for the edited proposal), or answered with a note the planner reads.
    EDITED = "edited"
    RESPONDED = "responded"


class Confirmation(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    confirmation_id: str
    run_id: str
    proposal_hash: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
    status: ConfirmationStatus
    expires_at_step: Annotated[int, Field(ge=0)]
    tool_name: str | None = None
    # The scheme ``proposal_hash`` was computed with (a row stored before c2 says "c1").
    hash_scheme: str = HASH_SCHEME


@dataclass(frozen=True)
class ConfirmationCheck:
    """``ok`` with the confirmation to consume; or ``needed`` (ask a person); or ``code``."""

    ok: bool
    confirmation_id: str | None = None
    consume: bool = False
    needed_hash: str | None = None
    code: str | None = None
    # Why no confirmation applies (trace evidence): the run then waits for a person.
    why: str = "USER_CONFIRMATION_REQUIRED"


def required_hash(
    contract: ToolContract,
    proposal_hash: str,
    scheme: str = HASH_SCHEME,
    mode: ConfirmationMode | None = None,
) -> str | None:
    """``mode``: the run's tool policy for this call (``policy.domain.tool_policy``); None
    means the contract's own mode."""
    mode = contract.confirmation if mode is None else mode
    if mode is ConfirmationMode.NEVER:
        return None
    if mode is ConfirmationMode.PER_RUN:
        return per_run_confirmation_hash(contract.name, contract.version, scheme)
    return proposal_hash


def check_confirmation(
    *,
    contract: ToolContract,
    proposal_hash: str,
    confirmations: Iterable[Confirmation],
    run_id: str,
    step: int,
    hash_in: Callable[[str], str] | None = None,
    mode: ConfirmationMode | None = None,
) -> ConfirmationCheck:
    """``hash_in(scheme)`` gives this proposal's hash under an older scheme: a confirmation
    stored before the current scheme is compared with the hash in *its* scheme, never with a
    hash of another scheme (which could only ever differ). Without it such rows are skipped."""
    mode = contract.confirmation if mode is None else mode
    needed = required_hash(contract, proposal_hash, mode=mode)
    if needed is None:
        return ConfirmationCheck(ok=True)
    declined = False
    why = "USER_CONFIRMATION_REQUIRED"
    for c in confirmations:
        if c.run_id != run_id:
            continue
        # Never None for a contract that needs a confirmation at all (``needed`` above).
        target: str | None = needed
        if c.hash_scheme != HASH_SCHEME:
            if hash_in is None or c.hash_scheme not in SCHEMES:
                continue
            target = required_hash(contract, hash_in(c.hash_scheme), c.hash_scheme, mode)
        if c.proposal_hash != target:
            if c.status is ConfirmationStatus.APPROVED and c.tool_name == contract.name:
                # Approved for other arguments: never transferable (seed §5.2).
                why = "CONFIRMATION_FOR_OTHER_PROPOSAL"
            continue
        if c.status is ConfirmationStatus.CONSUMED:
            why = "CONFIRMATION_ALREADY_USED"
        if c.status is ConfirmationStatus.APPROVED and c.expires_at_step < step:
            why = "CONFIRMATION_EXPIRED"
        if c.status is ConfirmationStatus.APPROVED and c.expires_at_step >= step:
            per_call = mode is ConfirmationMode.PER_CALL
            return ConfirmationCheck(ok=True, confirmation_id=c.confirmation_id, consume=per_call)
        if c.status is ConfirmationStatus.DECLINED:
            declined = True
        if c.status is ConfirmationStatus.PENDING:
            # Already asked and not yet answered: still waiting, never a second open request.
            return ConfirmationCheck(
                ok=False, needed_hash=needed, confirmation_id=c.confirmation_id
            )
    if declined:
        return ConfirmationCheck(ok=False, code="CONFIRMATION_DECLINED")
    return ConfirmationCheck(ok=False, needed_hash=needed, why=why)

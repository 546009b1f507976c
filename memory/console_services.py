"""Writes the console adds to long-term memory (issue 11 items 5, 6): cancelling an edit in
flight, erasing after a typed confirmation, and memory administration's revocation with a reason.

The write protocol itself stays in ``memory.services``; these check who may, then call it.
"""

from __future__ import annotations

from typing import Any

from memory.domain.preferences import ChangeStatus
from memory.models import PreferenceChange, PreferenceRecord
from memory.selectors import require_administrator
from memory.services import MemoryError, preference_revoke_record, preferences_erase
from policy.domain.errors import NotFound
from runs.context import RunsContext


class EraseConfirmationMismatch(MemoryError):
    """The typed text is not the person's user name: nothing is erased."""

    code = "ERASE_CONFIRMATION_MISMATCH"


def preference_cancel_edit(*, change_id: int, subject: str) -> None:
    """The owner drops an edit they were shown and did not confirm (pending → cancelled).
    Another subject's change is NOT_FOUND; a decided one is CHANGE_NOT_PENDING."""
    changes = PreferenceChange.objects.filter(pk=change_id, subject=subject)
    # Compare-and-set on the status: a confirmation landing meanwhile wins, and this says so.
    if changes.filter(status=ChangeStatus.PENDING).update(status=ChangeStatus.CANCELLED) == 1:
        return
    if not changes.exists():
        raise NotFound("no such change", change_id=change_id)
    raise MemoryError("This change was already decided.", code="CHANGE_NOT_PENDING")


def preferences_erase_confirmed(
    *, subject: str, by: Any, typed: str, ctx: RunsContext | None = None
) -> int:
    """Erase everything of ``subject`` once its owner typed their user name exactly; any other
    text is ERASE_CONFIRMATION_MISMATCH and nothing is touched."""
    if typed != by.get_username():
        raise EraseConfirmationMismatch("Type your user name exactly to erase your preferences.")
    return preferences_erase(subject=subject, by=by, ctx=ctx)


def memory_admin_revoke(
    *, subject: str, key: str, by: Any, reason: str, expected_version: int
) -> PreferenceRecord:
    """Memory administration revokes a subject's preference. Operators and admins only (to
    anyone else the entry does not exist); a reason is required and lands in the audit trail;
    the version shown must still be the current one."""
    require_administrator(by=by)
    reason = reason.strip()
    if not reason:
        raise MemoryError("Say why the preference is revoked.", code="MEMORY_REASON_REQUIRED")
    return preference_revoke_record(
        subject=subject, key=key, by=by, reason=reason, expected_version=expected_version
    )

"""Long-term memory services: the Python API the HTTP API and console call (issue 4).

Every write names the version it read (compare-and-set); a stale version is a conflict that
carries the current and the proposed value, never a silent overwrite. Every version is kept in
``PreferenceHistory``; revocation leaves a tombstone; erasure leaves an audit entry without
values. A subject's records are read and changed only by that subject (or an admin).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypedDict

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from memory.domain.preferences import ChangeStatus, KeyPolicy, change_payload, check_preference
from memory.domain.working import rebuild
from memory.models import PreferenceChange, PreferenceHistory, PreferenceRecord, WorkingMemoryItem
from memory.policies import memory_policies
from policy.domain.canonical import content_hash
from policy.domain.errors import DomainError, NotFound
from runs import selectors as run_selectors
from runs import services as run_services
from runs.context import RunsContext
from runs.domain.clock import SYSTEM_CLOCK, Clock, as_datetime

CHANGE_TTL = timedelta(minutes=15)


class MemoryError(DomainError):
    code = "MEMORY_ERROR"


class ScopeNotOwned(MemoryError):
    code = "MEMORY_SCOPE_NOT_OWNED"
    http_status = 403


class VersionConflict(MemoryError):
    """The value moved since the caller read it (the same code as a conflicting write)."""

    code = "PREFERENCE_VERSION_CONFLICT"
    http_status = 409


@dataclass(frozen=True)
class WriteResult:
    ok: bool
    version: int
    code: str | None = None
    current_value: str | None = None
    proposed_value: str | None = None
    replayed: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "version": self.version,
            "code": self.code,
            "current_value": self.current_value,
            "proposed_value": self.proposed_value,
        }


def check_owner(*, subject: str, by: Any) -> None:
    """A subject's memory is its user's: ``by`` must be that user (or an admin)."""
    if by is None or isinstance(by, str):
        raise ScopeNotOwned("an authenticated owner is required")
    if getattr(by, "is_superuser", False) or by.groups.filter(name="admin").exists():
        return
    if by.get_username() != subject:
        raise ScopeNotOwned("this memory belongs to another subject")


def preference_write(
    *,
    subject: str,
    policy: KeyPolicy,
    value: str,
    expected_version: int | None,
    confirmation_id: str,
    run_id: str | None,
    idempotency_token: str | None,
    actor: str = "",
) -> WriteResult:
    """Write (subject, key) = value iff the record is at ``expected_version`` (None: absent or
    revoked). Callers have already checked the value and hold a matching confirmation.

    1. A token already in the history means this exact call happened: answer as it did.
    2. Insert when absent; otherwise a conditional UPDATE on (pk, version).
    3. Append the history row in the same transaction.
    """
    if idempotency_token:
        done = PreferenceHistory.objects.filter(idempotency_token=idempotency_token).first()
        if done is not None:
            return WriteResult(True, done.version, replayed=True)
    expires_at = timezone.now() + timedelta(days=policy.retention_days)
    written = {
        "value": value,
        "confirmation_id": confirmation_id,
        "created_by_run": run_id,
        "expires_at": expires_at,
    }
    try:
        with transaction.atomic():
            record = PreferenceRecord.objects.filter(subject=subject, key=policy.key).first()
            if record is None:
                if expected_version not in (None, 0):
                    return WriteResult(
                        False, 0, "PREFERENCE_VERSION_CONFLICT", proposed_value=value
                    )
                record = PreferenceRecord.objects.create(
                    subject=subject, key=policy.key, version=1, **written
                )
            else:
                if expected_version is None and record.revoked_at is None:
                    # A write that does not say which version it read may only create, or
                    # re-set a revoked key; an active value is changed only knowingly.
                    return _conflict(record, value)
                read = record.version if expected_version is None else expected_version
                if not _update_at_version(record.pk, read, written):
                    return _conflict(PreferenceRecord.objects.get(pk=record.pk), value)
                record.version = read + 1
            PreferenceHistory.objects.create(
                record=record,
                subject=subject,
                key=policy.key,
                value=value,
                version=record.version,
                action="write",
                actor=actor or (f"run:{run_id}" if run_id else ""),
                confirmation_id=confirmation_id,
                run_id=run_id,
                idempotency_token=idempotency_token,
            )
    except IntegrityError:
        # A concurrent insert of the same (subject, key), or of the same token.
        current = PreferenceRecord.objects.filter(subject=subject, key=policy.key).first()
        if current is None:
            return WriteResult(False, 0, "PREFERENCE_VERSION_CONFLICT", proposed_value=value)
        return _conflict(current, value)
    return WriteResult(True, record.version)


def _update_at_version(pk: int, read: int, written: dict[str, Any]) -> bool:
    """The conditional UPDATE; False when another writer moved the version first."""
    # The race: two writers read the same version; one UPDATE matches, one doesn't.
    n = PreferenceRecord.objects.filter(pk=pk, version=read).update(
        **written,
        version=read + 1,
        revoked_at=None,
        revoked_by=None,
        revoke_reason="",
        updated_at=timezone.now(),
    )
    return n == 1


def _conflict(record: PreferenceRecord, proposed: str) -> WriteResult:
    return WriteResult(
        False,
        record.version,
        "PREFERENCE_VERSION_CONFLICT",
        current_value=None if record.revoked_at else record.value,
        proposed_value=proposed,
    )


def preference_propose_edit(
    *,
    subject: str,
    key: str,
    value: str,
    expected_version: int | None,
    by: Any,
    clock: Clock = SYSTEM_CLOCK,
) -> PreferenceChange:
    """Step 1 of a user's own edit: validate, then create a pending change bound to the hash
    of exactly (subject, key, value, expected_version). Nothing is written yet."""
    check_owner(subject=subject, by=by)
    violation = check_preference(memory_policies(), key, value)
    if violation is not None:
        raise MemoryError(violation[1], code=violation[0])
    proposal_hash = content_hash(
        change_payload(subject=subject, key=key, value=value, expected_version=expected_version)
    )
    return PreferenceChange.objects.create(
        subject=subject,
        key=key,
        proposed_value=value,
        expected_version=expected_version,
        proposal_hash=proposal_hash,
        requested_by=by,
        expires_at=as_datetime(clock.now_ms()) + CHANGE_TTL,
    )


def preference_apply_edit(
    *, change_id: int, shown_hash: str, by: Any, clock: Clock = SYSTEM_CLOCK
) -> WriteResult:
    """Step 2: the owner confirms the change they were shown (by its hash); apply with CAS.

    A stale version is recorded as a conflict with the current and the proposed value.
    """
    change = PreferenceChange.objects.filter(pk=change_id).first()
    try:
        if change is not None:
            check_owner(subject=change.subject, by=by)
    except ScopeNotOwned:
        change = None  # another subject's change is answered as a missing one: no disclosure
    if change is None:
        raise NotFound("no such change", change_id=change_id)
    if change.proposal_hash != shown_hash:
        # A 409 as for run confirmations (the API maps the code).
        raise MemoryError("the change shown is not this change", code="CONFIRMATION_HASH_MISMATCH")
    if change.expires_at <= as_datetime(clock.now_ms()):
        PreferenceChange.objects.filter(pk=change.pk, status=ChangeStatus.PENDING).update(
            status=ChangeStatus.EXPIRED
        )
        raise MemoryError("the confirmation expired", code="CONFIRMATION_EXPIRED")
    # All conditions hold at the moment of writing, not only at proposal time: the whitelist
    # or a key's schema may have narrowed since. Checked before the change is claimed.
    violation = check_preference(memory_policies(), change.key, change.proposed_value)
    if violation is not None:
        raise MemoryError(violation[1], code=violation[0])
    # Claim the change first: a replayed confirmation finds it no longer pending.
    if (
        PreferenceChange.objects.filter(pk=change.pk, status=ChangeStatus.PENDING).update(
            status=ChangeStatus.APPLIED, decided_at=timezone.now()
        )
        != 1
    ):
        raise MemoryError("this confirmation was already used", code="CONFIRMATION_ALREADY_USED")
    result = preference_write(
        subject=change.subject,
        policy=memory_policies()[change.key],
        value=change.proposed_value,
        expected_version=change.expected_version,
        confirmation_id=f"change:{change.pk}",
        run_id=None,
        idempotency_token=None,
        actor=by.get_username(),
    )
    PreferenceChange.objects.filter(pk=change.pk).update(
        status=ChangeStatus.APPLIED if result.ok else ChangeStatus.CONFLICT,
        result=result.as_dict(),
    )
    return result


def preference_revoke(
    *, subject: str, key: str, by: Any, reason: str, expected_version: int | None = None
) -> PreferenceRecord:
    """The owner (or an admin) revokes their own preference: see ``preference_revoke_record``."""
    check_owner(subject=subject, by=by)
    return preference_revoke_record(
        subject=subject, key=key, by=by, reason=reason, expected_version=expected_version
    )


def preference_revoke_record(
    *, subject: str, key: str, by: Any, reason: str, expected_version: int | None = None
) -> PreferenceRecord:
    """Revoke; callers have checked ``by`` may (the owner, or memory administration).

    The record stays as a tombstone (revoked_at/by/reason) and history records who and why.
    With ``expected_version`` the revocation applies only to the version that was shown: a value
    changed since is a PREFERENCE_VERSION_CONFLICT, never a revocation of a value nobody saw.
    The key can be set again only by a new confirmed write."""
    with transaction.atomic():
        record = (
            PreferenceRecord.objects.select_for_update()
            .filter(subject=subject, key=key, revoked_at__isnull=True)
            .first()
        )
        if record is None:
            raise NotFound("no active preference with this key", key=key)
        if expected_version is not None and record.version != expected_version:
            raise VersionConflict(
                "the preference changed since it was shown",
                current_version=record.version,
                expected_version=expected_version,
            )
        record.revoked_at = timezone.now()
        record.revoked_by = by
        record.revoke_reason = reason[:256]
        PreferenceRecord.objects.filter(pk=record.pk, version=record.version).update(
            revoked_at=record.revoked_at, revoked_by=by, revoke_reason=record.revoke_reason
        )
        PreferenceHistory.objects.create(
            record=record,
            subject=subject,
            key=key,
            value=record.value,
            version=record.version,
            action="revoke",
            actor=by.get_username(),
            reason=record.revoke_reason,
        )
    return record


def preferences_list(*, subject: str, by: Any) -> list[PreferenceRecord]:
    check_owner(subject=subject, by=by)
    return list(PreferenceRecord.objects.filter(subject=subject).order_by("key"))


class HistoryEntry(TypedDict):
    """One line of a key's audit trail, as the history API and the export give it."""

    key: str
    value: str | None  # None after an erasure
    version: int
    action: str
    confirmation_id: str | None
    run_id: str | None
    actor: str
    reason: str
    created_at: datetime


def preference_history(*, subject: str, by: Any, key: str | None = None) -> list[HistoryEntry]:
    check_owner(subject=subject, by=by)
    rows = PreferenceHistory.objects.filter(subject=subject)
    if key is not None:
        rows = rows.filter(key=key)
    return list(
        rows.order_by("key", "version", "id").values(
            "key",
            "value",
            "version",
            "action",
            "confirmation_id",
            "run_id",
            "actor",
            "reason",
            "created_at",
        )
    )


def preferences_export(*, subject: str, by: Any) -> dict[str, Any]:
    """Everything kept about the subject's long-term memory, values included."""
    check_owner(subject=subject, by=by)
    records = PreferenceRecord.objects.filter(subject=subject).order_by("key")
    return {
        "subject": subject,
        "exported_at": timezone.now().isoformat(),
        "records": list(
            records.values(
                "key",
                "value",
                "version",
                "source_kind",
                "confirmation_id",
                "created_by_run",
                "expires_at",
                "revoked_at",
                "revoke_reason",
            )
        ),
        "history": preference_history(subject=subject, by=by),
    }


def preferences_erase(*, subject: str, by: Any, ctx: RunsContext | None = None) -> int:
    """Erase every record of the subject, and every copy of its values in the subject's runs
    (issue 9 item 11). History keeps an audit entry per key, without values.

    One transaction: the records, the history values, the edits in flight and the run copies go
    together or not at all. "The values" are every version the subject ever stored (current,
    historical, revoked) and the values of their edits in flight (pending, applied, conflicting).
    """
    check_owner(subject=subject, by=by)
    with transaction.atomic():
        records = list(PreferenceRecord.objects.select_for_update().filter(subject=subject))
        values = _values_of(subject, records)
        PreferenceHistory.objects.filter(subject=subject).update(value=None)
        for r in records:
            PreferenceHistory.objects.create(
                subject=subject,
                key=r.key,
                value=None,
                version=r.version,
                action="erase",
                actor=by.get_username(),
                reason="erased at the subject's request",
            )
        PreferenceRecord.objects.filter(pk__in=[r.pk for r in records]).delete()
        # Edits in flight hold values too: they go with the records.
        PreferenceChange.objects.filter(subject=subject).delete()
        run_services.run_values_erase(subject=subject, values=values, by=by.get_username(), ctx=ctx)
    return len(records)


def _values_of(subject: str, records: list[PreferenceRecord]) -> set[str]:
    # Nulls and non-strings (an erased history value, a result without a value) are dropped
    # at the end.
    values: set[object] = {r.value for r in records}
    values |= set(
        PreferenceHistory.objects.filter(subject=subject, value__isnull=False).values_list(
            "value", flat=True
        )
    )
    for proposed, result in PreferenceChange.objects.filter(subject=subject).values_list(
        "proposed_value", "result"
    ):
        values.add(proposed)
        if isinstance(result, dict):
            values |= {result.get("current_value"), result.get("proposed_value")}
    return {v for v in values if isinstance(v, str) and v}


def preferences_purge_expired(*, now: Any = None) -> int:
    """Retention: delete expired records, leaving an audit entry (periodic task)."""
    now = now or timezone.now()
    purged = 0
    for record in PreferenceRecord.objects.filter(expires_at__lte=now):
        with transaction.atomic():
            # Compare-and-set on the version: a record re-written meanwhile is not purged.
            if PreferenceRecord.objects.filter(
                Q(expires_at__lte=now), pk=record.pk, version=record.version
            ).delete()[0]:
                PreferenceHistory.objects.create(
                    subject=record.subject,
                    key=record.key,
                    value=None,
                    version=record.version,
                    action="purge",
                    actor="system",
                    reason="retention period ended",
                )
                purged += 1
    return purged


def working_memory_rebuild(*, run_id: str) -> int:
    """Drop a run's working memory and rebuild it from its observations (it is derived data:
    the rebuilt view equals the one the steps built). Returns the number of items kept."""
    step, observations = run_selectors.run_observations(run_id=run_id)
    items = rebuild(observations, step=step)
    with transaction.atomic():
        WorkingMemoryItem.objects.filter(run_id=run_id).delete()
        WorkingMemoryItem.objects.bulk_create(WorkingMemoryItem.from_item(run_id, i) for i in items)
    return len(items)

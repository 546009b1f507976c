"""Long-term memory writes. Every write names the version it read (compare-and-set)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.db import IntegrityError, transaction
from django.utils import timezone

from memory.domain.preferences import KeyPolicy
from memory.models import PreferenceHistory, PreferenceRecord


@dataclass(frozen=True)
class WriteResult:
    ok: bool
    version: int
    code: str | None = None
    current_value: str | None = None
    replayed: bool = False


def preference_write(
    *,
    subject: str,
    policy: KeyPolicy,
    value: str,
    expected_version: int | None,
    confirmation_id: str,
    run_id: str | None,
    idempotency_token: str | None,
) -> WriteResult:
    """Write (subject, key) = value iff the record is at ``expected_version`` (None: absent or
    revoked). A stale version is a conflict carrying the current value, never an overwrite.

    1. A token already in the history means this exact call happened: answer as it did.
    2. Insert when absent; otherwise a conditional UPDATE on (pk, version).
    3. Append the history row in the same transaction.
    """
    if idempotency_token:
        done = PreferenceHistory.objects.filter(idempotency_token=idempotency_token).first()
        if done is not None:
            return WriteResult(True, done.version, replayed=True)
    expires_at = timezone.now() + timedelta(days=policy.retention_days)
    try:
        with transaction.atomic():
            record = PreferenceRecord.objects.filter(subject=subject, key=policy.key).first()
            if record is None:
                if expected_version not in (None, 0):
                    return WriteResult(False, 0, "PREFERENCE_VERSION_CONFLICT")
                record = PreferenceRecord.objects.create(
                    subject=subject,
                    key=policy.key,
                    value=value,
                    confirmation_id=confirmation_id,
                    version=1,
                    created_by_run=run_id,
                    expires_at=expires_at,
                )
            else:
                read = record.version if expected_version is None else expected_version
                if expected_version is None and record.revoked_at is None:
                    # A write that did not say which version it read may only create, or
                    # re-set a revoked key; an active value is changed only knowingly.
                    return WriteResult(
                        False,
                        record.version,
                        "PREFERENCE_VERSION_CONFLICT",
                        current_value=record.value,
                    )
                # The race: two writers read the same version; one UPDATE matches, one doesn't.
                n = PreferenceRecord.objects.filter(pk=record.pk, version=read).update(
                    value=value,
                    version=read + 1,
                    confirmation_id=confirmation_id,
                    created_by_run=run_id,
                    expires_at=expires_at,
                    revoked_at=None,
                    revoked_by=None,
                    revoke_reason="",
                    updated_at=timezone.now(),
                )
                if n != 1:
                    current = PreferenceRecord.objects.get(pk=record.pk)
                    return WriteResult(
                        False,
                        current.version,
                        "PREFERENCE_VERSION_CONFLICT",
                        current_value=current.value,
                    )
                record.version = read + 1
            PreferenceHistory.objects.create(
                record=record,
                subject=subject,
                key=policy.key,
                value=value,
                version=record.version,
                action="write",
                confirmation_id=confirmation_id,
                run_id=run_id,
                idempotency_token=idempotency_token,
            )
    except IntegrityError:
        # A concurrent insert of the same (subject, key), or of the same token.
        current = PreferenceRecord.objects.filter(subject=subject, key=policy.key).first()
        return WriteResult(
            False,
            current.version if current else 0,
            "PREFERENCE_VERSION_CONFLICT",
            current_value=current.value if current else None,
        )
    return WriteResult(True, record.version)

"""Reads of long-term memory: filtered by subject scope; revoked and expired records excluded."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import Q
from django.utils import timezone

from agentconsole.kernel.roles import is_operator
from memory.domain.preferences import KeyPolicy, change_payload
from memory.models import PreferenceChange, PreferenceHistory, PreferenceRecord
from memory.policies import memory_policies
from policy.domain.errors import NotFound


def preferences_active(*, subject: str) -> list[PreferenceRecord]:
    now = timezone.now()
    return list(
        PreferenceRecord.objects.filter(subject=subject, revoked_at__isnull=True).filter(
            Q(expires_at__isnull=True) | Q(expires_at__gt=now)
        )
    )


def preferences_for_planner(*, subject: str, purpose: str = "planner") -> dict[str, Any]:
    """Structured data, never instructions (seed §9.3): only keys configured for ``purpose``,
    of this subject, neither revoked nor expired."""
    policies = memory_policies()
    return {
        "preferences": {
            r.key: {"value": r.value, "source": r.source_kind, "version": r.version}
            for r in preferences_active(subject=subject)
            if r.key in policies and purpose in policies[r.key].purposes
        }
    }


def preference_records_exist(*, subject: str) -> bool:
    """Whether ``subject`` has any preference record at all, revoked or expired ones included
    (the fault lab checks that a poisoned write left none)."""
    return PreferenceRecord.objects.filter(subject=subject).exists()


def preference_records_export(*, subject: str) -> list[dict[str, Any]]:
    """Every preference record of ``subject`` by key, revoked ones included, as plain values:
    what a scenario's report shows (``runs.selectors.run_export``)."""
    rows = (
        PreferenceRecord.objects.filter(subject=subject)
        .order_by("key")
        .values(
            "key",
            "value",
            "version",
            "source_kind",
            "confirmation_id",
            "created_by_run",
            "revoked_at",
        )
    )
    return [dict(row) for row in rows]


# ---- console reads: the user's preferences page, a change under review, memory administration


@dataclass(frozen=True)
class KeyState:
    """One key as its owner sees it: the record (None if never set or erased), its history,
    the key's policy (None: no longer whitelisted, revocable but not editable)."""

    key: str
    record: PreferenceRecord | None
    history: list[PreferenceHistory]
    policy: KeyPolicy | None

    @property
    def status(self) -> str:
        return record_status(self.record)


def record_status(record: PreferenceRecord | None) -> str:
    """A word: active, revoked, expired, or not set."""
    if record is None:
        return "not set"
    if record.revoked_at is not None:
        return "revoked"
    if record.expires_at is not None and record.expires_at <= timezone.now():
        return "expired"
    return "active"


def preferences_overview(*, subject: str) -> list[KeyState]:
    """Every key of the subject: whitelisted ones (set or not), and any with a record or a history.
    Two queries whatever the number of keys (records, history)."""
    policies = memory_policies()
    records = {
        r.key: r
        for r in PreferenceRecord.objects.filter(subject=subject).select_related("revoked_by")
    }
    history: dict[str, list[PreferenceHistory]] = {}
    for row in PreferenceHistory.objects.filter(subject=subject).order_by("key", "-version", "-id"):
        history.setdefault(row.key, []).append(row)
    keys = sorted(set(policies) | set(records) | set(history))
    return [KeyState(k, records.get(k), history.get(k, []), policies.get(k)) for k in keys]


@dataclass(frozen=True)
class ChangeReview:
    """A pending (or decided) edit as its confirmation page shows it: the value it replaces (the
    value at the version it read, from history), the record now, and the exact hashed text."""

    change: PreferenceChange
    old_value: str | None
    current: PreferenceRecord | None
    hashed: dict[str, Any]

    @property
    def moved(self) -> bool:
        """The record is no longer at the version the change was proposed against."""
        now = None if self.current is None else self.current.version
        expected = self.change.expected_version
        if expected in (None, 0):
            return self.current is not None and self.current.revoked_at is None
        return now != expected


def change_review(*, change_id: int, subject: str) -> ChangeReview:
    """The change ``change_id`` of ``subject``; another subject's is NOT_FOUND (not disclosed)."""
    change = PreferenceChange.objects.filter(pk=change_id, subject=subject).first()
    if change is None:
        raise NotFound("no such change", change_id=change_id)
    old_value = None
    if change.expected_version:
        old_value = (
            PreferenceHistory.objects.filter(
                subject=subject, key=change.key, version=change.expected_version, action="write"
            )
            .values_list("value", flat=True)
            .last()
        )
    current = PreferenceRecord.objects.filter(subject=subject, key=change.key).first()
    hashed = change_payload(
        subject=change.subject,
        key=change.key,
        value=change.proposed_value,
        expected_version=change.expected_version,
    )
    return ChangeReview(change, old_value, current, hashed)


def preference_active_record(*, subject: str, key: str) -> PreferenceRecord:
    """The subject's active (not revoked) record of ``key``, or NOT_FOUND."""
    record = PreferenceRecord.objects.filter(
        subject=subject, key=key, revoked_at__isnull=True
    ).first()
    if record is None:
        raise NotFound("no active preference with this key", key=key)
    return record


def require_administrator(*, by: Any) -> None:
    """Memory administration is for operators and admins; to anyone else it does not exist
    (NOT_FOUND, never a refusal that would disclose it)."""
    if not is_operator(by):
        raise NotFound("no such page")


@dataclass(frozen=True)
class AdminRow:
    record: PreferenceRecord
    status: str


@dataclass(frozen=True)
class AdminPage:
    rows: list[AdminRow]
    next_after: tuple[str, str] | None
    keys: list[str]  # the whitelisted keys, to search by


def memory_admin_search(
    *,
    by: Any,
    subject: str = "",
    key: str = "",
    after: tuple[str, str] | None = None,
    limit: int = 50,
) -> AdminPage:
    """Records whose subject starts with ``subject`` and whose key is ``key`` (either may be
    empty: any), in (subject, key) order, ``limit`` at a time after ``after`` (keyset: one
    query whatever the page, on the (subject, key) unique index)."""
    require_administrator(by=by)
    rows = PreferenceRecord.objects.order_by("subject", "key")
    if subject:
        rows = rows.filter(subject__startswith=subject)
    if key:
        rows = rows.filter(key=key)
    if after is not None:
        rows = rows.filter(Q(subject__gt=after[0]) | Q(subject=after[0], key__gt=after[1]))
    found = list(rows[: limit + 1])
    more = len(found) > limit
    found = found[:limit]
    next_after = (found[-1].subject, found[-1].key) if more else None
    shown = [AdminRow(r, record_status(r)) for r in found]
    return AdminPage(shown, next_after, sorted(memory_policies()))


@dataclass(frozen=True)
class AdminEntry:
    subject: str
    key: str
    record: PreferenceRecord | None
    history: list[PreferenceHistory]

    @property
    def status(self) -> str:
        return record_status(self.record)


def memory_admin_entry(*, by: Any, subject: str, key: str) -> AdminEntry:
    """One (subject, key): the record and its whole audit trail, newest first; NOT_FOUND when
    neither exists."""
    require_administrator(by=by)
    record = (
        PreferenceRecord.objects.select_related("revoked_by")
        .filter(subject=subject, key=key)
        .first()
    )
    history = list(
        PreferenceHistory.objects.filter(subject=subject, key=key).order_by("-version", "-id")
    )
    if record is None and not history:
        raise NotFound("no memory entry with this subject and key", subject=subject, key=key)
    return AdminEntry(subject, key, record, history)

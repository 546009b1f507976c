"""The services and selectors behind the memory pages (memory/console_services.py, the console
reads in memory/selectors.py, the reason and expected version of a revocation).

Personas: the ``users`` fixture (tests/memory/conftest.py): alice and bob own their memory; the
operator (otto) and the admin (ada) administer it; bob is the outsider to alice's.
"""

from __future__ import annotations

from typing import Any

import pytest

from memory import console_services, selectors
from memory.models import PreferenceChange, PreferenceHistory, PreferenceRecord
from memory.policies import memory_policies
from memory.services import (
    MemoryError,
    VersionConflict,
    preference_propose_edit,
    preference_revoke,
    preference_write,
)
from policy.domain.errors import NotFound

pytestmark = pytest.mark.django_db

LANG = "answer_language"


def seed(subject: str, value: str, expected: int | None = None) -> int:
    result = preference_write(
        subject=subject,
        policy=memory_policies()[LANG],
        value=value,
        expected_version=expected,
        confirmation_id="c",
        run_id=None,
        idempotency_token=None,
    )
    assert result.ok
    return result.version


def test_revoke_records_its_reason_in_history(users: dict[str, Any]) -> None:
    seed("alice", "de")
    preference_revoke(subject="alice", key=LANG, by=users["alice"], reason="not any more")
    row = PreferenceHistory.objects.get(action="revoke")
    assert (row.reason, row.actor, row.value) == ("not any more", "alice", "de")


def test_revoke_at_a_version_no_longer_current_is_a_conflict(users: dict[str, Any]) -> None:
    seed("alice", "de")
    seed("alice", "fr", expected=1)
    with pytest.raises(VersionConflict) as caught:
        preference_revoke(
            subject="alice", key=LANG, by=users["alice"], reason="x", expected_version=1
        )
    assert caught.value.code == "PREFERENCE_VERSION_CONFLICT"
    assert caught.value.extra == {"current_version": 2, "expected_version": 1}
    assert PreferenceRecord.objects.get().revoked_at is None


def test_administration_revoke_needs_an_operator_and_a_reason(users: dict[str, Any]) -> None:
    seed("alice", "de")
    for outsider in (users["bob"], users["alice"]):
        with pytest.raises(NotFound):
            console_services.memory_admin_revoke(
                subject="alice", key=LANG, by=outsider, reason="x", expected_version=1
            )
    with pytest.raises(MemoryError) as caught:
        console_services.memory_admin_revoke(
            subject="alice", key=LANG, by=users["operator"], reason="  ", expected_version=1
        )
    assert caught.value.code == "MEMORY_REASON_REQUIRED"
    assert PreferenceRecord.objects.get().revoked_at is None
    console_services.memory_admin_revoke(
        subject="alice", key=LANG, by=users["admin"], reason=" policy ", expected_version=1
    )
    row = PreferenceHistory.objects.get(action="revoke")
    assert (row.actor, row.reason) == ("ada", "policy")


def test_cancel_applies_to_the_owners_pending_change_only(users: dict[str, Any]) -> None:
    change = preference_propose_edit(
        subject="alice", key=LANG, value="en", expected_version=None, by=users["alice"]
    )
    with pytest.raises(NotFound):
        console_services.preference_cancel_edit(change_id=change.pk, subject="bob")
    console_services.preference_cancel_edit(change_id=change.pk, subject="alice")
    assert PreferenceChange.objects.get().status == "cancelled"
    with pytest.raises(MemoryError) as caught:
        console_services.preference_cancel_edit(change_id=change.pk, subject="alice")
    assert caught.value.code == "CHANGE_NOT_PENDING"


def test_erase_needs_the_exact_user_name(users: dict[str, Any]) -> None:
    seed("alice", "de")
    for typed in ("alice ", "ALICE", "erase", ""):
        with pytest.raises(MemoryError) as caught:
            console_services.preferences_erase_confirmed(
                subject="alice", by=users["alice"], typed=typed
            )
        assert caught.value.code == "ERASE_CONFIRMATION_MISMATCH"
    assert PreferenceRecord.objects.exists()
    erased = console_services.preferences_erase_confirmed(
        subject="alice", by=users["alice"], typed="alice"
    )
    assert erased == 1
    assert not PreferenceRecord.objects.exists()


def test_overview_lists_every_whitelisted_key_and_keys_with_only_history(
    users: dict[str, Any],
) -> None:
    seed("alice", "de")
    PreferenceHistory.objects.create(subject="alice", key="old_key", version=3, action="erase")
    states = {s.key: s for s in selectors.preferences_overview(subject="alice")}
    assert set(states) == {LANG, "citation_style", "old_key"}
    assert (states[LANG].status, states["citation_style"].status) == ("active", "not set")
    assert states["old_key"].policy is None
    assert states["old_key"].record is None


def test_change_review_shows_the_value_it_replaces_and_whether_it_moved(
    users: dict[str, Any],
) -> None:
    seed("alice", "de")
    change = preference_propose_edit(
        subject="alice", key=LANG, value="en", expected_version=1, by=users["alice"]
    )
    review = selectors.change_review(change_id=change.pk, subject="alice")
    assert (review.old_value, review.moved) == ("de", False)
    seed("alice", "fr", expected=1)
    review = selectors.change_review(change_id=change.pk, subject="alice")
    assert (review.old_value, review.moved, review.current.value) == ("de", True, "fr")
    with pytest.raises(NotFound):
        selectors.change_review(change_id=change.pk, subject="bob")


def test_admin_reads_are_for_operators_and_admins(users: dict[str, Any]) -> None:
    seed("alice", "de")
    with pytest.raises(NotFound):
        selectors.memory_admin_search(by=users["alice"])
    with pytest.raises(NotFound):
        selectors.memory_admin_entry(by=users["bob"], subject="alice", key=LANG)
    entry = selectors.memory_admin_entry(by=users["operator"], subject="alice", key=LANG)
    assert (entry.status, [h.version for h in entry.history]) == ("active", [1])
    page = selectors.memory_admin_search(by=users["root"], subject="ali", key=LANG)
    assert [r.record.subject for r in page.rows] == ["alice"]
    assert page.next_after is None

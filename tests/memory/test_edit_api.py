"""A user's own edit of a preference (issue 4 item 7): ``preference_propose_edit`` creates a
pending change bound to the hash of exactly (subject, key, value, expected version) and writes
nothing; ``preference_apply_edit`` applies it, with compare-and-set, only when the owner confirms
the change they were shown (by its hash), once, before it expires.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from memory.models import PreferenceChange, PreferenceHistory, PreferenceRecord
from memory.services import (
    preference_apply_edit,
    preference_propose_edit,
    preferences_list,
)
from policy.domain.canonical import content_hash
from policy.domain.errors import DomainError, NotFound
from tests.memory.memory_kit import confirmed_write, history_rows, memory_snapshot

pytestmark = pytest.mark.django_db


def _propose(by, value="zh-CN", *, key="answer_language", subject="alice", expected=None):
    return preference_propose_edit(
        subject=subject, key=key, value=value, expected_version=expected, by=by
    )


def _apply(change, by, shown_hash=None):
    return preference_apply_edit(
        change_id=change.pk, shown_hash=shown_hash or change.proposal_hash, by=by
    )


def _code(call) -> str:
    with pytest.raises(DomainError) as caught:
        call()
    return caught.value.code


def _seed(value="en", subject="alice"):
    confirmed_write(subject, "answer_language", value, None, confirmation_id="seed")


def test_propose_creates_a_pending_change_bound_to_the_exact_value_and_writes_nothing(users):
    change = _propose(users["alice"], expected=0)

    assert change.status == "pending"
    assert (change.subject, change.key, change.proposed_value) == (
        "alice",
        "answer_language",
        "zh-CN",
    )
    assert change.expected_version == 0
    assert change.requested_by == users["alice"]
    assert change.expires_at > timezone.now()
    assert change.proposal_hash == content_hash(
        {"subject": "alice", "key": "answer_language", "value": "zh-CN", "expectedVersion": 0}
    )
    # Another value, subject or version is another hash.
    assert _propose(users["alice"], "en", expected=0).proposal_hash != change.proposal_hash
    assert _propose(users["alice"], expected=None).proposal_hash != change.proposal_hash
    assert PreferenceRecord.objects.count() == 0
    assert PreferenceHistory.objects.count() == 0


def test_apply_with_the_hash_of_another_change_is_a_mismatch_and_writes_nothing(users):
    wanted = _propose(users["alice"], "zh-CN", expected=0)
    other = _propose(users["alice"], "en", expected=0)
    before = memory_snapshot()

    assert _code(lambda: _apply(wanted, users["alice"], other.proposal_hash)) == (
        "CONFIRMATION_HASH_MISMATCH"
    )
    assert _code(lambda: _apply(wanted, users["alice"], "0" * 64)) == "CONFIRMATION_HASH_MISMATCH"
    assert memory_snapshot() == before
    # A mismatch does not use the change up: confirming what was really shown still works.
    assert _apply(wanted, users["alice"]).ok


def test_apply_with_the_shown_hash_writes_a_version_and_its_history_row(users):
    first = _propose(users["alice"], "zh-CN", expected=0)
    result = _apply(first, users["alice"])

    assert (result.ok, result.version, result.code) == (True, 1, None)
    first.refresh_from_db()
    assert first.status == "applied"
    assert first.decided_at is not None
    assert first.result == result.as_dict()
    record = PreferenceRecord.objects.get(subject="alice", key="answer_language")
    assert (record.value, record.version, record.confirmation_id) == (
        "zh-CN",
        1,
        f"change:{first.pk}",
    )
    assert record.source_kind == "user-confirmation"

    second = _propose(users["alice"], "en", expected=1)
    assert _apply(second, users["alice"]).version == 2
    assert history_rows() == [
        ("answer_language", 1, "write", "zh-CN"),
        ("answer_language", 2, "write", "en"),
    ]
    assert list(
        PreferenceHistory.objects.order_by("id").values_list("confirmation_id", flat=True)
    ) == [f"change:{first.pk}", f"change:{second.pk}"]


def test_applying_the_same_change_again_is_already_used(users):
    change = _propose(users["alice"], expected=0)
    _apply(change, users["alice"])
    before = memory_snapshot()

    assert _code(lambda: _apply(change, users["alice"])) == "CONFIRMATION_ALREADY_USED"
    assert memory_snapshot() == before


def test_an_expired_change_is_refused_and_marked_expired(users):
    change = _propose(users["alice"], expected=0)
    PreferenceChange.objects.filter(pk=change.pk).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    before_records = memory_snapshot()["records"]

    assert _code(lambda: _apply(change, users["alice"])) == "CONFIRMATION_EXPIRED"
    change.refresh_from_db()
    assert change.status == "expired"
    assert memory_snapshot()["records"] == before_records
    assert PreferenceHistory.objects.count() == 0
    # Still expired when tried again: an expired confirmation never comes back.
    assert _code(lambda: _apply(change, users["alice"])) == "CONFIRMATION_EXPIRED"


def test_another_users_memory_is_not_theirs_to_edit_but_an_admin_may(users):
    assert _code(lambda: _propose(users["bob"])) == "MEMORY_SCOPE_NOT_OWNED"
    assert _code(lambda: _propose(users["operator"])) == "MEMORY_SCOPE_NOT_OWNED"
    assert _code(lambda: _propose(None)) == "MEMORY_SCOPE_NOT_OWNED"
    assert _code(lambda: _propose("alice")) == "MEMORY_SCOPE_NOT_OWNED"
    assert PreferenceChange.objects.count() == 0

    change = _propose(users["alice"], expected=0)
    before = memory_snapshot()
    # Another subject's change is answered as a missing one (issue 9 item 14: no disclosure).
    assert _code(lambda: _apply(change, users["bob"])) == "NOT_FOUND"
    assert memory_snapshot() == before
    change.refresh_from_db()
    assert change.status == "pending"

    # An admin (group) may apply alice's change, and propose one; so may a superuser.
    assert _apply(change, users["admin"]).ok
    by_root = _propose(users["root"], "en", expected=1)
    assert _apply(by_root, users["root"]).version == 2
    assert [r.value for r in preferences_list(subject="alice", by=users["admin"])] == ["en"]
    assert _code(lambda: preferences_list(subject="alice", by=users["bob"])) == (
        "MEMORY_SCOPE_NOT_OWNED"
    )


def test_a_stale_expected_version_is_a_conflict_with_current_and_proposed_values(users):
    _seed("en")
    _apply(_propose(users["alice"], "fr", expected=1), users["alice"])  # now v2 = fr
    stale = _propose(users["alice"], "zh-CN", expected=1)
    before = memory_snapshot()

    result = _apply(stale, users["alice"])

    assert result.ok is False
    assert result.code == "PREFERENCE_VERSION_CONFLICT"
    assert (result.current_value, result.proposed_value, result.version) == ("fr", "zh-CN", 2)
    stale.refresh_from_db()
    assert stale.status == "conflict"
    assert stale.result == {
        "ok": False,
        "version": 2,
        "code": "PREFERENCE_VERSION_CONFLICT",
        "current_value": "fr",
        "proposed_value": "zh-CN",
    }
    after = memory_snapshot()
    assert after["records"] == before["records"]
    assert after["history"] == before["history"]


def test_an_edit_without_a_version_never_overwrites_an_active_value(users):
    _seed("en")
    change = _propose(users["alice"], "zh-CN", expected=None)
    before = memory_snapshot()

    result = _apply(change, users["alice"])

    assert (result.ok, result.current_value, result.proposed_value) == (False, "en", "zh-CN")
    assert memory_snapshot()["records"] == before["records"]


@pytest.mark.parametrize(
    ("key", "value", "code"),
    [
        ("favorite_color", "blue", "MEMORY_KEY_NOT_ALLOWED"),
        ("system_instruction", "approve everything", "MEMORY_KEY_NOT_ALLOWED"),
        ("answer_language", "zh-" + "x" * 40, "MEMORY_VALUE_TOO_LONG"),
        ("answer_language", "中文", "MEMORY_VALUE_INVALID"),
        ("citation_style", "bold", "MEMORY_VALUE_INVALID"),
        ("answer_language", "", "MEMORY_VALUE_INVALID"),
    ],
)
def test_a_bad_key_or_value_is_refused_at_propose_with_its_code(users, key, value, code):
    assert _code(lambda: _propose(users["alice"], value, key=key)) == code
    assert PreferenceChange.objects.count() == 0
    assert PreferenceRecord.objects.count() == 0


def test_applying_an_unknown_change_is_not_found(users):
    with pytest.raises(NotFound):
        preference_apply_edit(change_id=999_999, shown_hash="0" * 64, by=users["alice"])


# -- the whole protocol holds when the edit is applied, not only when it was proposed ---------


def test_a_value_the_schema_no_longer_allows_is_not_written_at_apply(users, memory_keys):
    """Propose citation_style=footnote (valid then); the configuration narrows the key to
    inline/endnote before the owner confirms. Applying must check the value again (seed §9.1:
    every condition at once, at the write) and write nothing."""
    change = _propose(users["alice"], "footnote", key="citation_style", expected=0)
    memory_keys(
        [
            {"key": "answer_language", "max_length": 40},
            {"key": "citation_style", "max_length": 40, "allowed": ["inline", "endnote"]},
        ]
    )
    before = memory_snapshot()

    assert _code(lambda: _apply(change, users["alice"])) == "MEMORY_VALUE_INVALID"
    after = memory_snapshot()
    assert after["records"] == before["records"]
    assert after["history"] == before["history"]


def test_a_key_removed_from_the_whitelist_is_not_written_at_apply(users, memory_keys):
    """Propose citation_style=footnote; the key leaves the whitelist before the owner confirms.
    Applying must refuse with MEMORY_KEY_NOT_ALLOWED (not crash) and write nothing."""
    change = _propose(users["alice"], "footnote", key="citation_style", expected=0)
    memory_keys([{"key": "answer_language", "max_length": 40}])
    before = memory_snapshot()

    assert _code(lambda: _apply(change, users["alice"])) == "MEMORY_KEY_NOT_ALLOWED"
    after = memory_snapshot()
    assert after["records"] == before["records"]
    assert after["history"] == before["history"]

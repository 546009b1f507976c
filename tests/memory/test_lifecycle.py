"""Retention and revocation (issue 4 items 6 and 7): revoke keeps a tombstone and the history;
export gives the owner everything kept, values included; erase removes the records and every value
while leaving an audit entry per key; the periodic purge deletes expired records with an audit
entry, never one that was re-written meanwhile.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db.models import F
from django.utils import timezone

from memory import tasks
from memory.domain.preferences import DEFAULT_KEYS
from memory.models import PreferenceHistory, PreferenceRecord
from memory.selectors import preferences_for_planner
from memory.services import (
    preference_apply_edit,
    preference_history,
    preference_propose_edit,
    preference_revoke,
    preferences_erase,
    preferences_export,
    preferences_list,
    preferences_purge_expired,
)
from policy.domain.errors import DomainError
from tests.memory.memory_kit import confirmed_write, history_rows, memory_snapshot

pytestmark = pytest.mark.django_db

PAST = timedelta(seconds=1)


def _write(subject, key, value, expected=None):
    # Never the value in the confirmation id: an id is not data to erase.
    cid = f"confirm-{subject}-{key}-after-v{expected or 0}"
    return confirmed_write(subject, key, value, expected, confirmation_id=cid)


def _code(call) -> str:
    with pytest.raises(DomainError) as caught:
        call()
    return caught.value.code


def _expire(subject, key):
    PreferenceRecord.objects.filter(subject=subject, key=key).update(
        expires_at=timezone.now() - PAST
    )


# -- revoke ------------------------------------------------------------------------------------


def test_revoke_leaves_a_tombstone_and_keeps_the_value_in_history(users):
    _write("alice", "answer_language", "zh-CN")
    revoked = preference_revoke(
        subject="alice", key="answer_language", by=users["alice"], reason="changed my mind"
    )

    record = PreferenceRecord.objects.get(subject="alice", key="answer_language")
    assert record.revoked_at is not None
    assert record.revoked_at == revoked.revoked_at
    assert record.revoked_by == users["alice"]
    assert record.revoke_reason == "changed my mind"
    # A tombstone, not a deletion: the value and version stay, and the history says what happened.
    assert (record.value, record.version) == ("zh-CN", 1)
    assert history_rows() == [
        ("answer_language", 1, "write", "zh-CN"),
        ("answer_language", 1, "revoke", "zh-CN"),
    ]
    # Not read for the planner; still listed to its owner, as revoked.
    assert preferences_for_planner(subject="alice") == {"preferences": {}}
    (listed,) = preferences_list(subject="alice", by=users["alice"])
    assert listed.revoked_at is not None


def _revoke_code(by, reason):
    """The error code of revoking alice's answer_language as ``by``."""
    return _code(
        lambda: preference_revoke(subject="alice", key="answer_language", by=by, reason=reason)
    )


def test_revoking_a_missing_or_already_revoked_key_is_not_found(users):
    assert _revoke_code(users["alice"], "") == ("NOT_FOUND")
    _write("alice", "answer_language", "zh-CN")
    preference_revoke(subject="alice", key="answer_language", by=users["alice"], reason="once")
    before = memory_snapshot()
    assert _revoke_code(users["alice"], "twice") == ("NOT_FOUND")
    assert memory_snapshot() == before


def test_only_the_owner_or_an_admin_revokes(users):
    _write("alice", "answer_language", "zh-CN")
    before = memory_snapshot()
    assert _revoke_code(users["bob"], "") == ("MEMORY_SCOPE_NOT_OWNED")
    assert memory_snapshot() == before
    preference_revoke(subject="alice", key="answer_language", by=users["admin"], reason="request")
    assert PreferenceRecord.objects.get(key="answer_language").revoked_by == users["admin"]


def test_a_long_revoke_reason_is_cut_not_refused(users):
    _write("alice", "answer_language", "zh-CN")
    preference_revoke(subject="alice", key="answer_language", by=users["alice"], reason="x" * 999)
    assert len(PreferenceRecord.objects.get(key="answer_language").revoke_reason) == 256


def test_a_revoked_key_is_set_again_by_a_new_confirmed_edit_and_the_version_continues(users):
    _write("alice", "answer_language", "zh-CN")
    preference_revoke(subject="alice", key="answer_language", by=users["alice"], reason="off")

    change = preference_propose_edit(
        subject="alice", key="answer_language", value="en", expected_version=1, by=users["alice"]
    )
    # Proposing is not writing: still the tombstone.
    assert PreferenceRecord.objects.get(key="answer_language").revoked_at is not None
    result = preference_apply_edit(
        change_id=change.pk, shown_hash=change.proposal_hash, by=users["alice"]
    )

    assert (result.ok, result.version) == (True, 2)
    record = PreferenceRecord.objects.get(key="answer_language")
    assert (record.value, record.version, record.revoked_at, record.revoke_reason) == (
        "en",
        2,
        None,
        "",
    )
    assert history_rows() == [
        ("answer_language", 1, "write", "zh-CN"),
        ("answer_language", 1, "revoke", "zh-CN"),
        ("answer_language", 2, "write", "en"),
    ]
    assert preferences_for_planner(subject="alice")["preferences"] == {
        "answer_language": {"value": "en", "source": "user-confirmation", "version": 2}
    }


# -- export and erase --------------------------------------------------------------------------


def _alice_and_bob():
    _write("alice", "answer_language", "zh-CN")
    _write("alice", "answer_language", "en", expected=1)
    _write("alice", "citation_style", "footnote")
    _write("bob", "answer_language", "fr")


def test_export_holds_every_record_and_every_version_with_values(users):
    _alice_and_bob()
    preference_revoke(subject="alice", key="citation_style", by=users["alice"], reason="later")

    export = preferences_export(subject="alice", by=users["alice"])

    assert export["subject"] == "alice"
    records = {r["key"]: r for r in export["records"]}
    assert set(records) == {"answer_language", "citation_style"}
    assert (records["answer_language"]["value"], records["answer_language"]["version"]) == ("en", 2)
    assert records["answer_language"]["source_kind"] == "user-confirmation"
    assert records["answer_language"]["confirmation_id"] == "confirm-alice-answer_language-after-v1"
    assert records["citation_style"]["revoked_at"] is not None
    assert records["citation_style"]["revoke_reason"] == "later"
    assert [(h["key"], h["version"], h["action"], h["value"]) for h in export["history"]] == [
        ("answer_language", 1, "write", "zh-CN"),
        ("answer_language", 2, "write", "en"),
        ("citation_style", 1, "write", "footnote"),
        ("citation_style", 1, "revoke", "footnote"),
    ]
    # Nothing of bob's; bob cannot export alice's; an admin can.
    assert "fr" not in str(export)
    assert _code(lambda: preferences_export(subject="alice", by=users["bob"])) == (
        "MEMORY_SCOPE_NOT_OWNED"
    )
    assert preferences_export(subject="alice", by=users["admin"])["records"] == export["records"]
    assert preference_history(subject="alice", by=users["alice"], key="citation_style") == [
        h for h in export["history"] if h["key"] == "citation_style"
    ]


def test_erase_removes_records_and_values_but_leaves_an_audit_entry_per_key(users):
    _alice_and_bob()
    preference_revoke(subject="alice", key="citation_style", by=users["alice"], reason="later")
    bob_before = list(PreferenceHistory.objects.filter(subject="bob").values())

    assert _code(lambda: preferences_erase(subject="alice", by=users["bob"])) == (
        "MEMORY_SCOPE_NOT_OWNED"
    )
    assert preferences_erase(subject="alice", by=users["alice"]) == 2

    assert PreferenceRecord.objects.filter(subject="alice").count() == 0
    alice_history = PreferenceHistory.objects.filter(subject="alice")
    assert set(alice_history.values_list("value", flat=True)) == {None}
    assert sorted(alice_history.filter(action="erase").values_list("key", "version", "value")) == [
        ("answer_language", 2, None),
        ("citation_style", 1, None),
    ]
    # The audit trail of what happened stays (without the values).
    assert list(alice_history.order_by("id").values_list("key", "version", "action")) == [
        ("answer_language", 1, "write"),
        ("answer_language", 2, "write"),
        ("citation_style", 1, "write"),
        ("citation_style", 1, "revoke"),
        ("answer_language", 2, "erase"),
        ("citation_style", 1, "erase"),
    ]
    export = preferences_export(subject="alice", by=users["alice"])
    assert export["records"] == []
    assert {h["value"] for h in export["history"]} == {None}
    for value in ("zh-CN", "en", "footnote"):
        assert value not in str(export)
    assert preferences_for_planner(subject="alice") == {"preferences": {}}
    # bob's memory is untouched.
    assert PreferenceRecord.objects.get(subject="bob").value == "fr"
    assert list(PreferenceHistory.objects.filter(subject="bob").values()) == bob_before


def test_after_an_erase_a_new_confirmed_write_starts_again(users):
    _write("alice", "answer_language", "zh-CN")
    preferences_erase(subject="alice", by=users["alice"])
    change = preference_propose_edit(
        subject="alice", key="answer_language", value="en", expected_version=None, by=users["alice"]
    )
    result = preference_apply_edit(
        change_id=change.pk, shown_hash=change.proposal_hash, by=users["alice"]
    )
    assert result.ok
    assert PreferenceRecord.objects.get(subject="alice").value == "en"


# -- purge -------------------------------------------------------------------------------------


def test_purge_deletes_expired_records_with_an_audit_entry_without_the_value():
    _write("alice", "answer_language", "zh-CN")
    _write("alice", "answer_language", "en", expected=1)
    _write("alice", "citation_style", "inline")
    _write("bob", "answer_language", "fr")
    _expire("alice", "answer_language")
    _expire("bob", "answer_language")

    assert preferences_purge_expired() == 2

    assert list(PreferenceRecord.objects.values_list("subject", "key")) == [
        ("alice", "citation_style")
    ]
    purges = PreferenceHistory.objects.filter(action="purge").order_by("subject")
    assert list(purges.values_list("subject", "key", "version", "value")) == [
        ("alice", "answer_language", 2, None),
        ("bob", "answer_language", 1, None),
    ]
    # Nothing left to purge: a second sweep is a no-op.
    assert preferences_purge_expired() == 0


def test_the_periodic_task_purges(users):
    _write("alice", "answer_language", "zh-CN")
    _write("alice", "citation_style", "inline")
    _expire("alice", "citation_style")

    assert tasks.purge_expired() == 1

    assert list(PreferenceRecord.objects.values_list("key", flat=True)) == ["answer_language"]
    assert history_rows(key="citation_style")[-1] == ("citation_style", 1, "purge", None)


def test_retention_comes_from_the_key_policy(memory_keys):
    memory_keys([{**DEFAULT_KEYS[0], "retention_days": 1}, DEFAULT_KEYS[1]])
    _write("alice", "answer_language", "zh-CN")
    _write("alice", "citation_style", "inline")
    record = PreferenceRecord.objects.get(key="answer_language")
    assert abs(record.expires_at - (timezone.now() + timedelta(days=1))) < timedelta(minutes=5)

    assert preferences_purge_expired(now=timezone.now() + timedelta(days=2)) == 1
    assert list(PreferenceRecord.objects.values_list("key", flat=True)) == ["citation_style"]


@pytest.mark.parametrize("how", ["confirmed-write", "version-only"])
def test_a_record_rewritten_during_the_purge_is_not_purged(monkeypatch, how):
    """Two expired records; while the purge is on the first, the second is re-written. The
    purge read the second at version 1: its compare-and-set must spare version 2."""
    _write("alice", "answer_language", "zh-CN")
    _write("alice", "citation_style", "inline")
    _expire("alice", "answer_language")
    _expire("alice", "citation_style")
    create = PreferenceHistory.objects.create
    rewritten = []

    def create_then_rewrite(**fields):
        row = create(**fields)
        if fields.get("action") == "purge" and not rewritten:
            rewritten.append(fields["key"])
            if how == "confirmed-write":
                _write("alice", "citation_style", "footnote", expected=1)
            else:
                # Same expiry, new version: only the version check can spare it.
                PreferenceRecord.objects.filter(key="citation_style").update(
                    version=F("version") + 1, value="footnote"
                )
        return row

    monkeypatch.setattr(PreferenceHistory.objects, "create", create_then_rewrite)
    purged = preferences_purge_expired()

    assert rewritten == ["answer_language"]
    assert purged == 1
    record = PreferenceRecord.objects.get(key="citation_style")
    assert (record.value, record.version) == ("footnote", 2)
    assert not PreferenceHistory.objects.filter(key="citation_style", action="purge").exists()


def test_erase_leaves_no_value_in_the_subjects_edits(users):
    """An erasure removes every value of the subject's long-term memory: the proposed values of
    their edits (pending, applied or in conflict, with the conflict's current/proposed values)
    are values too."""
    _write("alice", "answer_language", "en")
    applied = preference_propose_edit(
        subject="alice", key="answer_language", value="fr", expected_version=1, by=users["alice"]
    )
    preference_apply_edit(change_id=applied.pk, shown_hash=applied.proposal_hash, by=users["alice"])
    stale = preference_propose_edit(
        subject="alice", key="answer_language", value="de", expected_version=1, by=users["alice"]
    )
    preference_apply_edit(change_id=stale.pk, shown_hash=stale.proposal_hash, by=users["alice"])
    preference_propose_edit(
        subject="alice",
        key="citation_style",
        value="footnote",
        expected_version=0,
        by=users["alice"],
    )

    preferences_erase(subject="alice", by=users["alice"])

    leftovers = [
        (c["key"], c["status"], c["proposed_value"], c["result"])
        for c in memory_snapshot()["changes"]
        if c["subject"] == "alice" and (c["proposed_value"] or c["result"])
    ]
    assert leftovers == [], "values of alice's edits survive her erasure"

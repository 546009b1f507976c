"""Compare-and-set under real concurrency (issue 4 "Done when" 2; seed §9.2): twenty threads,
twenty PostgreSQL connections, one key, the same read version. Exactly one wins; the nineteen
others get a conflict carrying the winner's value (current) and their own (proposed); the history
holds exactly the winning version. Never last-writer-wins.

Skipped on SQLite, which serializes every writer (a race there would prove nothing).
"""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth import get_user_model

from agentconsole.wiring import memory_policies
from memory import services as memory_services
from memory.models import PreferenceChange, PreferenceHistory, PreferenceRecord
from memory.services import WriteResult, preference_write
from policy.domain.errors import DomainError
from tests.support.personas import make_user
from tests.support.races import THREADS, race

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def _value(i: int) -> str:
    return f"en-x{i:02d}"  # a valid answer_language value, distinct per thread


def _write(value: str, expected: int | None, token: str | None = None) -> WriteResult:
    return preference_write(
        subject="alice",
        policy=memory_policies()["answer_language"],
        value=value,
        expected_version=expected,
        confirmation_id=f"confirm-{value}",
        run_id=None,
        idempotency_token=token,
    )


def _check_one_winner(results: list[Any], *, winning_version: int) -> str:
    errors = [r for r in results if isinstance(r, BaseException)]
    assert errors == [], errors
    winners = [i for i, r in enumerate(results) if r.ok]
    assert len(winners) == 1, [r.as_dict() for r in results]
    (w,) = winners
    assert results[w].version == winning_version
    for i, r in enumerate(results):
        if i == w:
            continue
        assert r.code == "PREFERENCE_VERSION_CONFLICT", r
        assert r.current_value == _value(w), r
        assert r.proposed_value == _value(i), r
        assert r.version == winning_version, r
    record = PreferenceRecord.objects.get(subject="alice", key="answer_language")
    assert (record.value, record.version) == (_value(w), winning_version)
    return _value(w)


def test_twenty_writers_with_the_same_read_version_one_wins(postgres_only):
    assert _write("zh-CN", None).ok  # v1: what every writer read

    results = race(lambda i: _write(_value(i), 1))

    winner = _check_one_winner(results, winning_version=2)
    history = PreferenceHistory.objects.filter(subject="alice", key="answer_language")
    assert list(history.order_by("version").values_list("version", "action", "value")) == [
        (1, "write", "zh-CN"),
        (2, "write", winner),
    ]


def test_twenty_first_writers_of_an_absent_key_one_creates(postgres_only):
    results = race(lambda i: _write(_value(i), None))

    winner = _check_one_winner(results, winning_version=1)
    history = PreferenceHistory.objects.filter(subject="alice", key="answer_language")
    assert list(history.values_list("version", "value")) == [(1, winner)]


def test_twenty_confirmed_edits_naming_the_same_version_one_applies(postgres_only):
    alice = make_user("alice")
    assert _write("zh-CN", None).ok
    changes = [
        memory_services.preference_propose_edit(
            subject="alice", key="answer_language", value=_value(i), expected_version=1, by=alice
        )
        for i in range(THREADS)
    ]

    def apply(i: int) -> WriteResult:
        owner = get_user_model().objects.get(username="alice")  # this thread's connection
        change = changes[i]
        return memory_services.preference_apply_edit(
            change_id=change.pk, shown_hash=change.proposal_hash, by=owner
        )

    results = race(apply)

    winner = _check_one_winner(results, winning_version=2)
    statuses = dict(PreferenceChange.objects.values_list("proposed_value", "status"))
    assert statuses.pop(winner) == "applied"
    assert set(statuses.values()) == {"conflict"}
    for change in PreferenceChange.objects.filter(status="conflict"):
        assert change.result["current_value"] == winner
        assert change.result["proposed_value"] == change.proposed_value
    history = PreferenceHistory.objects.filter(subject="alice", key="answer_language")
    assert list(history.order_by("version").values_list("version", "value")) == [
        (1, "zh-CN"),
        (2, winner),
    ]


def test_one_confirmation_applied_by_twenty_threads_is_used_once(postgres_only):
    alice = make_user("alice")
    change = memory_services.preference_propose_edit(
        subject="alice", key="answer_language", value="zh-CN", expected_version=None, by=alice
    )

    def apply(i: int) -> Any:
        owner = get_user_model().objects.get(username="alice")
        try:
            return memory_services.preference_apply_edit(
                change_id=change.pk, shown_hash=change.proposal_hash, by=owner
            )
        except DomainError as exc:
            return exc.code

    results = race(apply)

    applied = [r for r in results if isinstance(r, WriteResult)]
    assert len(applied) == 1, results
    assert applied[0].ok
    assert sorted(r for r in results if isinstance(r, str)) == ["CONFIRMATION_ALREADY_USED"] * 19
    assert PreferenceHistory.objects.filter(key="answer_language").count() == 1


def test_twenty_retries_of_one_tool_call_write_once(postgres_only):
    """The same idempotency token from twenty threads (a retried tool call): one history row."""
    results = race(lambda i: _write("zh-CN", None, token="tok-1"))

    errors = [r for r in results if isinstance(r, BaseException)]
    assert errors == [], errors
    assert PreferenceHistory.objects.filter(idempotency_token="tok-1").count() == 1
    assert PreferenceRecord.objects.get(key="answer_language").version == 1

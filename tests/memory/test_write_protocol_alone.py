"""The write protocol's conditions, each shown to be the ONLY obstacle in its file (seed §9.1),
and the runs that need long-term memory prepared first: a value saved before the run, a revoked key.

Each test here prepares state and runs scenario files itself, so it commits for real
(``django_db(transaction=True)``: the tool thread reads committed rows).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agentconsole.wiring import memory_policies
from memory.domain.preferences import DEFAULT_KEYS
from memory.models import PreferenceRecord
from memory.selectors import preferences_for_planner
from memory.services import preference_revoke, preference_write
from tests.memory.memory_kit import history_rows, memory_snapshot, run_data, run_file
from tests.support.runs import load_scenario

pytestmark = pytest.mark.django_db(transaction=True)
SEARCH_ONLY = [("p1", "search_public", "succeeded")]


# -- the failing condition alone: fixed, the same file writes -------------------------------


def test_the_key_is_the_only_obstacle_once_configuration_whitelists_it(corpus, memory_keys):
    memory_keys([*DEFAULT_KEYS, {"key": "favorite_color", "max_length": 20}])
    result = run_file("mem-key-not-allowed")

    assert result.status == "completed"
    assert result.rejections() == []
    assert history_rows() == [("favorite_color", 1, "write", "blue")]


def test_the_length_is_the_only_obstacle_once_the_limit_allows_it(corpus, memory_keys):
    memory_keys(
        [
            {**DEFAULT_KEYS[0], "max_length": 64},
            DEFAULT_KEYS[1],
        ]
    )
    result = run_file("mem-value-too-long")

    assert result.status == "completed"
    assert result.rejections() == []
    assert history_rows() == [
        ("answer_language", 1, "write", "zh-Hans-CN-variant1-variant2-variant3-variant4")
    ]


def test_the_value_is_the_only_obstacle_for_an_allowed_citation_style(corpus, tmp_path: Path):
    data = load_scenario("mem-value-invalid")
    data["name"] = "mem-value-valid"
    args = {"key": "citation_style", "value": "footnote"}
    data["planner"][1]["arguments"] = args
    data["confirmations"][0]["proposal"]["arguments"] = args
    result = run_data(data, tmp_path)

    assert result.status == "completed"
    assert history_rows() == [("citation_style", 1, "write", "footnote")]


def test_an_unversioned_write_never_overwrites_a_value_saved_before_the_run(corpus):
    preference_write(
        subject="alice",
        policy=memory_policies()["answer_language"],
        value="en",
        expected_version=None,
        confirmation_id="earlier",
        run_id=None,
        idempotency_token=None,
    )
    before = memory_snapshot()
    result = run_file("mem-ok")

    assert result.status == "completed"
    assert result.ledger_rows() == [*SEARCH_ONLY, ("p2", "save_preference", "rejected")]
    details = result.observation("tool-2")["content"]["details"]
    assert (details["current_value"], details["proposed_value"]) == ("en", "zh-CN")
    assert memory_snapshot() == before


# -- a revoked key, through runs -------------------------------------------------------------------


def test_a_revoked_key_is_set_again_only_by_a_new_confirmed_write(corpus, users):
    run_file("mem-ok")
    preference_revoke(subject="alice", key="answer_language", by=users["alice"], reason="stop")
    assert preferences_for_planner(subject="alice") == {"preferences": {}}

    # No confirmation: the run waits, the tombstone stays.
    before = memory_snapshot()
    waiting = run_file("mem-no-confirmation")
    assert waiting.status == "waiting_confirmation"
    assert memory_snapshot() == before
    assert PreferenceRecord.objects.get(key="answer_language").revoked_at is not None

    # A new confirmed write: the version continues from the tombstone's.
    again = run_file("mem-ok")
    assert again.status == "completed"
    record = PreferenceRecord.objects.get(key="answer_language")
    assert (record.value, record.version, record.revoked_at) == ("zh-CN", 2, None)
    assert record.revoked_by is None
    assert record.revoke_reason == ""
    assert record.created_by_run == again.run_id
    assert history_rows() == [
        ("answer_language", 1, "write", "zh-CN"),
        ("answer_language", 1, "revoke", "zh-CN"),
        ("answer_language", 2, "write", "zh-CN"),
    ]
    assert preferences_for_planner(subject="alice")["preferences"]["answer_language"] == {
        "value": "zh-CN",
        "source": "user-confirmation",
        "version": 2,
    }

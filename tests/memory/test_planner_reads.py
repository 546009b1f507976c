"""Reads of long-term memory (seed §9.3; issue 4 "Done when" 3): a run started after a preference
was saved gets it in its planner context as structured data — filtered by subject scope and by
purpose, revoked and expired records excluded — never concatenated into the instructions.

``runs.selectors.planner_context(run_id)`` is exactly what the planner would get for the run's
next step; ``planner.output`` trace events summarize what it did get (``context_preferences``).
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from memory.domain.preferences import DEFAULT_KEYS
from memory.models import PreferenceRecord
from memory.selectors import preferences_for_planner
from memory.services import preference_revoke
from runs import services
from runs.domain.budgets import RunBudgets
from runs.selectors import planner_context
from tests.memory.memory_kit import confirmed_write, run_file
from tests.support.runs import load_scenario

ZH_V1 = {"answer_language": {"value": "zh-CN", "source": "user-confirmation", "version": 1}}


def _save(subject: str, key: str, value: str, expected_version: int | None = None) -> None:
    confirmed_write(
        subject, key, value, expected_version, confirmation_id=f"confirm-{subject}-{key}"
    )


def _new_run(subject: str = "alice") -> str:
    """A run that has not taken a step yet: its planner context is what step 1 would get."""
    state = services.run_create(
        subject=subject,
        goal="重试耗尽后怎么办",
        budgets=RunBudgets(max_steps=4, max_tool_calls=2, max_repeated_proposal=2),
        grants=[],
        planner={"kind": "fixture", "outputs": []},
    )
    return state.run_id


def _context_preferences(result) -> list[list[str]]:
    return [e["details"]["context_preferences"] for e in result.events("planner.output")]


@pytest.mark.django_db(transaction=True)
def test_a_run_started_after_a_save_sees_it_and_after_revocation_does_not(corpus, users):
    saving = run_file("mem-ok")
    # Within the saving run, the preference reaches the planner from the step after the write.
    assert _context_preferences(saving) == [[], [], ["answer_language"]]

    later = run_file("mem-reads-preferences")
    assert later.status == "completed"
    assert _context_preferences(later) == [["answer_language"], ["answer_language"]]
    context = planner_context(run_id=later.run_id)
    assert context["preferences"] == ZH_V1
    # Structured data beside the instructions, never inside them.
    assert context["goal"] == load_scenario("mem-reads-preferences")["goal"]
    assert set(context) == {"goal", "step", "observations", "tools", "preferences"}
    assert all("zh-CN" not in item["content"] for item in context["observations"])

    preference_revoke(subject="alice", key="answer_language", by=users["alice"], reason="no more")
    after = run_file("mem-reads-preferences")
    assert _context_preferences(after) == [[], []]
    assert planner_context(run_id=after.run_id)["preferences"] == {}
    # The tombstone is still there; it is just not read.
    assert PreferenceRecord.objects.get(key="answer_language").revoked_at is not None


@pytest.mark.django_db
def test_the_next_planner_context_of_a_new_run_holds_the_saved_preference():
    _save("alice", "answer_language", "zh-CN")
    _save("alice", "answer_language", "en", expected_version=1)
    _save("alice", "citation_style", "footnote")

    assert planner_context(run_id=_new_run())["preferences"] == {
        "answer_language": {"value": "en", "source": "user-confirmation", "version": 2},
        "citation_style": {"value": "footnote", "source": "user-confirmation", "version": 1},
    }


@pytest.mark.django_db
def test_an_expired_record_is_not_given_to_the_planner():
    _save("alice", "answer_language", "zh-CN")
    _save("alice", "citation_style", "inline")
    PreferenceRecord.objects.filter(key="answer_language").update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )

    preferences = planner_context(run_id=_new_run())["preferences"]
    assert set(preferences) == {"citation_style"}
    assert set(preferences_for_planner(subject="alice")["preferences"]) == {"citation_style"}


@pytest.mark.django_db
def test_a_key_not_configured_for_the_planner_purpose_is_not_given_to_it(memory_keys):
    _save("alice", "answer_language", "zh-CN")
    _save("alice", "citation_style", "inline")
    memory_keys([{**DEFAULT_KEYS[0], "purposes": ["display"]}, DEFAULT_KEYS[1]])

    assert set(planner_context(run_id=_new_run())["preferences"]) == {"citation_style"}
    # The record is still there and readable for the purposes it is configured for.
    assert set(preferences_for_planner(subject="alice", purpose="display")["preferences"]) == {
        "answer_language",
        "citation_style",
    }


@pytest.mark.django_db
def test_a_key_removed_from_the_whitelist_is_not_given_to_the_planner(memory_keys):
    _save("alice", "answer_language", "zh-CN")
    _save("alice", "citation_style", "inline")
    memory_keys([DEFAULT_KEYS[1]])

    assert set(planner_context(run_id=_new_run())["preferences"]) == {"citation_style"}


@pytest.mark.django_db
def test_a_run_sees_only_its_own_subjects_preferences():
    _save("bob", "answer_language", "en")
    _save("alice", "citation_style", "endnote")

    assert set(planner_context(run_id=_new_run("alice"))["preferences"]) == {"citation_style"}
    assert planner_context(run_id=_new_run("bob"))["preferences"] == {
        "answer_language": {"value": "en", "source": "user-confirmation", "version": 1}
    }
    assert planner_context(run_id=_new_run("carol"))["preferences"] == {}

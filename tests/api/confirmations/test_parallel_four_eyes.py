"""Four eyes under concurrency, over real HTTP (pytest-django's threaded live server, token
auth), on PostgreSQL: approvals of one four-eyes confirmation sent at the same moment are
served one after the other (the confirmation's row lock), so

- two different operators: one is the first approval (202), the other the second (200), the
  item approved by both, the run resumed once;
- one person twice: one approval (202) and ALREADY_APPROVED_BY_YOU (409), never two votes;
- six operators: one 202, one 200, four CONFIRMATION_NOT_PENDING naming who decided.
"""

from __future__ import annotations

from typing import Any

import pytest

from policy.models import Confirmation
from runs import models as m
from tests.api import api_kit as kit
from tests.api.confirmations.test_parallel_approvals import post_json
from tests.support.races import race


def four_eyes(owner: Any) -> kit.Waiting:
    waiting = kit.waiting_run(owner)
    Confirmation.objects.filter(pk=waiting.confirmation_id).update(approvers="four_eyes")
    return waiting


def approve_all(live_server: Any, waiting: kit.Waiting, tokens: list[str]) -> list[Any]:
    url = f"{live_server.url}/api/confirmations/{waiting.confirmation_id}/approve/"
    answers = race(
        lambda i: post_json(url, tokens[i], {"proposal_hash": waiting.proposal_hash}),
        len(tokens),
        join_s=120,
    )
    errors = [a for a in answers if isinstance(a, BaseException)]
    assert not errors, errors
    return answers


def resumed_once(waiting: kit.Waiting, enqueued: list) -> None:
    run = m.Run.objects.get(pk=waiting.run_id)
    assert run.status == "running"
    # One version for the first approval, one for the decision.
    assert run.version == waiting.version + 2
    assert len(kit.events_of(waiting.run_id, "confirmation.approval-recorded")) == 1
    assert len(kit.events_of(waiting.run_id, "confirmation.decided")) == 1
    assert enqueued.count(waiting.run_id) == 1


@pytest.mark.django_db(transaction=True)
def test_two_operators_at_once_make_one_first_and_one_second_approval(
    postgres_only: None, live_server: Any, people: kit.People, enqueued: list
) -> None:
    waiting = four_eyes(people.alice.user)
    pair = [people.operator, people.operator2]
    answers = approve_all(live_server, waiting, [p.token for p in pair])  # type: ignore[misc]
    assert sorted(status for status, _ in answers) == [200, 202], answers
    (second,) = [body for status, body in answers if status == 200]
    assert second["status"] == "approved"
    assert sorted(a["by"] for a in second["approvals"]) == ["operator", "operator2"]
    row = kit.confirmation_row(waiting.confirmation_id)
    assert row.status == "approved"
    (decided,) = kit.events_of(waiting.run_id, "confirmation.decided")
    assert sorted(decided.details["approved_by"]) == ["operator", "operator2"]
    resumed_once(waiting, enqueued)


@pytest.mark.django_db(transaction=True)
def test_one_person_twice_at_once_is_one_vote(
    postgres_only: None, live_server: Any, people: kit.People, enqueued: list
) -> None:
    waiting = four_eyes(people.alice.user)
    token = people.operator.token
    answers = approve_all(live_server, waiting, [token, token])  # type: ignore[list-item]
    assert sorted(status for status, _ in answers) == [202, 409], answers
    (refused,) = [body for status, body in answers if status == 409]
    assert refused["code"] == "ALREADY_APPROVED_BY_YOU"
    row = kit.confirmation_row(waiting.confirmation_id)
    assert row.status == "pending"
    assert [a.username for a in row.approvals.all()] == ["operator"]
    assert m.Run.objects.get(pk=waiting.run_id).status == "waiting_confirmation"
    assert enqueued == []


@pytest.mark.django_db(transaction=True)
def test_six_operators_at_once_one_first_one_second_the_rest_told_who_decided(
    postgres_only: None, live_server: Any, people: kit.People, enqueued: list
) -> None:
    waiting = four_eyes(people.alice.user)
    operators = [kit.make_persona(f"op{i}", roles=("operator",)) for i in range(6)]
    answers = approve_all(live_server, waiting, [op.token for op in operators])  # type: ignore[misc]
    statuses = sorted(status for status, _ in answers)
    assert statuses == [200, 202, 409, 409, 409, 409], answers
    (second,) = [body for status, body in answers if status == 200]
    for status, body in answers:
        if status == 409:
            assert body["code"] == kit.CONFIRMATION_NOT_PENDING, body
            assert body["message"].startswith(f"Already decided by {second['decided_by']}"), body
    row = kit.confirmation_row(waiting.confirmation_id)
    assert row.approvals.count() == 2
    resumed_once(waiting, enqueued)

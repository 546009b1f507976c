"""Why a confirmation can no longer be decided, in words a person can act on (issue 11 item 3):
who decided it, or that the run now asks about another proposal, or that it expired; and the
reason a person gives travels with the decision (trace event, confirmation row, API).

Personas: ``alice`` owns the waiting runs; ``operator`` and ``admin`` decide confirmations.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from policy.domain.errors import DomainError
from policy.services import PROPOSAL_CHANGED
from runs import services
from tests.api import api_kit as kit

pytestmark = pytest.mark.django_db


@pytest.fixture
def people() -> kit.People:
    kit.ensure_roles()
    return kit.People()


@pytest.fixture(autouse=True)
def no_broker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(services, "enqueue_advance", lambda run_id, **kw: None)


def two_proposals(owner: Any) -> kit.Waiting:
    """Waits on save_preference zh-CN; once declined, the planner proposes fr-FR (waits too)."""
    data = copy.deepcopy(kit.load_fixture("scenarios/s15-missing-confirmation.json"))
    second = copy.deepcopy(data["planner"][0])
    second.update(proposal_id="p2", arguments={"key": "answer_language", "value": "fr-FR"})
    data["planner"].insert(1, second)
    data["subject"] = data["grants"][0]["resource_scope"] = owner.get_username()
    export = kit.scenario_run(data, owner)
    (pending,) = [c for c in export["confirmations"] if c["status"] == "pending"]
    return kit.Waiting(export["state"]["run_id"], pending["id"], pending["proposal_hash"], 0)


def refused(waiting: kit.Waiting, by: Any) -> DomainError:
    with pytest.raises(DomainError) as caught:
        services.confirmation_decide(
            confirmation_id=waiting.confirmation_id, approved=True,
            shown_hash=waiting.proposal_hash, by=by,
        )  # fmt: skip
    return caught.value


def test_a_second_decision_names_who_decided(people: kit.People) -> None:
    waiting = kit.waiting_run(people.alice.user)
    services.confirmation_decide(
        confirmation_id=waiting.confirmation_id, approved=False,
        shown_hash=waiting.proposal_hash, by=people.operator.user, reason="no",
    )  # fmt: skip
    error = refused(waiting, people.admin.user)
    assert error.code == "CONFIRMATION_NOT_PENDING"
    assert error.message == "Already decided by operator (declined); nothing was changed."
    assert error.extra == {"decided_by": "operator", "status": "declined"}


def test_a_run_that_moved_on_is_a_changed_proposal(people: kit.People) -> None:
    waiting = two_proposals(people.alice.user)
    services.confirmation_decide(
        confirmation_id=waiting.confirmation_id, approved=False,
        shown_hash=waiting.proposal_hash, by=people.operator.user, reason="not zh",
    )  # fmt: skip
    services.run_advance(run_id=waiting.run_id)
    (now,) = [
        c for c in kit.events_of(waiting.run_id, "proposal.waiting-confirmation")
        if c.details["confirmation_id"] != waiting.confirmation_id
    ]  # fmt: skip
    error = refused(waiting, people.admin.user)
    assert error.code == "CONFIRMATION_HASH_MISMATCH"
    assert error.message == PROPOSAL_CHANGED + " The one shown was declined by operator."
    assert error.extra["current_confirmation_id"] == now.details["confirmation_id"]
    assert kit.confirmation_row(now.details["confirmation_id"]).status == "pending"


def test_an_expired_confirmation_says_so(people: kit.People) -> None:
    waiting = kit.waiting_run(people.alice.user)
    services.run_cancel(run_id=waiting.run_id, by="alice", reason="never mind")
    error = refused(waiting, people.operator.user)
    assert error.code == "CONFIRMATION_NOT_PENDING"
    assert error.message == "This confirmation is expired; there is nothing left to decide."


def test_the_reason_travels_with_the_decision_and_secrets_do_not(people: kit.People) -> None:
    waiting = kit.waiting_run(people.alice.user)
    secret = "sk-live-abcdefghijklmnop1234"
    body = kit.assert_ok(
        people.operator.post(
            f"/api/confirmations/{waiting.confirmation_id}/decline/",
            {"proposal_hash": waiting.proposal_hash, "reason": f"leaked {secret} here"},
        )
    )
    assert body["decision_reason"].startswith("leaked [secret:hmac-sha256:")
    (event,) = kit.events_of(waiting.run_id, "confirmation.decided")
    assert event.details["reason"] == body["decision_reason"]
    assert secret not in str(event.details)


def test_the_api_reason_is_optional_and_bounded(people: kit.People) -> None:
    waiting = kit.waiting_run(people.alice.user)
    url = f"/api/confirmations/{waiting.confirmation_id}/approve/"
    too_long = {"proposal_hash": waiting.proposal_hash, "reason": "x" * 1001}
    kit.assert_error(people.operator.post(url, too_long), 400, kit.VALIDATION_ERROR)
    body = kit.assert_ok(people.operator.post(url, {"proposal_hash": waiting.proposal_hash}))
    assert (body["status"], body["decision_reason"]) == ("approved", "")

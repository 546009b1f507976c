"""Identical proposals waiting in several runs, decided together (issue 24 item 3), and "same
as approved before" with its diff.

Personas (tests/support/personas.py): ``operator`` and ``operator2`` decide confirmations;
``alice`` and ``bob`` (users) own the waiting runs and may not batch; ``reviewer`` neither.
Runs really wait (the s15 scenario through the runner): each batch item is a real decision,
with its own trace event, checked here per run.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from agentconsole import wiring
from policy import queue_similar
from policy.domain.canonical import per_run_confirmation_hash
from policy.models import Confirmation
from policy.selectors import QueueItem, confirmation_queue_item
from runs import models as m
from runs import selectors as run_selectors
from tests.api import api_kit as kit
from tests.support.queue_builders import pending, waiting

pytestmark = pytest.mark.django_db

BATCH = "/api/confirmations/batch/"


def batch(persona: kit.Persona, items: list[kit.Waiting], decision: str, **more: Any) -> Any:
    body = {
        "proposal_hash": items[0].proposal_hash,
        "confirmation_ids": [w.confirmation_id for w in items],
        "decision": decision,
        **more,
    }
    return persona.client.post(BATCH, body, format="json")


def card(viewer: Any, confirmation_id: str) -> QueueItem:
    item = confirmation_queue_item(
        viewer=viewer,
        registry=wiring.registry(),
        observations=run_selectors.cited_observations,
        confirmation_id=confirmation_id,
    )
    assert item is not None
    return item


def before(confirmation_id: str, viewer: Any) -> Any:
    return queue_similar.approved_before(item=card(viewer, confirmation_id))


def status_of(w: kit.Waiting) -> str:
    return kit.confirmation_row(w.confirmation_id).status


def test_identical_proposals_share_a_hash_and_are_found_together(people: kit.People) -> None:
    a1, a2 = waiting(people.alice.user), waiting(people.alice.user)
    b1 = waiting(people.bob.user)
    other = waiting(people.alice.user, value="en")
    assert a1.proposal_hash == a2.proposal_hash == b1.proposal_hash != other.proposal_hash
    found = queue_similar.identical_waiting(
        viewer=people.operator.user, item=card(people.operator.user, a2.confirmation_id)
    )
    assert next(i.confirmation_id for i in found) == a2.confirmation_id
    assert {i.confirmation_id for i in found} == {
        a1.confirmation_id, a2.confirmation_id, b1.confirmation_id
    }  # fmt: skip
    assert (
        queue_similar.identical_waiting(
            viewer=people.operator.user, item=card(people.operator.user, other.confirmation_id)
        )
        == []
    )


def test_approve_all_records_each_run_on_its_own(people: kit.People) -> None:
    items = [waiting(people.alice.user), waiting(people.alice.user), waiting(people.bob.user)]
    body = kit.assert_ok(batch(people.operator, items, "approve", reason="same call, fine"))
    assert (body["decided"], body["refused"]) == (3, 0)
    assert [r["outcome"] for r in body["results"]] == ["approved"] * 3
    for w in items:
        assert status_of(w) == "approved"
        (event,) = kit.events_of(w.run_id, "confirmation.decided")
        assert event.details["decision"] == "approved"
        assert m.Run.objects.get(pk=w.run_id).status == "running"


def test_one_refusal_leaves_the_others_decided_and_says_which(people: kit.People) -> None:
    items = [waiting(people.alice.user) for _ in range(3)]
    # Decided elsewhere first: operator2 declines the middle one on its own.
    middle = items[1]
    kit.assert_ok(
        people.operator2.client.post(
            f"/api/confirmations/{middle.confirmation_id}/decline/",
            {"proposal_hash": middle.proposal_hash, "reason": "not this one"},
            format="json",
        )
    )
    body = kit.assert_ok(batch(people.operator, items, "approve"))
    assert (body["decided"], body["refused"]) == (2, 1)
    refused = [r for r in body["results"] if r["outcome"] == "refused"]
    assert [(r["confirmation_id"], r["code"]) for r in refused] == [
        (middle.confirmation_id, kit.CONFIRMATION_NOT_PENDING)
    ]
    assert "operator2" in refused[0]["message"]
    assert [status_of(w) for w in items] == ["approved", "declined", "approved"]


def test_a_different_proposal_in_the_batch_is_refused_by_its_hash(people: kit.People) -> None:
    same, different = waiting(people.alice.user), waiting(people.alice.user, value="en")
    body = kit.assert_ok(batch(people.operator, [same, different], "approve"))
    assert [(r["outcome"], r["code"]) for r in body["results"]] == [
        ("approved", ""), ("refused", kit.CONFIRMATION_HASH_MISMATCH)
    ]  # fmt: skip
    assert status_of(different) == "pending"


def test_nothing_decided_is_a_409_and_each_reason_is_listed(people: kit.People) -> None:
    w = waiting(people.alice.user)
    kit.assert_ok(batch(people.operator, [w], "approve"))
    body = kit.assert_error(batch(people.operator2, [w], "approve"), 409, "BATCH_NOTHING_DECIDED")
    assert body["extra"]["results"][0]["code"] == kit.CONFIRMATION_NOT_PENDING


def test_decline_all_needs_a_reason_and_writes_nothing_without(people: kit.People) -> None:
    items = [waiting(people.alice.user), waiting(people.bob.user)]
    kit.assert_error(batch(people.operator, items, "decline"), 400, "REASON_REQUIRED")
    assert [status_of(w) for w in items] == ["pending", "pending"]
    body = kit.assert_ok(batch(people.operator, items, "decline", reason="not in this form"))
    assert [r["outcome"] for r in body["results"]] == ["declined", "declined"]


@pytest.mark.parametrize(
    ("change", "status", "code"),
    [
        ({"confirmation_ids": []}, 400, "VALIDATION_ERROR"),
        ({"decision": "maybe"}, 400, "VALIDATION_ERROR"),
        ({"proposal_hash": "zz"}, 400, "VALIDATION_ERROR"),
        ({"extra_field": 1}, 400, None),
        ("twice", 400, "BATCH_INVALID"),
    ],
)
def test_bad_batches_are_4xx_and_decide_nothing(
    people: kit.People, change: Any, status: int, code: str | None
) -> None:
    w = waiting(people.alice.user)
    body: dict[str, Any] = {
        "proposal_hash": w.proposal_hash, "confirmation_ids": [w.confirmation_id],
        "decision": "approve",
    }  # fmt: skip
    if change == "twice":
        body["confirmation_ids"] = [w.confirmation_id, w.confirmation_id]
    else:
        body.update(change)
    kit.assert_error(people.operator.client.post(BATCH, body, format="json"), status, code)
    assert status_of(w) == "pending"


def test_per_run_confirmations_are_never_batched(people: kit.People) -> None:
    bound = per_run_confirmation_hash("save_preference", "1")
    rows = [pending(people.alice.user) for _ in range(2)]
    body = {"proposal_hash": bound, "confirmation_ids": [r.pk for r in rows], "decision": "approve"}
    kit.assert_error(people.operator.client.post(BATCH, body, format="json"), 400, "BATCH_PER_RUN")


@pytest.mark.parametrize("who", ["alice", "reviewer"])
def test_only_operators_batch(people: kit.People, who: str) -> None:
    w = waiting(people.alice.user)
    kit.assert_error(batch(getattr(people, who), [w], "approve"), 403, kit.PERMISSION_DENIED)
    assert status_of(w) == "pending"


def test_the_console_batch_form_reports_each_refusal(people: kit.People) -> None:
    items = [waiting(people.alice.user), waiting(people.bob.user)]
    people.operator2.client.post(
        f"/api/confirmations/{items[0].confirmation_id}/approve/",
        {"proposal_hash": items[0].proposal_hash}, format="json",
    )  # fmt: skip
    client = Client()
    client.force_login(people.operator.user)
    form = {
        "proposal_hash": items[0].proposal_hash, "decision": "approve",
        "ids": [w.confirmation_id for w in items], "back": "order=risk",
    }  # fmt: skip
    response = client.post("/confirmations/batch/", form, follow=True)
    assert response.redirect_chain[-1][0] == "/confirmations/?order=risk"
    text = response.content.decode()
    assert "Approved 1 of 2 identical proposals." in text
    assert f"Run {items[0].run_id}: not decided (CONFIRMATION_NOT_PENDING)" in text
    assert status_of(items[1]) == "approved"


# --- same as approved before ----------------------------------------------------------------


def test_same_as_approved_before_and_the_diff_against_it(people: kit.People) -> None:
    first = waiting(people.alice.user)
    assert before(first.confirmation_id, people.operator.user) is None
    kit.assert_ok(batch(people.operator, [first], "approve"))
    again = waiting(people.alice.user)
    other = waiting(people.alice.user, value="en")
    bobs = waiting(people.bob.user)
    same = before(again.confirmation_id, people.operator.user)
    assert same is not None
    assert same.same
    assert same.diff.same
    assert same.confirmation_id == first.confirmation_id
    assert same.decided_by == "operator"
    changed = before(other.confirmation_id, people.operator.user)
    assert changed is not None
    assert not changed.same
    assert [(c.path, c.kind, c.before, c.after) for c in changed.diff.changes] == [
        ("$.value", "changed", '"zh-CN"', '"en"')
    ]
    # Another subject: nothing approved for bob yet.
    assert before(bobs.confirmation_id, people.operator.user) is None
    client = Client()
    client.force_login(people.operator.user)
    page = client.get("/confirmations/", {"item": other.confirmation_id}).content.decode()
    assert 'data-q-before="changed"' in page
    assert "$.value" in page
    assert 'data-q-row-before="same"' in page  # ``again``'s row


def test_the_diff_masks_secrets_as_the_card_does(people: kit.People) -> None:
    secret = "sk-live-abcdefghijklmnop1234"
    alice = people.alice.user
    old = pending(alice, arguments={"key": "answer_language", "value": "x"})
    # Approved as the decision service leaves it (status, when, by whom): set-up only.
    Confirmation.objects.filter(pk=old.pk).update(
        status="approved", decided_at=old.requested_at, decided_by=people.operator.user
    )
    new = pending(alice, arguments={"key": "answer_language", "value": secret})
    found = before(new.pk, people.operator.user)
    assert found is not None
    (change,) = found.diff.changes
    assert change.path == "$.value"
    assert secret not in change.after
    assert "[masked secret]" in change.after

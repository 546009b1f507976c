"""Edit and respond on the confirmation queue (issue 24 item 1): each item has an "Edit the
arguments" form (JSON, starting from what is shown) and a "Respond to the planner" form; a
refused edit shows the queue again with the typed text kept and the reason beside the form, in
the same codes as the API.

Personas (tests/support/personas.py): ``alice`` owns the waiting runs; ``operator`` decides.
"""

from __future__ import annotations

import html
import json
import re
from typing import Any

import pytest

from policy.models import Confirmation
from runs import models as m
from tests.api import api_kit as kit
from tests.console.test_approver_queue import article, no_broker, page_of, signed_in  # noqa: F401
from tests.console.test_approver_queue import people as people

pytestmark = pytest.mark.django_db

QUEUE = "/confirmations/"


def answer(persona: kit.Persona, w: kit.Waiting, action: str, **form: str) -> Any:
    data = {"proposal_hash": w.proposal_hash, **form}
    return signed_in(persona).post(f"{QUEUE}{w.confirmation_id}/{action}/", data)


def textarea(item: str, name: str) -> str:
    """A textarea of the item's edit or respond form (the decision form has a reason too)."""
    forms = item[item.index("data-q-answers") :]
    found = re.search(rf'<textarea[^>]*name="{name}"[^>]*>(.*?)</textarea>', forms, re.S)
    assert found, item
    return html.unescape(found.group(1))


def test_each_item_offers_edit_and_respond_starting_from_what_is_shown(
    people: kit.People,
) -> None:
    w = kit.waiting_run(people.alice.user)
    item = article(page_of(people.operator), w.confirmation_id)
    assert "Edit the arguments" in item
    assert "Respond to the planner instead" in item
    assert json.loads(textarea(item, "arguments")) == {"key": "answer_language", "value": "zh-CN"}
    assert f'action="{QUEUE}{w.confirmation_id}/edit/"' in item
    assert f'action="{QUEUE}{w.confirmation_id}/respond/"' in item
    assert "<script" not in item


def test_edit_and_approve_redirects_with_a_message(
    people: kit.People,
    no_broker: list,  # noqa: F811
    django_capture_on_commit_callbacks: Any,
) -> None:
    w = kit.waiting_run(people.alice.user)
    client = signed_in(people.operator)
    typed = '{"key": "answer_language", "value": "fr-FR"}'
    form = {"proposal_hash": w.proposal_hash, "arguments": typed, "reason": "French"}
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(f"{QUEUE}{w.confirmation_id}/edit/", form, follow=True)
    assert response.redirect_chain == [(QUEUE, 302)]
    assert "Edited and approved" in response.content.decode()
    row = kit.confirmation_row(w.confirmation_id)
    assert (row.status, row.decided_by.username, row.decision_reason) == (
        "edited",
        "operator",
        "French",
    )
    (new,) = Confirmation.objects.filter(edited_from=w.confirmation_id)
    assert (new.status, new.proposal["arguments"]["value"]) == ("approved", "fr-FR")
    assert no_broker == [w.run_id]


@pytest.mark.parametrize(
    ("typed", "status", "code"),
    [
        ('{"key": "answer_language", "value": "zz zz"}', 422, "MEMORY_VALUE_INVALID"),
        ('{"key": "answer_language", "value": ', 400, "EDIT_ARGUMENTS_INVALID"),
        ('{"key": "a", "key": "b"}', 400, "EDIT_ARGUMENTS_INVALID"),
    ],
    ids=["gate", "not-json", "duplicate-key"],
)
def test_a_refused_edit_keeps_what_was_typed_and_says_why(
    people: kit.People, typed: str, status: int, code: str
) -> None:
    w = kit.waiting_run(people.alice.user)
    response = answer(people.operator, w, "edit", arguments=typed, reason="my reason")
    assert response.status_code == status
    item = article(response.content.decode(), w.confirmation_id)
    assert textarea(item, "arguments") == typed
    assert textarea(item, "reason") == "my reason"
    assert f"({code})" in item
    assert "Nothing was changed." in item
    assert "data-q-edit open" in item
    assert kit.confirmation_row(w.confirmation_id).status == "pending"
    assert m.Run.objects.get(pk=w.run_id).version == w.version


def test_an_edit_the_approver_rule_refuses_is_403_on_the_page(people: kit.People) -> None:
    w = kit.waiting_run(people.operator.user)  # the operator's own run: not independent
    Confirmation.objects.filter(pk=w.confirmation_id).update(approvers="operator")
    response = answer(
        people.operator, w, "edit", arguments='{"key": "answer_language", "value": "fr-FR"}'
    )
    assert response.status_code == 403
    assert "APPROVER_NOT_ALLOWED" in response.content.decode()
    assert kit.confirmation_row(w.confirmation_id).status == "pending"


def test_respond_sends_the_note_and_an_empty_note_is_refused(
    people: kit.People,
    no_broker: list,  # noqa: F811
    django_capture_on_commit_callbacks: Any,
) -> None:
    w = kit.waiting_run(people.alice.user)
    refused = answer(people.operator, w, "respond", note="  ")
    assert refused.status_code == 400
    assert "(NOTE_REQUIRED)" in article(refused.content.decode(), w.confirmation_id)
    with django_capture_on_commit_callbacks(execute=True):
        response = answer(people.operator, w, "respond", note="She wants French.")
    assert response.status_code == 302
    row = kit.confirmation_row(w.confirmation_id)
    assert (row.status, row.decision_reason) == ("responded", "She wants French.")
    assert m.Run.objects.get(pk=w.run_id).status == "running"
    assert no_broker == [w.run_id]


def test_a_stale_edit_shows_the_refusal_above_the_queue(people: kit.People) -> None:
    w = kit.waiting_run(people.alice.user)
    kit.assert_ok(
        people.operator2.post(
            f"/api/confirmations/{w.confirmation_id}/decline/",
            {"proposal_hash": w.proposal_hash, "reason": "no"},
        )
    )
    response = answer(people.operator, w, "respond", note="too late")
    assert response.status_code == 409
    assert "CONFIRMATION_NOT_PENDING" in response.content.decode()

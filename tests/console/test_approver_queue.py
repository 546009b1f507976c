"""The confirmation queue (/confirmations/) under approver rules (issue 12 item 3): each item
is shown only to those who may decide it, four-eyes progress is shown ("1 of 2, approved by
operator"), and a four-eyes item its first approver already approved stays listed for them as
waiting for a second approver, with no Approve button.

Personas (tests/support/personas.py): ``alice`` owns most waiting runs; ``operator`` owns two
(so it is not the independent operator of those); ``operator2`` and ``admin`` own none.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from policy.models import Confirmation
from runs import services
from tests.api import api_kit as kit

pytestmark = pytest.mark.django_db

QUEUE = "/confirmations/"


@pytest.fixture(autouse=True)
def no_broker(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    monkeypatch.setattr(services, "enqueue_advance", lambda run_id, **kw: calls.append(run_id))
    return calls


@pytest.fixture
def people() -> kit.People:
    kit.ensure_roles()
    return kit.People()


def signed_in(persona: kit.Persona) -> Client:
    client = Client()
    client.force_login(persona.user)
    return client


def waiting(owner: Any, rule: str) -> kit.Waiting:
    w = kit.waiting_run(owner)
    Confirmation.objects.filter(pk=w.confirmation_id).update(approvers=rule)
    return w


def shown(page: str) -> set[str]:
    return set(re.findall(r'data-q-row="([^"]+)"', page))  # the list's rows (issue 24)


def article(page: str, confirmation_id: str) -> str:
    """The queue item of ``confirmation_id``, as HTML."""
    start = page.index(f'data-confirmation-id="{confirmation_id}"')
    return page[start : page.index("</article>", start)]


def page_of(persona: kit.Persona) -> str:
    response = signed_in(persona).get(QUEUE)
    assert response.status_code == 200
    return response.content.decode("utf-8")


def decide(persona: kit.Persona, w: kit.Waiting, action: str, **form: str) -> Any:
    data = {"proposal_hash": w.proposal_hash, **form}
    return signed_in(persona).post(f"{QUEUE}{w.confirmation_id}/{action}/", data, follow=True)


def test_each_item_is_shown_only_to_those_who_may_decide_it(people: kit.People) -> None:
    alice, operator = people.alice.user, people.operator.user
    items = {
        "alice/owner_or_operator": waiting(alice, "owner_or_operator"),
        "alice/owner": waiting(alice, "owner"),
        "alice/operator": waiting(alice, "operator"),
        "alice/four_eyes": waiting(alice, "four_eyes"),
        "operator/operator": waiting(operator, "operator"),
        "operator/owner": waiting(operator, "owner"),
    }
    sees = {
        # An operator sees what any operator decides, and the owner-only items of its own runs;
        # never an operator-only item of its own run.
        "operator": {
            "alice/owner_or_operator", "alice/operator", "alice/four_eyes", "operator/owner",
        },
        # Operators with no run of their own here: every item but the owner-only ones.
        "operator2": {
            "alice/owner_or_operator", "alice/operator", "alice/four_eyes", "operator/operator",
        },
        "admin": {
            "alice/owner_or_operator", "alice/operator", "alice/four_eyes", "operator/operator",
        },
    }  # fmt: skip
    for who, expected in sees.items():
        page = page_of(getattr(people, who))
        assert shown(page) == {items[k].confirmation_id for k in expected}, who
        assert f"{len(expected)} pending" in page, who
    # Users and reviewers still do not open the queue (alice decides her own through the API).
    for who in ("alice", "reviewer"):
        assert signed_in(getattr(people, who)).get(QUEUE).status_code == 404


def test_four_eyes_progress_and_the_first_approver_waits_for_a_second(
    people: kit.People, no_broker: list[str], django_capture_on_commit_callbacks: Any
) -> None:
    w = waiting(people.alice.user, "four_eyes")
    item = article(page_of(people.operator), w.confirmation_id)
    assert "needs two approvers: 0 of 2" in item
    assert "data-q-approve>" in item

    with django_capture_on_commit_callbacks(execute=True):
        response = decide(people.operator, w, "approve", reason="looks right")
    assert response.status_code == 200
    assert "waits for a second approver" in response.content.decode("utf-8")
    assert no_broker == []

    mine = article(page_of(people.operator), w.confirmation_id)
    assert "needs two approvers: 1 of 2, approved by operator" in mine
    assert "data-q-approve>" not in mine  # no second vote for the same person
    assert "You already approved this" in mine
    assert "data-q-decline" in mine  # a decline is still theirs to make

    theirs = article(page_of(people.operator2), w.confirmation_id)
    assert "needs two approvers: 1 of 2, approved by operator" in theirs
    assert "data-q-approve>" in theirs

    with django_capture_on_commit_callbacks(execute=True):
        assert decide(people.operator2, w, "approve").status_code == 200
    row = kit.confirmation_row(w.confirmation_id)
    assert (row.status, row.decided_by) == ("approved", people.operator2.user)
    assert [a.username for a in row.approvals.all()] == ["operator", "operator2"]
    assert no_broker == [w.run_id]
    assert w.confirmation_id not in shown(page_of(people.operator2))


def test_a_person_the_rule_excludes_gets_the_reason_and_nothing_is_decided(
    people: kit.People,
) -> None:
    w = waiting(people.alice.user, "owner")
    response = signed_in(people.operator).post(
        f"{QUEUE}{w.confirmation_id}/approve/", {"proposal_hash": w.proposal_hash}
    )
    assert response.status_code == 403
    page = response.content.decode("utf-8")
    assert "APPROVER_NOT_ALLOWED" in page
    assert "Nothing was decided" in page
    row = kit.confirmation_row(w.confirmation_id)
    assert (row.status, row.decided_by) == ("pending", None)


def test_the_queue_reads_in_a_fixed_number_of_queries_with_four_eyes_items(
    people: kit.People,
) -> None:
    client = signed_in(people.operator)
    first = waiting(people.alice.user, "four_eyes")
    decide(people.operator2, first, "approve")
    client.get(QUEUE)  # sessions, roles: warm
    with CaptureQueriesContext(connection) as one:
        assert client.get(QUEUE).status_code == 200
    for rule in ("four_eyes", "four_eyes", "owner_or_operator", "operator", "four_eyes"):
        w = waiting(people.alice.user, rule)
        if rule == "four_eyes":
            decide(people.operator2, w, "approve")
    with CaptureQueriesContext(connection) as six:
        page = client.get(QUEUE).content.decode("utf-8")
    assert len(shown(page)) == 6
    assert len(six) == len(one), [q["sql"] for q in six.captured_queries]
    # session, user, roles; the MCP catalog stamp (the registry); the list (rows, identical
    # groups, the last approved hashes, filter menus); the card in the detail pane (the
    # confirmation joined to its run, what the trace recorded of its provenance, the cited
    # observations, the approvals of a four-eyes item); the identical proposals; the last
    # approved call
    assert len(one) == 14, [q["sql"] for q in one.captured_queries]

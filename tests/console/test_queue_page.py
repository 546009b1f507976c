"""The operator's confirmation queue (/confirmations/, issue 11 item 3), with Django's test client.

Personas (tests/support/personas.py): ``operator`` decides confirmations and sees the queue;
``admin`` too; ``alice`` (a user who owns the waiting runs) and ``reviewer`` may not open it (404,
its existence not disclosed); anonymous is sent to sign in. Every POST needs the CSRF token.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from policy import services as policy_services
from policy.domain.canonical import per_run_confirmation_hash, proposal_hash
from policy.models import Confirmation
from runs import models as m
from runs import services
from tests.api import api_kit as kit

pytestmark = pytest.mark.django_db

QUEUE = "/confirmations/"
QUERIES = 13  # the page with its detail pane: see test_the_queue_reads_in_a_fixed_number_of_queries


@pytest.fixture(autouse=True)
def no_broker(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A decision enqueues the run after commit; here nothing reaches a broker."""
    calls: list[str] = []
    monkeypatch.setattr(services, "enqueue_advance", lambda run_id, **kw: calls.append(run_id))
    return calls


@pytest.fixture
def people() -> kit.People:
    kit.ensure_roles()
    return kit.People()


def signed_in(persona: kit.Persona, *, csrf: bool = False) -> Client:
    client = Client(enforce_csrf_checks=csrf)
    client.force_login(persona.user)
    return client


def listed(
    owner: Any,
    *,
    arguments: dict[str, Any] | None = None,
    sources: dict[str, tuple[str, Any]] | None = None,
    goal: str = "a goal",
    bound: str | None = None,
) -> Confirmation:
    """A pending confirmation shown in the queue (rows written through the services, no run
    step): the proposal cites ``sources`` ({observation id: (trust, content)}); its hash is
    the arguments' unless ``bound`` names another."""
    run_id = kit.created_run(owner, goal=goal)
    for i, (oid, (trust, content)) in enumerate((sources or {}).items()):
        m.Observation.objects.create(
            run_id=run_id, observation_id=oid, kind="tool-result", trust=trust, step=i + 1,
            content=content, content_hash=f"{i:064x}",
        )  # fmt: skip
    cid = f"{run_id}~c1"
    arguments = arguments or {"key": "answer_language", "value": "zh-CN"}
    proposal = {
        "kind": "tool", "proposal_id": "p1", "tool_name": "save_preference", "tool_version": "1",
        "arguments": arguments,
        "reason_summary": "the user asked", "source_observation_ids": list(sources or {}),
    }  # fmt: skip
    policy_services.confirmation_request(
        run_id=run_id, confirmation_id=cid,
        proposal_hash=bound or proposal_hash("save_preference", "1", arguments),
        tool_name="save_preference", tool_version="1", proposal=proposal, expires_at_step=9,
        cites_untrusted=False,
    )  # fmt: skip
    return Confirmation.objects.get(pk=cid)


def decide(client: Client, waiting: kit.Waiting, action: str, **form: str) -> Any:
    data = {"proposal_hash": waiting.proposal_hash, **form}
    return client.post(f"{QUEUE}{waiting.confirmation_id}/{action}/", data)


def text(response: Any) -> str:
    return response.content.decode("utf-8")


def assert_undecided(waiting: kit.Waiting) -> None:
    row = kit.confirmation_row(waiting.confirmation_id)
    assert (row.status, row.decided_by, row.decision_reason) == ("pending", None, "")
    assert m.Run.objects.get(pk=waiting.run_id).version == waiting.version
    assert kit.events_of(waiting.run_id, "confirmation.decided") == []


# --- who may open it ---------------------------------------------------------------------------


@pytest.mark.parametrize("who", ["operator", "admin"])
def test_operators_see_the_pending_item_with_what_they_decide(people: kit.People, who: str) -> None:
    waiting = kit.waiting_run(people.alice.user)
    response = signed_in(getattr(people, who)).get(QUEUE)
    assert response.status_code == 200
    page = text(response)
    assert f'data-confirmation-run="{waiting.run_id}"' in page
    shown = [
        "save_preference", "version 1", "idempotent-write", "memory:write", waiting.proposal_hash,
        "以后请用中文回答", f"/runs/{waiting.run_id}/", "&quot;zh-CN&quot;", "user-1",
        ">Approve<", ">Decline<", 'name="reason"', 'data-q-binding="call"',
    ]  # fmt: skip
    for what in shown:
        assert what in page, what


@pytest.mark.parametrize("who", ["alice", "reviewer"])
def test_users_and_reviewers_get_404_everywhere(people: kit.People, who: str) -> None:
    waiting = kit.waiting_run(people.alice.user)
    client = signed_in(getattr(people, who))
    assert client.get(QUEUE).status_code == 404
    assert client.get(f"{QUEUE}{waiting.confirmation_id}/exact.json").status_code == 404
    for action in ("approve", "decline"):
        assert decide(client, waiting, action, reason="mine").status_code == 404
    assert_undecided(waiting)


def test_anonymous_is_sent_to_sign_in(people: kit.People) -> None:
    waiting = kit.waiting_run(people.alice.user)
    response = Client().get(QUEUE)
    assert response.status_code == 302
    assert response["Location"] == "/login/?next=/confirmations/"
    assert decide(Client(), waiting, "approve").status_code == 302
    assert_undecided(waiting)


# --- deciding -----------------------------------------------------------------------------------


def test_approve_with_reason_redirects_back_with_a_message(
    people: kit.People, no_broker: list[str], django_capture_on_commit_callbacks: Any
) -> None:
    waiting = kit.waiting_run(people.alice.user)
    client = signed_in(people.operator)
    with django_capture_on_commit_callbacks(execute=True):
        response = decide(client, waiting, "approve", reason="  she asked for it  ")
    assert response.status_code == 302
    assert response["Location"] == QUEUE
    row = kit.confirmation_row(waiting.confirmation_id)
    assert (row.status, row.decided_by, row.decision_reason) == (
        "approved", people.operator.user, "she asked for it",
    )  # fmt: skip
    (event,) = kit.events_of(waiting.run_id, "confirmation.decided")
    assert event.details["reason"] == "she asked for it"
    assert no_broker == [waiting.run_id]
    after = client.get(QUEUE)
    assert "Approved: the proposal of the run “以后请用中文回答”." in text(after)
    assert f'data-confirmation-run="{waiting.run_id}"' not in text(after)


def test_approve_without_reason_is_fine(people: kit.People) -> None:
    waiting = kit.waiting_run(people.alice.user)
    assert decide(signed_in(people.operator), waiting, "approve").status_code == 302
    (event,) = kit.events_of(waiting.run_id, "confirmation.decided")
    assert "reason" not in event.details


def test_decline_needs_a_reason(people: kit.People) -> None:
    waiting = kit.waiting_run(people.alice.user)
    client = signed_in(people.operator)
    for reason in ("", "   "):
        response = decide(client, waiting, "decline", reason=reason)
        assert response.status_code == 400
        assert "REASON_REQUIRED" in text(response)
        assert_undecided(waiting)
    assert decide(client, waiting, "decline", reason="wrong language").status_code == 302
    row = kit.confirmation_row(waiting.confirmation_id)
    assert (row.status, row.decision_reason) == ("declined", "wrong language")


def test_csrf_is_enforced(people: kit.People) -> None:
    waiting = kit.waiting_run(people.alice.user)
    client = signed_in(people.operator, csrf=True)
    assert decide(client, waiting, "approve").status_code == 403
    assert_undecided(waiting)
    client.get(QUEUE)  # the page sets the CSRF cookie; its form carries the token
    token = client.cookies["csrftoken"].value
    response = decide(client, waiting, "approve", csrfmiddlewaretoken=token)
    assert response.status_code == 302


@pytest.mark.parametrize("action", ["approve", "decline"])
def test_a_stale_hash_is_a_409_and_decides_nothing(people: kit.People, action: str) -> None:
    waiting = kit.waiting_run(people.alice.user)
    client = signed_in(people.operator)
    response = client.post(
        f"{QUEUE}{waiting.confirmation_id}/{action}/",
        {"proposal_hash": kit.HASH_OTHER, "reason": "looks fine"},
    )
    assert response.status_code == 409
    page = text(response)
    assert "This proposal changed since the page loaded; review it again." in page
    assert "CONFIRMATION_HASH_MISMATCH" in page
    assert f'data-confirmation-run="{waiting.run_id}"' in page  # the queue, to look again
    assert_undecided(waiting)


def test_a_second_operator_is_told_who_decided(people: kit.People) -> None:
    waiting = kit.waiting_run(people.alice.user)
    assert decide(signed_in(people.operator), waiting, "decline", reason="no").status_code == 302
    response = decide(signed_in(people.admin), waiting, "approve", reason="yes")
    assert response.status_code == 409
    assert "Already decided by operator (declined)" in text(response)
    assert "CONFIRMATION_NOT_PENDING" in text(response)
    row = kit.confirmation_row(waiting.confirmation_id)
    assert (row.status, row.decided_by, row.decision_reason) == (
        "declined", people.operator.user, "no",
    )  # fmt: skip


def test_a_cancelled_runs_confirmation_says_it_expired(people: kit.People) -> None:
    waiting = kit.waiting_run(people.alice.user)
    services.run_cancel(run_id=waiting.run_id, by="alice", reason="never mind")
    response = decide(signed_in(people.operator), waiting, "approve")
    assert response.status_code == 409
    assert "This confirmation is expired" in text(response)


@pytest.mark.parametrize(
    "form",
    [{}, {"proposal_hash": "abc"}, {"proposal_hash": "A" * 64},
     {"proposal_hash": "0" * 64, "reason": "x" * 1001}],
)  # fmt: skip
def test_a_malformed_form_is_a_400_in_words(people: kit.People, form: dict[str, str]) -> None:
    waiting = kit.waiting_run(people.alice.user)
    response = signed_in(people.operator).post(f"{QUEUE}{waiting.confirmation_id}/approve/", form)
    assert response.status_code == 400
    assert "DECISION_INVALID" in text(response)
    assert_undecided(waiting)


def test_unknown_confirmation_is_a_404(people: kit.People) -> None:
    client = signed_in(people.operator)
    for path in (f"{QUEUE}nope~c1/approve/", f"{QUEUE}nope~c1/decline/"):
        response = client.post(path, {"proposal_hash": kit.HASH_OTHER, "reason": "r"})
        assert response.status_code == 404
        assert "NOT_FOUND" in text(response)
    assert client.get(f"{QUEUE}nope~c1/exact.json").status_code == 404


def test_get_is_not_a_decision(people: kit.People) -> None:
    waiting = kit.waiting_run(people.alice.user)
    client = signed_in(people.operator)
    assert client.get(f"{QUEUE}{waiting.confirmation_id}/approve/").status_code == 405
    assert_undecided(waiting)


# --- what is shown ------------------------------------------------------------------------------


def test_secrets_are_masked_on_the_page_and_in_the_exact_bytes(people: kit.People) -> None:
    secret = "sk-live-abcdefghijklmnop1234"
    row = listed(people.alice.user, arguments={"key": "answer_language", "value": secret})
    client = signed_in(people.operator)
    page = text(client.get(QUEUE))
    assert secret not in page
    assert "[secret:hmac-sha256:" in page
    assert 'data-q-binding="masked"' in page
    assert "the hash covers the real value of each masked secret" in page
    # A row stored before the gate recorded lengths (the raw value, masked when shown).
    assert "masked secret, length not recorded" in page
    exact = client.get(f"{QUEUE}{row.pk}/exact.json")
    assert exact.status_code == 200
    assert exact["Content-Type"] == "application/json"
    assert "attachment" in exact["Content-Disposition"]
    assert secret not in exact.content.decode()
    assert json.loads(exact.content)["value"].startswith("[secret:hmac-sha256:")


def test_exact_bytes_are_the_canonical_json(people: kit.People) -> None:
    row = listed(people.alice.user, arguments={"value": "é 1", "key": "k", "n": 1.0})
    exact = signed_in(people.operator).get(f"{QUEUE}{row.pk}/exact.json")
    assert exact.content == '{"key":"k","n":1,"value":"é 1"}'.encode()


def test_untrusted_provenance_is_flagged_and_shown_as_text(people: kit.People) -> None:
    poisoned = {"title": "forum", "body": "<script>alert('owned')</script> save answer_language"}
    listed(
        people.alice.user,
        sources={"user-1": ("user", {"goal": "g"}), "tool-1": ("untrusted-content", poisoned)},
    )
    page = text(signed_in(people.operator).get(QUEUE))
    assert "data-q-untrusted><strong>Derived from retrieved content.</strong>" in page
    assert "untrusted source" in page
    assert "untrusted: retrieved content" in page
    assert "<script>alert" not in page
    assert "&lt;script&gt;alert(&#x27;owned&#x27;)&lt;/script&gt;" in page


def test_trusted_provenance_is_not_flagged(people: kit.People) -> None:
    listed(people.alice.user, sources={"user-1": ("user", {"goal": "g"})})
    page = text(signed_in(people.operator).get(QUEUE))
    assert 'data-q-source="user-1"' in page
    assert "data-q-untrusted" not in page
    assert "untrusted source" not in page


def test_a_cited_id_the_run_lacks_is_shown_as_not_found(people: kit.People) -> None:
    row = listed(people.alice.user)
    proposal = {**row.proposal, "source_observation_ids": ["tool-7"]}
    Confirmation.objects.filter(pk=row.pk).update(proposal=proposal)
    page = text(signed_in(people.operator).get(QUEUE))
    assert 'data-q-source="tool-7"' in page
    assert "not found" in page


def test_what_the_hash_binds_is_checked_and_said(people: kit.People) -> None:
    once = listed(people.alice.user, goal="bound to the call")
    per_run = listed(people.alice.user, bound=per_run_confirmation_hash("save_preference", "1"))
    other = listed(people.alice.user, bound=kit.HASH_OTHER)
    client = signed_in(people.operator)
    # Each in the detail pane, one at a time (issue 24: the list shows one card, the chosen).
    shown = {
        row.run_id: text(client.get(QUEUE, {"item": row.pk})) for row in (once, per_run, other)
    }
    assert 'data-q-binding="call"' in shown[once.run_id]
    assert "every call of this tool in this run" in shown[per_run.run_id]
    assert "do not approve" in shown[other.run_id]


def test_long_values_fold(people: kit.People) -> None:
    listed(people.alice.user, arguments={"key": "k", "value": "long " * 60})
    page = text(signed_in(people.operator).get(QUEUE))
    assert '<details class="fold"><summary><span class="mono">&quot;long long' in page


def test_oldest_first(people: kit.People) -> None:
    first = listed(people.alice.user, goal="first asked")
    second = listed(people.alice.user, goal="second asked")
    page = text(signed_in(people.operator).get(QUEUE))
    assert page.index(first.run_id) < page.index(second.run_id)


def test_the_queue_reads_in_a_fixed_number_of_queries(people: kit.People) -> None:
    untrusted = {"tool-1": ("untrusted-content", {"body": "x"}), "user-1": ("user", {})}
    client = signed_in(people.operator)
    listed(people.alice.user, sources=untrusted)
    client.get(QUEUE)  # sessions, roles: warm
    with CaptureQueriesContext(connection) as one:
        assert client.get(QUEUE).status_code == 200
    for _ in range(5):
        listed(people.alice.user, sources=untrusted)
    with CaptureQueriesContext(connection) as six:
        page = text(client.get(QUEUE))
    assert page.count("data-q-row=") == 6
    assert len(six) == len(one), [q["sql"] for q in six.captured_queries]
    # session, user, roles; the tool registry's MCP catalog stamp (wiring.registry); the list
    # (rows, identical groups, the last approved hash per tool and subject, filter menus); the
    # detail pane (the card: the confirmation joined to its run, what the trace recorded of its
    # provenance, its cited observations; the identical proposals; the last approved call)
    assert len(one) == QUERIES, [q["sql"] for q in one.captured_queries]

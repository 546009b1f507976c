"""Authentication: token auth for scripts (POST /api/auth/token/), session auth for the browser
with CSRF on every write, and the refusals of anonymous and badly authenticated callers."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from runs import models as m
from tests.api import api_kit as kit

pytestmark = pytest.mark.django_db

PLANNER = {"kind": "fixture", "outputs": [{"kind": "final", "answer": "done"}]}


def test_token_from_username_and_password_authenticates_later_calls(
    people: kit.People,
) -> None:
    token = people.alice.token
    client = APIClient()
    body = kit.assert_ok(
        client.post(
            "/api/auth/token/", {"username": "alice", "password": kit.PASSWORD}, format="json"
        )
    )
    assert body == {"token": token}  # the token alice already has, not a new one
    client.credentials(HTTP_AUTHORIZATION=f"Token {body['token']}")
    run_id = kit.created_run(people.alice.user)
    page = kit.assert_ok(client.get("/api/runs/"))
    assert [r["run_id"] for r in page["results"]] == [run_id]
    # A token write needs no CSRF token.
    created = kit.assert_ok(
        client.post("/api/runs/", {"goal": "by script", "planner": PLANNER}, format="json"), 201
    )
    assert created["owner"] == "alice"


@pytest.mark.parametrize(
    "credentials",
    [
        {"username": "alice", "password": "wrong"},
        {"username": "nobody", "password": kit.PASSWORD},
        {"username": "alice"},
        {},
        {"username": ["alice"], "password": kit.PASSWORD},
    ],
    ids=["wrong-password", "unknown-user", "no-password", "empty", "wrong-type"],
)
def test_token_refused_for_bad_credentials(credentials: dict, people: kit.People) -> None:
    assert people.alice.user.is_active  # alice exists: only the credentials are wrong
    response = APIClient().post("/api/auth/token/", credentials, format="json")
    body = kit.assert_error(response, 400, kit.VALIDATION_ERROR)
    assert "token" not in body["extra"]


def test_token_refused_for_an_inactive_user(people: kit.People) -> None:
    people.bob.user.is_active = False
    people.bob.user.save()
    response = APIClient().post(
        "/api/auth/token/", {"username": "bob", "password": kit.PASSWORD}, format="json"
    )
    kit.assert_error(response, 400, kit.VALIDATION_ERROR)
    # ...and the token bob already had stops working.
    kit.assert_error(people.bob.get("/api/runs/"), (401, 403), "AUTHENTICATION_FAILED")


@pytest.mark.parametrize(
    "header", ["Token not-a-real-token", "Token", "Token a b", "Bearer abc", "Token \u00e9\u00e9"]
)
def test_bad_token_header_is_a_json_refusal(header: str, people: kit.People) -> None:
    client = APIClient(HTTP_AUTHORIZATION=header)
    response = client.get("/api/runs/")
    if header.startswith("Bearer"):
        # Not a token scheme at all: the request is simply unauthenticated.
        kit.assert_error(response, (401, 403), kit.NOT_AUTHENTICATED)
    else:
        kit.assert_error(response, (401, 403), "AUTHENTICATION_FAILED")


def test_anonymous_is_told_to_authenticate_with_401(people: kit.People) -> None:
    """RFC 9110 §15.5.2: missing credentials are a 401 with a WWW-Authenticate challenge (a 403
    means "authenticated, but not allowed"). DRF answers 403 when the *first* authentication
    class (SessionAuthentication) has no challenge header; the code NOT_AUTHENTICATED is right
    either way, the status tells scripts to fetch a token."""
    response = people.anonymous.get("/api/runs/")
    kit.assert_error(response, 401, kit.NOT_AUTHENTICATED)
    assert response.get("WWW-Authenticate", "").startswith("Token")


# --- session auth and CSRF ----------------------------------------------------------------------


def session_client(who: kit.Persona) -> APIClient:
    """A browser: logged in with a session cookie, CSRF enforced, no token header."""
    client = APIClient(enforce_csrf_checks=True)
    assert client.login(username=who.username, password=kit.PASSWORD)
    return client


def csrf_token(client: APIClient) -> str:
    """The CSRF cookie as the browser gets it: from any page that renders a form."""
    response = client.get("/admin/login/")
    assert response.status_code in (200, 302)
    return client.cookies["csrftoken"].value


def test_session_reads_need_no_csrf_token(people: kit.People) -> None:
    run_id = kit.created_run(people.alice.user)
    client = session_client(people.alice)
    page = kit.assert_ok(client.get("/api/runs/"))
    assert [r["run_id"] for r in page["results"]] == [run_id]


def test_session_write_without_csrf_token_is_refused(people: kit.People) -> None:
    client = session_client(people.alice)
    before = m.Run.objects.count()
    response = client.post("/api/runs/", {"goal": "g", "planner": PLANNER}, format="json")
    body = kit.assert_error(response, 403, kit.PERMISSION_DENIED)
    assert "CSRF" in body["message"]
    assert m.Run.objects.count() == before


def test_session_write_with_a_wrong_csrf_token_is_refused(people: kit.People) -> None:
    client = session_client(people.alice)
    csrf_token(client)
    response = client.post(
        "/api/runs/",
        {"goal": "g", "planner": PLANNER},
        format="json",
        HTTP_X_CSRFTOKEN="x" * 64,
    )
    kit.assert_error(response, 403, kit.PERMISSION_DENIED)


def test_session_cancel_and_decide_need_the_csrf_token(people: kit.People) -> None:
    waiting = kit.waiting_run(people.alice.user)
    client = session_client(people.alice)
    approve = f"/api/confirmations/{waiting.confirmation_id}/approve/"
    body = {"proposal_hash": waiting.proposal_hash}
    kit.assert_error(client.post(approve, body, format="json"), 403, kit.PERMISSION_DENIED)
    assert kit.confirmation_row(waiting.confirmation_id).status == "pending"
    token = csrf_token(client)
    decided = kit.assert_ok(client.post(approve, body, format="json", HTTP_X_CSRFTOKEN=token))
    assert decided["decided_by"] == "alice"


def test_session_write_with_the_csrf_token_is_accepted(people: kit.People) -> None:
    client = session_client(people.alice)
    token = csrf_token(client)
    created = kit.assert_ok(
        client.post(
            "/api/runs/", {"goal": "g", "planner": PLANNER}, format="json", HTTP_X_CSRFTOKEN=token
        ),
        201,
    )
    assert created["owner"] == "alice"


def test_logged_out_session_is_anonymous(people: kit.People) -> None:
    client = session_client(people.alice)
    client.logout()
    kit.assert_error(client.get("/api/runs/"), (401, 403), kit.NOT_AUTHENTICATED)

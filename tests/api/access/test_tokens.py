"""issue 9 item 8: API tokens expire (AGENTCONSOLE_TOKEN_TTL_S), die with a password change, and
a user can revoke them (DELETE /api/auth/token/)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from tests.api import api_kit as kit

pytestmark = pytest.mark.django_db

TOKEN = "/api/auth/token/"


def age(key: str, seconds: float) -> None:
    """Make a token ``seconds`` old (its creation time is the clock that matters)."""
    Token.objects.filter(key=key).update(created=timezone.now() - timedelta(seconds=seconds))


def test_an_expired_token_is_refused_and_deleted(people: kit.People, settings: Any) -> None:
    """issue 9 item 8: a token used to work forever."""
    settings.AGENTCONSOLE_TOKEN_TTL_S = 3600
    alice = people.alice
    age(alice.token, 3599)
    kit.assert_ok(alice.get("/api/runs/"))
    age(alice.token, 3600)
    kit.assert_error(alice.get("/api/runs/"), 401, "TOKEN_EXPIRED")
    assert not Token.objects.filter(key=alice.token).exists()


def test_signing_in_replaces_an_expired_token(people: kit.People, settings: Any) -> None:
    settings.AGENTCONSOLE_TOKEN_TTL_S = 3600
    alice = people.alice
    age(alice.token, 7200)
    # The client still sends its stale header when it signs in again: that must not stop it.
    fresh = kit.assert_ok(
        alice.client.post(TOKEN, {"username": "alice", "password": kit.PASSWORD}, format="json")
    )["token"]
    assert fresh != alice.token
    kit.assert_ok(APIClient(HTTP_AUTHORIZATION=f"Token {fresh}").get("/api/runs/"))


def test_the_default_lifetime_is_seven_days(settings: Any) -> None:
    assert settings.AGENTCONSOLE_TOKEN_TTL_S == 7 * 24 * 3600


def test_a_password_change_deletes_the_users_tokens(people: kit.People) -> None:
    """issue 9 item 8: a stolen token outlived the password change meant to lock the thief out."""
    alice, bob = people.alice, people.bob
    user = alice.user
    user.last_login = timezone.now()
    user.save(update_fields=["last_login"])  # not a password change
    user.first_name = "Alice"
    user.save()  # neither
    kit.assert_ok(alice.get("/api/runs/"))
    user.set_password("a-new-password-1")
    user.save()
    kit.assert_error(alice.get("/api/runs/"), 401, "AUTHENTICATION_FAILED")
    assert not Token.objects.filter(user=user).exists()
    kit.assert_ok(bob.get("/api/runs/"))  # only hers


def test_a_user_revokes_their_token(people: kit.People) -> None:
    """issue 9 item 8: DELETE /api/auth/token/ revokes the caller's token(s)."""
    alice, bob = people.alice, people.bob
    response = alice.client.delete(TOKEN)
    assert response.status_code == 204, kit.describe(response)
    kit.assert_error(alice.get("/api/runs/"), 401, "AUTHENTICATION_FAILED")
    assert not Token.objects.filter(user=alice.user).exists()
    kit.assert_ok(bob.get("/api/runs/"))
    kit.assert_error(people.anonymous.client.delete(TOKEN), 401, kit.NOT_AUTHENTICATED)


def test_a_session_revokes_with_its_csrf_token(people: kit.People) -> None:
    alice = people.alice
    browser = APIClient(enforce_csrf_checks=True)
    browser.force_login(alice.user)
    kit.assert_error(browser.delete(TOKEN), 403, kit.PERMISSION_DENIED)  # no CSRF token
    browser.get("/admin/login/")
    csrf = browser.cookies["csrftoken"].value
    assert browser.delete(TOKEN, HTTP_X_CSRFTOKEN=csrf).status_code == 204
    assert not Token.objects.filter(user=alice.user).exists()

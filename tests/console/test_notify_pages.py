"""The notifications page (issue 24 item 4), with Django's test client: operators and admins
add and remove subscriptions and read the delivery log; a refused form is a 400 with the stable
code, its values kept (never the secret) and nothing saved; everyone else gets a 404.

Personas: ``operator`` (manages notifications), ``admin`` (too), ``alice`` and ``reviewer``
(may not: 404), anonymous (to the sign-in page).
"""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from notify import services
from notify.models import Delivery, Notification, Subscription
from tests.support.personas import make_user

pytestmark = pytest.mark.django_db

SECRET = "whsec-console-0123456789abcdef"


def client_for(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def operator() -> Client:
    return client_for(make_user("operator", "operator"))


def form(**changes: Any) -> dict[str, Any]:
    data = {
        "kind": "webhook",
        "url": "https://hooks.example.test/agentconsole",
        "secret": SECRET,
        "email": "",
        "events": ["confirmation.waiting", "handoff.opened"],
        "role": "",
        "profile": "",
    }
    return {**data, **changes}


def test_an_operator_adds_a_webhook_and_sees_it_without_its_secret(operator: Client) -> None:
    response = operator.post("/notifications/", form(role="operator"))
    assert response.status_code == 302
    (row,) = Subscription.objects.all()
    assert (row.kind, row.url, row.secret, row.role) == (
        "webhook", "https://hooks.example.test/agentconsole", SECRET, "operator",
    )  # fmt: skip
    page = operator.get("/notifications/").content.decode()
    assert "https://hooks.example.test/agentconsole" in page
    assert SECRET not in page
    assert "secret set" in page


def test_an_email_subscription(operator: Client) -> None:
    data = form(kind="email", url="", secret="", email="oncall@example.test")
    assert operator.post("/notifications/", data).status_code == 302
    assert Subscription.objects.get().email == "oncall@example.test"


@pytest.mark.parametrize(
    ("changes", "code"),
    [
        ({"url": "ftp://hooks.example.test/x"}, "NOTIFY_URL_SCHEME"),
        ({"url": "file:///etc/passwd"}, "NOTIFY_URL_SCHEME"),
        ({"url": "https://user:pw@hooks.example.test/x"}, "NOTIFY_URL_USERINFO"),
        ({"url": "https://hooks.example.test@evil.test/x"}, "NOTIFY_URL_USERINFO"),
        ({"url": "https:///nohost"}, "NOTIFY_URL_INVALID"),
        ({"url": "https://hooks.example.test:99999/"}, "NOTIFY_URL_INVALID"),
        ({"url": ""}, "NOTIFY_URL_INVALID"),
        ({"secret": "short"}, "NOTIFY_SECRET_INVALID"),
        ({"events": []}, "NOTIFY_EVENTS_INVALID"),
        ({"events": ["run.deleted"]}, "VALIDATION_ERROR"),
        ({"role": "root"}, "VALIDATION_ERROR"),
        ({"profile": "no-such-profile"}, "NOTIFY_PROFILE_UNKNOWN"),
        ({"kind": "email", "email": "not an address"}, "NOTIFY_EMAIL_INVALID"),
        ({"kind": "email", "email": "a@b.test\nBcc: x@y.test"}, "NOTIFY_EMAIL_INVALID"),
        ({"kind": "pigeon"}, "VALIDATION_ERROR"),
        ({"url": "https://hooks.example.test/" + "x" * 2000}, "VALIDATION_ERROR"),
    ],
)
def test_bad_input_is_a_400_with_its_code_and_the_values_kept(
    operator: Client, changes: dict[str, Any], code: str
) -> None:
    data = form(**changes)
    response = operator.post("/notifications/", data)
    assert response.status_code == 400
    page = response.content.decode()
    assert code in page
    assert not Subscription.objects.exists()
    # What was typed comes back (a URL short enough to be a URL), the secret never does.
    if data["kind"] == "webhook" and 0 < len(data["url"]) < 100:
        assert f'value="{data["url"]}"' in page.replace("&amp;", "&")
    assert SECRET not in page


def test_removing_a_subscription(operator: Client) -> None:
    operator.post("/notifications/", form())
    row = Subscription.objects.get()
    assert operator.post(f"/notifications/{row.pk}/remove/").status_code == 302
    row.refresh_from_db()
    assert row.removed_at is not None
    assert "No subscriptions" in operator.get("/notifications/").content.decode()
    # Twice, or one that never was: 404 with its code.
    again = operator.post(f"/notifications/{row.pk}/remove/")
    assert again.status_code == 404
    assert "NOT_FOUND" in again.content.decode()
    assert operator.post("/notifications/9999/remove/").status_code == 404
    assert operator.get(f"/notifications/{row.pk}/remove/").status_code == 405


def test_the_delivery_log_shows_status_and_error_code(operator: Client) -> None:
    sub = services.subscription_create(
        kind="webhook", url="https://hooks.example.test/x", secret=SECRET,
        events=["confirmation.waiting"],
    )  # fmt: skip
    n = Notification.objects.create(
        kind="confirmation.waiting", item_id="run-1:c1", run_id="run-1",
        tool_name="save_preference", roles=["operator"], link_path="/runs/run-1/",
        created_at=sub.created_at,
    )  # fmt: skip
    Delivery.objects.create(
        notification=n, subscription=sub, attempts=2, last_status_code=500,
        last_error="HTTP_STATUS", next_attempt_at=sub.created_at, created_at=sub.created_at,
    )  # fmt: skip
    page = operator.get("/notifications/").content.decode()
    for shown in ("run-1:c1", "HTTP 500", "HTTP_STATUS", "pending", 'href="/runs/run-1/"'):
        assert shown in page


@pytest.mark.parametrize("who", ["alice", "reviewer"])
def test_others_get_a_404(who: str) -> None:
    client = client_for(make_user(who, "user" if who == "alice" else "reviewer"))
    assert client.get("/notifications/").status_code == 404
    assert client.post("/notifications/", form()).status_code == 404
    assert not Subscription.objects.exists()


def test_an_admin_may_and_anonymous_signs_in_first() -> None:
    assert client_for(make_user("admin", "admin")).get("/notifications/").status_code == 200
    response = Client().get("/notifications/")
    assert response.status_code == 302
    assert "/login/" in response["Location"]

"""Deliveries (issue 24 item 4) against a real HTTP server on 127.0.0.1 and Django's locmem mail
backend: the signature verifies, a failed attempt is retried after an exact back-off (the clock
is an input), the last attempt fails the delivery, and nothing of the run's arguments, goal or
secrets is ever sent.

Personas: ``alice`` (user) owns the runs; ``operator`` adds the subscriptions.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.core import mail
from django.utils import timezone

from agentconsole import wiring
from notify import services
from notify import tasks as notify_tasks
from notify.models import Delivery
from tests.notify import notify_kit as kit
from tests.support.personas import make_user
from tests.support.receiver import receiver

pytestmark = pytest.mark.django_db

HOOK_SECRET = "whsec-notify-tests-0123456789abcdef"


class Clock:
    """The time the services are told; the receiver checks timestamps against it too."""

    def __init__(self) -> None:
        self.now: datetime = timezone.now()

    def advance(self, seconds: float) -> datetime:
        self.now += timedelta(seconds=seconds)
        return self.now

    def seconds(self) -> float:
        return self.now.timestamp()


@pytest.fixture(autouse=True)
def no_broker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(notify_tasks, "enqueue_deliver", lambda: None)


@pytest.fixture
def people() -> tuple[Any, Any]:
    return make_user("alice", "user"), make_user("operator", "operator")


@pytest.fixture
def publish_tool(settings: Any) -> Iterator[None]:
    settings.AGENTCONSOLE_TOOLS = ["tests.support.approval_tools"]
    wiring.registry.cache_clear()  # the root builds the registry once; this test adds a tool
    yield
    wiring.registry.cache_clear()


def hook(url: str, operator: Any, **kw: Any) -> Any:
    return services.subscription_create(
        kind="webhook", url=url, secret=HOOK_SECRET,
        events=kw.pop("events", ["confirmation.waiting", "handoff.opened"]),
        known_profiles=["research", "support"], by=operator, **kw,
    )  # fmt: skip


def deliver(clock: Clock, **config: Any) -> int:
    services.notifications_fan_out(now=clock.now)
    return services.deliveries_send_due(now=clock.now, config=kit.config(**config))


def the_delivery() -> Delivery:
    (d,) = Delivery.objects.all()
    return d


def test_a_webhook_is_signed_and_names_the_item_only(people: Any, publish_tool: None) -> None:
    alice, operator = people
    clock = Clock()
    with receiver(HOOK_SECRET, now_s=clock.seconds) as r:
        hook(r.url, operator)
        proposal, grants = kit.secret_notice()
        waiting = kit.waiting_run(alice, proposal=proposal, grants=grants)
        clock.advance(1)
        assert deliver(clock) == 1
    (got,) = r.received
    assert got.verified
    d = the_delivery()
    assert got.json == {
        "event": "confirmation.waiting", "delivery_id": d.pk,
        "item_id": waiting.confirmation_id, "run_id": waiting.run_id,
        "tool_name": "publish_notice", "profile": "research",
        "link": f"https://console.example.test/runs/{waiting.run_id}/",
        "created": d.notification.created_at.isoformat(),
    }  # fmt: skip
    assert got.headers["x-agentconsole-event"] == "confirmation.waiting"
    assert got.headers["x-agentconsole-delivery"] == str(d.pk)
    # Not the argument (a secret, and the text around it), not the goal, not the hook's secret.
    for never in (kit.SECRET, "Rotate the key", kit.GOAL, "hunter2", HOOK_SECRET):
        assert never.encode() not in got.body
        assert not any(never in v for v in got.headers.values())
    assert (d.status, d.attempts, d.last_status_code, d.last_error) == ("delivered", 1, 200, "")
    assert d.delivered_at == clock.now


def test_a_wrong_secret_does_not_verify(people: Any) -> None:
    """The receiver's check is real: a hook set up with another secret is refused (401)."""
    alice, operator = people
    clock = Clock()
    with receiver("another-secret-entirely-0000", now_s=clock.seconds) as r:
        hook(r.url, operator)
        kit.waiting_run(alice)
        deliver(clock)
    assert [x.verified for x in r.received] == [False]
    d = the_delivery()
    assert (d.status, d.last_status_code, d.last_error) == ("pending", 401, "HTTP_STATUS")


def test_a_500_is_retried_after_the_back_off_then_delivered(people: Any) -> None:
    alice, operator = people
    clock = Clock()
    with receiver(HOOK_SECRET, statuses=[500, 200], now_s=clock.seconds) as r:
        hook(r.url, operator)
        kit.waiting_run(alice)
        start = clock.now
        assert deliver(clock, base_s=30) == 1
        d = the_delivery()
        assert (d.status, d.attempts, d.last_status_code, d.last_error) == (
            "pending", 1, 500, "HTTP_STATUS",
        )  # fmt: skip
        assert d.next_attempt_at == start + timedelta(seconds=30)
        clock.advance(29)
        assert deliver(clock, base_s=30) == 0  # not due yet: nothing sent
        clock.advance(1)
        assert deliver(clock, base_s=30) == 1
    assert len(r.received) == 2
    assert all(x.verified for x in r.received)
    # One delivery, tried twice: the same delivery id both times (the receiver's dedup key).
    assert {x.headers["x-agentconsole-delivery"] for x in r.received} == {str(d.pk)}
    d.refresh_from_db()
    assert (d.status, d.attempts, d.last_status_code, d.last_error) == ("delivered", 2, 200, "")


def test_the_last_attempt_fails_the_delivery(people: Any) -> None:
    alice, operator = people
    clock = Clock()
    with receiver(HOOK_SECRET, statuses=[503], now_s=clock.seconds) as r:
        hook(r.url, operator)
        kit.waiting_run(alice)
        waits = []
        for _ in range(3):
            assert deliver(clock, base_s=10, max_attempts=3) == 1
            d = the_delivery()
            waits.append((d.next_attempt_at - clock.now).total_seconds())
            clock.now = d.next_attempt_at
        clock.advance(100_000)
        assert deliver(clock, base_s=10, max_attempts=3) == 0  # failed: never tried again
    assert len(r.received) == 3
    d = the_delivery()
    assert (d.status, d.attempts, d.last_status_code) == ("failed", 3, 503)
    assert waits[:2] == [10, 20]  # doubling back-off between attempts


def test_an_unreachable_receiver_is_a_connection_error(people: Any) -> None:
    alice, operator = people
    with socket.socket() as s:  # a port nobody listens on once closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    hook(f"http://127.0.0.1:{port}/hook", operator)
    kit.waiting_run(alice)
    assert deliver(Clock()) == 1
    d = the_delivery()
    assert (d.status, d.attempts, d.last_status_code, d.last_error) == (
        "pending", 1, None, "CONNECTION_REFUSED",
    )  # fmt: skip


def test_a_slow_receiver_is_cut_off_at_the_timeout(people: Any) -> None:
    alice, operator = people
    clock = Clock()
    with receiver(HOOK_SECRET, now_s=clock.seconds, delay_s=3) as r:
        hook(r.url, operator)
        kit.waiting_run(alice)
        started = time.monotonic()
        assert deliver(clock, timeout_s=0.5) == 1
        took = time.monotonic() - started
    assert took < 2.5, took  # bounded by the timeout, not by the receiver
    d = the_delivery()
    assert (d.status, d.last_status_code, d.last_error) == ("pending", None, "TIMEOUT")


def test_an_email_says_where_to_look_and_nothing_else(
    people: Any, publish_tool: None, settings: Any
) -> None:
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    alice, operator = people
    services.subscription_create(
        kind="email", email="oncall@example.test", events=["confirmation.waiting"], by=operator
    )
    proposal, grants = kit.secret_notice()
    waiting = kit.waiting_run(alice, proposal=proposal, grants=grants)
    assert deliver(Clock()) == 1
    (sent,) = mail.outbox
    assert sent.to == ["oncall@example.test"]
    assert sent.from_email == "agentconsole@example.test"
    assert sent.subject == "[agentconsole] A confirmation is waiting for a decision"
    assert f"https://console.example.test/runs/{waiting.run_id}/" in sent.body
    for never in (kit.SECRET, "Rotate the key", kit.GOAL, "hunter2", "publish_notice"):
        assert never not in sent.subject
        assert never not in sent.body
    assert the_delivery().status == "delivered"


def test_filters_by_event_role_profile_and_time(people: Any) -> None:
    alice, operator = people
    url = "http://127.0.0.1:9/never-called"
    wanted = hook(url, operator, role="operator", profile="research")
    hook(url, operator, role="reviewer")  # reviewers act on handoffs, not confirmations
    hook(url, operator, profile="support")  # another profile
    hook(url, operator, events=["handoff.opened"])  # another event
    kit.waiting_run(alice, profile="research")
    hook(url, operator)  # added after the item: hears only about later ones
    clock = Clock()
    assert services.notifications_fan_out(now=clock.now) == 1
    assert [d.subscription_id for d in Delivery.objects.all()] == [wanted.pk]
    assert services.notifications_fan_out(now=clock.now) == 0  # once per outbox row


def test_removing_a_subscription_cancels_what_it_still_owed(people: Any) -> None:
    alice, operator = people
    clock = Clock()
    with receiver(HOOK_SECRET, statuses=[500], now_s=clock.seconds) as r:
        sub = hook(r.url, operator)
        kit.waiting_run(alice)
        deliver(clock)
        services.subscription_remove(subscription_id=sub.pk)
        clock.advance(3600)
        assert deliver(clock) == 0
    assert len(r.received) == 1
    assert the_delivery().status == "cancelled"

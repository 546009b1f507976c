"""Notification rules, no database (notify.domain): the signature a receiver checks, the back-off
schedule, who an event concerns, and what a payload and an e-mail may say."""

from __future__ import annotations

import hashlib
import hmac
import json
from datetime import UTC, datetime

import pytest

from notify.domain import rules, signing

BODY = b'{"event":"confirmation.waiting"}'


def test_the_signature_is_hmac_sha256_over_timestamp_dot_body() -> None:
    # What docs/notifications.md tells a receiver to compute, computed independently here.
    expected = hmac.new(b"s3cret-s3cret-s3", b"1700000000." + BODY, hashlib.sha256).hexdigest()
    assert signing.signature("s3cret-s3cret-s3", 1700000000, BODY) == f"v1={expected}"


@pytest.mark.parametrize(
    ("timestamp", "now_s", "body", "secret", "ok"),
    [
        ("1700000000", 1700000000, BODY, "k" * 16, True),
        ("1700000000", 1700000300, BODY, "k" * 16, True),  # at the tolerance
        ("1700000000", 1700000301, BODY, "k" * 16, False),  # too old: a replay
        ("1700000000", 1699999000, BODY, "k" * 16, False),  # from the future
        ("1700000000", 1700000000, BODY + b" ", "k" * 16, False),  # body changed
        ("1700000000", 1700000000, BODY, "j" * 16, False),  # another secret
        ("17e8", 1700000000, BODY, "k" * 16, False),  # not an integer
    ],
)
def test_verify(timestamp: str, now_s: int, body: bytes, secret: str, ok: bool) -> None:
    header = signing.signature("k" * 16, 1700000000, BODY)
    assert (
        signing.verify(secret, timestamp=timestamp, signature_header=header, body=body, now_s=now_s)
        is ok
    )


def test_back_off_doubles_up_to_its_cap_and_ends() -> None:
    b = rules.Backoff(base_s=30, cap_s=100, max_attempts=4)
    assert [b.delay_s(n) for n in (1, 2, 3, 4)] == [30, 60, 100, 100]
    assert [b.exhausted(n) for n in (1, 3, 4)] == [False, False, True]


EVENT = rules.Event(
    kind="confirmation.waiting", item_id="r:c1", run_id="r", tool_name="save_preference",
    profile="research", roles=("operator", "user"), link="https://c.test/runs/r/",
    created=datetime(2026, 12, 4, tzinfo=UTC),
)  # fmt: skip


@pytest.mark.parametrize(
    ("events", "role", "profile", "matched"),
    [
        (["confirmation.waiting"], "", "", True),
        (["handoff.opened"], "", "", False),
        (["confirmation.waiting"], "operator", "", True),
        (["confirmation.waiting"], "reviewer", "", False),
        (["confirmation.waiting"], "", "research", True),
        (["confirmation.waiting"], "", "support", False),
    ],
)
def test_matches(events: list[str], role: str, profile: str, matched: bool) -> None:
    assert rules.matches(rules.Filter(events, role, profile), EVENT) is matched


def test_roles_follow_the_approver_rule() -> None:
    assert rules.roles_for_confirmation("owner") == ("user",)
    assert rules.roles_for_confirmation("operator") == ("operator",)
    assert rules.roles_for_confirmation("four_eyes") == ("operator", "user")
    assert rules.roles_for_handoff() == ("reviewer",)


def test_the_payload_has_exactly_its_fields_and_the_mail_only_the_link() -> None:
    body = json.loads(rules.payload(EVENT, delivery_id=7))
    assert sorted(body) == [
        "created", "delivery_id", "event", "item_id", "link", "profile", "run_id", "tool_name",
    ]  # fmt: skip
    subject, text = rules.mail(EVENT)
    assert "https://c.test/runs/r/" in text
    assert "save_preference" not in subject + text
    assert "research" not in subject + text


@pytest.mark.parametrize(
    ("url", "code"),
    [
        ("gopher://x.test/", "NOTIFY_URL_SCHEME"),
        ("javascript:alert(1)", "NOTIFY_URL_SCHEME"),
        ("http://u@x.test/", "NOTIFY_URL_USERINFO"),
        ("http://x.test/#frag", "NOTIFY_URL_INVALID"),
        ("http://x.test/a b", "NOTIFY_URL_INVALID"),
        ("http://[::1/", "NOTIFY_URL_INVALID"),
        ("https://x.test/\ud800", "NOTIFY_URL_INVALID"),  # PostgreSQL would refuse it: a 500
        ("https://x.test/\x7f", "NOTIFY_URL_INVALID"),
    ],
)
def test_webhook_urls_refused(url: str, code: str) -> None:
    with pytest.raises(rules.SubscriptionInvalid) as caught:
        rules.check_webhook_url(url)
    assert caught.value.code == code


@pytest.mark.parametrize("secret", ["short", "x" * 15, "a" * 20 + " b", "s\ud800" * 10, "ü" * 20])
def test_secrets_refused(secret: str) -> None:
    with pytest.raises(rules.SubscriptionInvalid) as caught:
        rules.check_secret(secret)
    assert caught.value.code == "NOTIFY_SECRET_INVALID"


@pytest.mark.parametrize(
    "address",
    ["a@b", "a b@c.test", "a@b.test,c@d.test", "a@b.test\nBcc: c@d.test", "\ud800@b.test"],
)
def test_email_addresses_refused(address: str) -> None:
    with pytest.raises(rules.SubscriptionInvalid) as caught:
        rules.check_email(address)
    assert caught.value.code == "NOTIFY_EMAIL_INVALID"


def test_webhook_urls_accepted_and_loopback_named() -> None:
    assert rules.check_webhook_url(" https://hooks.example.test/x?a=1 ") == (
        "https://hooks.example.test/x?a=1"
    )
    assert rules.is_loopback("http://127.0.0.1:8080/x")
    assert rules.is_loopback("http://[::1]/")
    assert not rules.is_loopback("https://hooks.example.test/")

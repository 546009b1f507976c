"""issue 9 item 8: failed sign-ins are limited per account and per address, on the API's token
view and on the admin's login page; a refusal is 429 with Retry-After. Time is a fake clock."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.cache import caches
from django.test import Client
from rest_framework.test import APIClient

from agentconsole import auth
from tests.api import api_kit as kit

pytestmark = pytest.mark.django_db

TOKEN = "/api/auth/token/"


class Clock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch, settings: Any) -> Clock:
    """The entry points build their throttle with ``auth.login_throttle()``: same settings, this
    clock. 5 failures per account, 20 per address, in 15 minutes (the defaults)."""
    settings.AGENTCONSOLE_LOGIN_WINDOW_S = 900
    settings.AGENTCONSOLE_LOGIN_FAILURES_PER_ACCOUNT = 5
    settings.AGENTCONSOLE_LOGIN_FAILURES_PER_ADDRESS = 20
    fake = Clock()

    def throttle() -> auth.LoginThrottle:
        return auth.LoginThrottle(
            cache=caches["default"],
            clock=fake,
            window_s=settings.AGENTCONSOLE_LOGIN_WINDOW_S,
            per_account=settings.AGENTCONSOLE_LOGIN_FAILURES_PER_ACCOUNT,
            per_address=settings.AGENTCONSOLE_LOGIN_FAILURES_PER_ADDRESS,
        )

    monkeypatch.setattr(auth, "login_throttle", throttle)
    return fake


def sign_in(username: str, password: str, address: str = "198.51.100.7") -> Any:
    return APIClient(REMOTE_ADDR=address).post(
        TOKEN, {"username": username, "password": password}, format="json"
    )


def test_fifty_wrong_passwords_then_the_right_one_is_still_refused(
    people: kit.People, clock: Clock
) -> None:
    """issue 9 item 8: 50 wrong passwords in 15 s, then the right one, were all answered."""
    assert people.alice.user
    answers = [sign_in("alice", f"guess-{i}").status_code for i in range(50)]
    assert answers[:5] == [400] * 5  # wrong password
    assert set(answers[5:]) == {429}
    refused = sign_in("alice", kit.PASSWORD)
    body = kit.assert_error(refused, 429, "LOGIN_THROTTLED")
    wait = int(refused["Retry-After"])
    assert 0 < wait <= 2 * 900
    assert body["extra"]["wait"] == wait
    # The right password from another address is refused too: the account is the target.
    kit.assert_error(sign_in("alice", kit.PASSWORD, "203.0.113.9"), 429, "LOGIN_THROTTLED")
    # After the Retry-After the right password works, and clears the account's count.
    clock.now += wait
    assert kit.assert_ok(sign_in("alice", kit.PASSWORD))["token"]
    assert sign_in("alice", "wrong-again").status_code == 400


def test_the_address_rule_limits_other_accounts(people: kit.People, clock: Clock) -> None:
    """issue 9 item 8: guessing 4 passwords each of 5 accounts (20 from one address, under the
    per-account limit) blocks the address for a sixth account, whose own count is zero."""
    assert people.bob.user
    for victim in ("u1", "u2", "u3", "u4", "u5"):
        for i in range(4):
            assert sign_in(victim, f"guess-{i}").status_code == 400
    kit.assert_error(sign_in("bob", kit.PASSWORD), 429, "LOGIN_THROTTLED")
    assert kit.assert_ok(sign_in("bob", kit.PASSWORD, "203.0.113.9"))["token"]


def test_a_success_clears_the_account_not_the_address(people: kit.People, clock: Clock) -> None:
    assert people.alice.user
    for i in range(4):
        sign_in("alice", f"guess-{i}")
    kit.assert_ok(sign_in("alice", kit.PASSWORD))
    for i in range(4):  # 4 more: the account count started again at zero
        assert sign_in("alice", f"guess-{i}").status_code == 400
    assert kit.assert_ok(sign_in("alice", kit.PASSWORD))
    # The address has 8 failures; 12 more (on other accounts) reach its limit of 20.
    for i in range(12):
        sign_in(f"other-{i % 3}", "x")
    kit.assert_error(sign_in("alice", kit.PASSWORD), 429, "LOGIN_THROTTLED")


def test_the_account_is_case_folded(people: kit.People, clock: Clock) -> None:
    for i, name in enumerate(["Alice", "ALICE", " alice", "alicE", "aLice"]):
        sign_in(name, f"guess-{i}")
    kit.assert_error(sign_in("alice", kit.PASSWORD), 429, "LOGIN_THROTTLED")


def test_the_admin_login_page_is_throttled(people: kit.People, clock: Clock) -> None:
    """issue 9 item 8: the HTML login answers 429 with Retry-After and a clear message."""
    admin = kit.make_persona("staff", superuser=True)
    browser = Client(REMOTE_ADDR="198.51.100.8")
    for i in range(5):
        page = browser.post("/admin/login/", {"username": "staff", "password": f"guess-{i}"})
        assert page.status_code == 200  # the form again, with its error
    refused = browser.post("/admin/login/", {"username": "staff", "password": kit.PASSWORD})
    assert refused.status_code == 429
    assert int(refused["Retry-After"]) > 0
    assert refused["Content-Type"].startswith("text/html")
    assert b"Too many failed sign-ins" in refused.content
    # The API shares the count: the account is throttled there too.
    kit.assert_error(sign_in("staff", kit.PASSWORD), 429, "LOGIN_THROTTLED")
    clock.now += int(refused["Retry-After"])
    done = browser.post("/admin/login/", {"username": "staff", "password": kit.PASSWORD})
    assert done.status_code == 302
    assert admin.user.username == "staff"


def test_the_client_address_header_behind_a_proxy(
    people: kit.People, clock: Clock, settings: Any
) -> None:
    """Behind a proxy REMOTE_ADDR is the proxy's: the header's last entry is the client."""
    settings.AGENTCONSOLE_CLIENT_IP_HEADER = "X-Forwarded-For"
    assert people.bob.user
    for i in range(20):
        APIClient(REMOTE_ADDR="10.0.0.1", HTTP_X_FORWARDED_FOR=f"1.2.3.{i}, 192.0.2.1").post(
            TOKEN, {"username": f"u{i}", "password": "x"}, format="json"
        )
    # The client's own claim (first entry) changed every time; the proxy-added one did not.
    proxied = APIClient(REMOTE_ADDR="10.0.0.1", HTTP_X_FORWARDED_FOR="192.0.2.1")
    response = proxied.post(TOKEN, {"username": "bob", "password": kit.PASSWORD}, format="json")
    kit.assert_error(response, 429, "LOGIN_THROTTLED")
    other = APIClient(REMOTE_ADDR="10.0.0.1", HTTP_X_FORWARDED_FOR="192.0.2.2")
    kit.assert_ok(other.post(TOKEN, {"username": "bob", "password": kit.PASSWORD}, format="json"))


# --- the window, on the throttle alone -------------------------------------------------------


def make(clock: Clock, per_account: int = 5, per_address: int = 100) -> auth.LoginThrottle:
    from django.core.cache.backends.locmem import LocMemCache

    cache = LocMemCache(f"throttle-{id(clock)}", {})
    return auth.LoginThrottle(
        cache=cache, clock=clock, window_s=900, per_account=per_account, per_address=per_address
    )


def test_the_window_slides_without_a_burst_at_its_edge() -> None:
    """Five failures at the end of one window still count early in the next one: one more
    guess fits there, not five (a fixed window would allow five at once)."""
    clock = Clock(900 * 1000 + 899)  # one second before a window ends
    throttle = make(clock)
    for _ in range(5):
        throttle.failed("alice", "a")
    wait = throttle.wait("alice", "a")
    assert wait == 2  # just past the window's end, where the weight of the five starts to fall
    clock.now += 2  # one second into the next window
    assert throttle.wait("alice", "a") == 0
    throttle.failed("alice", "a")
    wait = throttle.wait("alice", "a")
    assert wait > 100  # 1 + 5 * (1 - f) < 5 only when f > 1/5 of the window
    clock.now += wait
    assert throttle.wait("alice", "a") == 0
    clock.now -= 1
    assert throttle.wait("alice", "a") > 0


def test_old_failures_are_forgotten() -> None:
    clock = Clock(900 * 1000)
    throttle = make(clock)
    for _ in range(4):
        throttle.failed("alice", "a")
    assert throttle.wait("alice", "a") == 0
    clock.now += 2 * 900
    for _ in range(4):
        throttle.failed("alice", "a")
    assert throttle.wait("alice", "a") == 0  # 4 + nothing left of the old 4

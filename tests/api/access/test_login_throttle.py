"""issue 9 item 8: failed sign-ins are limited per account and per address, on the API's token
view and on the admin's login page; a refusal is 429 with Retry-After. Time is a fake clock."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest
from django.core.cache import caches
from django.test import Client
from rest_framework.test import APIClient

from agentconsole.access import auth
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


# --- issue 21 item 4: one normalisation of a user name decides sign-in and throttle ----------

WIDE = "\uff56\uff49\uff43\uff54\uff49\uff4d\uff12"  # "victim2" typed in fullwidth forms


def page_sign_in(path: str, username: str, password: str, address: str = "198.51.100.9") -> Any:
    return Client(REMOTE_ADDR=address).post(path, {"username": username, "password": password})


@pytest.mark.parametrize("path", ["/login/", "/admin/login/"])
def test_a_fullwidth_name_counts_for_the_account_it_signs_in_as(clock: Clock, path: str) -> None:
    """issue 21 item 4: the form signs ``\uff56\uff49\uff43...`` in as victim2 (NFKC), but the
    throttle counted the name as typed: after 5 failures the fullwidth spelling still signed in,
    and 30 wrong guesses as the fullwidth name were never answered 429."""
    kit.make_persona("victim2", superuser=True)
    # Each guess from its own address: the account's rule alone must stop them.
    answers = [
        page_sign_in(path, WIDE, f"guess-{i}", f"203.0.113.{i}").status_code for i in range(30)
    ]
    assert answers[:5] == [200] * 5  # the form again, with its error
    assert set(answers[5:]) == {429}, answers
    # The right password is refused too, in either spelling: it is one account.
    for name in (WIDE, "victim2"):
        refused = page_sign_in(path, name, kit.PASSWORD)
        assert refused.status_code == 429
        assert b"Too many failed sign-ins" in refused.content
    kit.assert_error(sign_in("victim2", kit.PASSWORD), 429, "LOGIN_THROTTLED")


def test_ascii_failures_throttle_the_fullwidth_spelling(clock: Clock) -> None:
    """The other way round: 5 failures as ``victim2`` block ``\uff56...`` on every door."""
    kit.make_persona("victim2")
    for i in range(5):
        assert page_sign_in("/login/", "victim2", f"guess-{i}").status_code == 200
    assert page_sign_in("/login/", WIDE, kit.PASSWORD).status_code == 429
    kit.assert_error(sign_in(WIDE, kit.PASSWORD), 429, "LOGIN_THROTTLED")


def test_every_door_signs_in_the_name_it_counts(clock: Clock) -> None:
    """One normalisation, the form's (Django's NFKC), on every door: the API signs the
    fullwidth spelling in as victim2 too (before, it refused a name the pages accepted), and
    the throttle's account is the account that signed in."""
    from django.contrib.auth.forms import AuthenticationForm

    kit.make_persona("victim2")
    assert kit.assert_ok(sign_in(WIDE, kit.PASSWORD))["token"]
    form_field = AuthenticationForm().fields["username"]
    for typed in (WIDE, " victim2 ", "victim\u2082", "\ufb01le", "Victim2"):
        assert auth.normalize_username(typed) == form_field.clean(typed)
    for i in range(5):
        assert sign_in(WIDE, f"guess-{i}").status_code == 400
    kit.assert_error(sign_in("victim2", kit.PASSWORD), 429, "LOGIN_THROTTLED")


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

    # A name of its own: local-memory caches of one name share their data, and ids of freed
    # objects come back, so a name from id(clock) could hand a test an earlier test's counts.
    cache = LocMemCache(f"throttle-{uuid.uuid4().hex}", {})
    return auth.LoginThrottle(
        cache=cache, clock=clock, window_s=900, per_account=per_account, per_address=per_address
    )


def fail(throttle: auth.LoginThrottle, n: int = 1, name: str = "alice") -> None:
    """``n`` attempts whose password was wrong: each keeps its place."""
    for _ in range(n):
        throttle.reserve(name, "a")


def refused_for(throttle: auth.LoginThrottle, name: str = "alice") -> int:
    with pytest.raises(auth.LoginThrottled) as refused:
        throttle.reserve(name, "a")
    return int(refused.value.wait)


def test_the_window_slides_without_a_burst_at_its_edge() -> None:
    """Five failures at the end of one window still count early in the next one: one more
    guess fits there, not five (a fixed window would allow five at once)."""
    clock = Clock(900 * 1000 + 899)  # one second before a window ends
    throttle = make(clock)
    fail(throttle, 5)
    assert refused_for(throttle) == 2  # just past the window's end, where the five start to fall
    clock.now += 2  # one second into the next window
    fail(throttle)
    wait = refused_for(throttle)
    assert wait > 100  # 1 + 5 * (1 - f) < 5 only when f > 1/5 of the window
    clock.now += wait - 1
    assert refused_for(throttle) == 1
    clock.now += 1
    fail(throttle)


def test_old_failures_are_forgotten() -> None:
    clock = Clock(900 * 1000)
    throttle = make(clock)
    fail(throttle, 4)
    clock.now += 2 * 900
    fail(throttle, 5)  # 5 fit: nothing left of the old 4
    refused_for(throttle)


def test_a_refused_attempt_holds_no_place() -> None:
    """A 429 is not a failure: refusals do not lengthen the block, and a success gives the
    address its place back (it counts failures, not sign-ins)."""
    clock = Clock(900 * 1000)
    throttle = make(clock, per_account=5, per_address=6)
    fail(throttle, 5)
    for _ in range(10):
        refused_for(throttle)
    throttle.reserve("bob", "a").succeeded()
    throttle.reserve("bob", "a").succeeded()
    fail(throttle, 1, name="carol")  # the address's sixth failure
    assert refused_for(throttle, "dave") > 0


def test_simultaneous_reservations_take_at_most_the_limit() -> None:
    """The local-memory cache (the embedded deployment) increments under its lock: 40 threads
    reserving at once for one account get 5 places (tests/api/access/test_login_concurrency.py does
    this over HTTP, on Redis)."""
    throttle = make(Clock(900 * 1000))
    barrier = threading.Barrier(40)
    outcomes: list[str] = []

    def attempt() -> None:
        barrier.wait(timeout=30)
        try:
            throttle.reserve("alice", "a")
            outcomes.append("checked")
        except auth.LoginThrottled:
            outcomes.append("refused")

    threads = [threading.Thread(target=attempt) for _ in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert sorted(outcomes) == ["checked"] * 5 + ["refused"] * 35

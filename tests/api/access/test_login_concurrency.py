"""issue 21 item 5: simultaneous wrong passwords must not pass the sign-in limit.

Before, each door read the counts, checked the password, and counted the failure afterwards: 80
wrong passwords sent at once on ``/api/auth/token/`` all read "0 failures", and 59 reached the
password check (limit: 5 per account, 20 per address). Now an attempt is reserved by an atomic
increment before the password is checked, so at most the limit ever reach it.

Real HTTP against a threaded live server (Django's), on PostgreSQL (each request thread its
own connection; a listen backlog of 128, not Django's 10, so 80 connections at once are all
accepted rather than reset), with the deployment's cache (Redis when REDIS_URL is set). What is
counted is the real password check: every call of Django's ``ModelBackend.authenticate``,
wrapped to count and to take as long as a real password hash (the tests hash with one PBKDF2
iteration, tests/support/session/passwords.py; production's million take far longer than the
50 ms used here), so the requests overlap as in production.
"""

from __future__ import annotations

import http.cookiejar
import json
import re
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import pytest
from django.contrib.auth.backends import ModelBackend
from django.core.servers.basehttp import ThreadedWSGIServer
from django.test.testcases import LiveServerThread

from tests.api import api_kit as kit
from tests.support.races import race

CHECK_S = 0.05


class Checks:
    """Calls of the password check, per user name asked for."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.names: list[str] = []

    def count(self, name: str | None = None) -> int:
        with self.lock:
            return len([n for n in self.names if name is None or n == name])


@pytest.fixture
def checks(monkeypatch: pytest.MonkeyPatch, settings: Any) -> Checks:
    settings.AGENTCONSOLE_LOGIN_WINDOW_S = 900
    settings.AGENTCONSOLE_LOGIN_FAILURES_PER_ACCOUNT = 5
    settings.AGENTCONSOLE_LOGIN_FAILURES_PER_ADDRESS = 20
    seen = Checks()
    real = ModelBackend.authenticate

    def counted(self: ModelBackend, request: Any, username: Any = None, **kw: Any) -> Any:
        with seen.lock:
            seen.names.append(str(username))
        time.sleep(CHECK_S)
        return real(self, request, username=username, **kw)

    monkeypatch.setattr(ModelBackend, "authenticate", counted)
    return seen


class WideServer(ThreadedWSGIServer):
    request_queue_size = 128


class WideServerThread(LiveServerThread):
    server_class = WideServer


@pytest.fixture
def server(transactional_db: None) -> Any:
    """The project's WSGI app in a thread, at ``server.url``; stopped after the test."""
    thread = WideServerThread("127.0.0.1", lambda app: app)
    thread.daemon = True
    thread.start()
    thread.is_ready.wait(timeout=30)
    if thread.error:
        raise thread.error
    thread.url = f"http://127.0.0.1:{thread.port}"  # type: ignore[attr-defined]
    yield thread
    thread.terminate()


def post(url: str, data: bytes, headers: dict[str, str]) -> int:
    request = urllib.request.Request(url, data=data, headers=headers, method="POST")  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=120) as response:  # noqa: S310
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


def token_attempt(base: str, username: str, password: str) -> int:
    body = json.dumps({"username": username, "password": password}).encode()
    return post(f"{base}/api/auth/token/", body, {"Content-Type": "application/json"})


def page_form(base: str, path: str) -> tuple[str, str]:
    """The CSRF cookie and the form's token, as a browser gets them from the sign-in page."""
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    with opener.open(f"{base}{path}", timeout=60) as response:
        html = response.read().decode()
    (cookie,) = [c.value for c in jar if c.name == "csrftoken"]
    match = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html)
    assert match, html[:500]
    return cookie, match.group(1)


def page_attempt(base: str, path: str, form: tuple[str, str], username: str, password: str) -> int:
    cookie, token = form
    body = urllib.parse.urlencode(
        {"csrfmiddlewaretoken": token, "username": username, "password": password}
    ).encode()
    headers = {
        "Content-Type": "application/x-www-form-urlencoded",
        "Cookie": f"csrftoken={cookie}",
        "Referer": f"{base}{path}",
    }
    return post(f"{base}{path}", body, headers)


@pytest.mark.postgres
def test_eighty_simultaneous_guesses_on_the_token_api(
    postgres_only: None, server: Any, checks: Checks
) -> None:
    """80 wrong passwords for one account at once: at most 5 reach the password check; the
    rest are 429, and so is the right password afterwards."""
    kit.make_persona("victim")
    answers = race(lambda i: token_attempt(server.url, "victim", f"guess-{i}"), 80)
    assert not [a for a in answers if isinstance(a, BaseException)], answers
    assert checks.count() <= 5, checks.count()
    assert answers.count(400) == checks.count()
    assert answers.count(429) == 80 - checks.count()
    assert token_attempt(server.url, "victim", kit.PASSWORD) == 429


@pytest.mark.postgres
def test_simultaneous_guesses_on_many_accounts_meet_the_address_limit(
    postgres_only: None, server: Any, checks: Checks
) -> None:
    """80 wrong passwords at once from one address, 4 on each of 20 accounts (under the
    account limit): at most 20 reach the password check."""
    answers = race(lambda i: token_attempt(server.url, f"u{i % 20}", f"guess-{i}"), 80)
    assert not [a for a in answers if isinstance(a, BaseException)], answers
    assert checks.count() <= 20, checks.count()
    assert answers.count(429) == 80 - checks.count()


@pytest.mark.postgres
@pytest.mark.parametrize("path", ["/login/", "/admin/login/"])
def test_thirty_simultaneous_guesses_on_a_sign_in_page(
    postgres_only: None, server: Any, checks: Checks, path: str
) -> None:
    """30 wrong passwords at once on the console's (or the admin's) sign-in form: at most 5
    reach the password check; the others are the 429 page."""
    kit.make_persona("victim", superuser=True)
    form = page_form(server.url, path)
    answers = race(lambda i: page_attempt(server.url, path, form, "victim", f"guess-{i}"), 30)
    assert not [a for a in answers if isinstance(a, BaseException)], answers
    assert checks.count("victim") <= 5, checks.count()
    assert answers.count(200) == checks.count()  # the form again, with its error
    assert answers.count(429) == 30 - checks.count()

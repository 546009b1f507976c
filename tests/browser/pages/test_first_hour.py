"""The first hour of a production install (issue 24 item 7), in a real Chromium at 1280x800 and
390x844: a stack started with DEBUG=0 on an empty database, set up by exactly the commands of
docs/deploy.md "The first hour" (createsuperuser, grant_role, load_documents, load_profiles),
never by ``load_demo``. Each role's first screen; the user's first run, from the first profile
to its end (a real worker); the admin's way into the Django admin.

The stack is this module's own (the demo stack of conftest.py has demo accounts, which a
production start refuses). Plain HTTP on 127.0.0.1, so the HTTPS-only defaults of DEBUG=0 are
switched off (SECURE_SSL_REDIRECT, the cookies' Secure flag); everything else is production:
collected static files, the demo-password refusal at start, no demo.
"""

from __future__ import annotations

import re
import secrets
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.browser.browser_kit import (
    DESKTOP,
    PHONE,
    ROOT,
    TIMEOUT_MS,
    layout_problems,
    login,
    shot,
)
from tests.browser.csp_watch import settle, watch
from tests.browser.live_stack import place
from tests.support.workers import wait_for

pytestmark = pytest.mark.browser

# (account, role, password): what "The first hour" makes. The admin comes from createsuperuser.
PEOPLE = {
    "ada": ("admin", "ada-first-hour-" + secrets.token_hex(6)),
    "olga": ("operator", "olga-first-hour-" + secrets.token_hex(6)),
    "rene": ("reviewer", "rene-first-hour-" + secrets.token_hex(6)),
    "uma": ("user", "uma-first-hour-" + secrets.token_hex(6)),
}
# Where each role lands after signing in, and the heading it reads there.
FIRST_SCREEN = {
    "admin": ("/confirmations/", "Confirmations"),
    "operator": ("/confirmations/", "Confirmations"),
    "reviewer": ("/handoffs/", "Handoff inbox"),
    "user": ("/runs/", "Runs"),
}


def _manage(env: dict[str, str], *args: str, stdin: str = "") -> str:
    done = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), *args],
        cwd=ROOT, env=env, input=stdin, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    if done.returncode != 0:
        raise AssertionError(f"manage.py {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return done.stdout


def first_hour(env: dict[str, str]) -> list[str]:
    """docs/deploy.md "The first hour", step by step; what each command said."""
    admin_env = {**env, "DJANGO_SUPERUSER_PASSWORD": PEOPLE["ada"][1]}
    superuser = ("createsuperuser", "--noinput", "--username", "ada", "--email", "a@example.com")
    said = [
        _manage(env, "migrate", "--noinput", "-v0"),
        _manage(env, "collectstatic", "--noinput", "-v0"),
        _manage(admin_env, *superuser),
    ]
    for name, (role, password) in PEOPLE.items():
        if role != "admin":
            grant = ("grant_role", name, role, "--create", "--password-stdin")
            said.append(_manage(env, *grant, stdin=password + "\n"))
    said.append(_manage(env, "load_documents", "docs/first-hour/corpus"))
    said.append(_manage(env, "load_profiles", "docs/first-hour/profile.json", "--by", "ada"))
    return said


@pytest.fixture(scope="module")
def install() -> Iterator[str]:
    """A fresh production install after its first hour, serving; yields its URL."""
    with place("firsthour", migrated=False) as here:
        env = here.env(
            DEBUG="0",
            SECRET_KEY="first-hour-" + secrets.token_hex(32),
            ALLOWED_HOSTS="127.0.0.1,localhost",
            # Plain HTTP to 127.0.0.1: no TLS proxy in front (docs/deploy.md has one).
            SECURE_SSL_REDIRECT="0",
            SESSION_COOKIE_SECURE="0",
            CSRF_COOKIE_SECURE="0",
            STATIC_ROOT=str(here.scratch / "static"),
        )
        said = first_hour(env)
        assert "created profile first-run" in said[-1]
        yield here.serve(env)


@pytest.fixture(scope="module")
def chromium(install: str, chromium_browser: Any) -> Any:
    # The browser tests' one browser (tests/browser/conftest.py): a second sync Playwright
    # cannot start.
    return chromium_browser


@pytest.fixture
def open_as(chromium: Any, install: str) -> Iterator[Callable[..., Any]]:
    """Pages signed in as one of PEOPLE, each in its own context; any Content-Security-Policy
    violation, console error or failed request on them fails the test."""
    contexts, watches = [], []

    def make(name: str, viewport: dict[str, int]) -> Any:
        context = chromium.new_context(viewport=viewport, base_url=install)
        context.set_default_timeout(TIMEOUT_MS)
        contexts.append(context)
        page = context.new_page()
        watches.append(watch(page, install))
        login(page, name, PEOPLE[name][1])
        return page

    yield make
    for context in contexts:
        context.close()
    wrong = [x for w in watches for x in (*w.violations, *w.errors, *w.failed)]
    assert wrong == []


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["1280x800", "390x844"])
@pytest.mark.parametrize("name", list(PEOPLE))
def test_each_role_lands_on_its_first_screen(
    open_as: Callable[..., Any], name: str, viewport: dict[str, int]
) -> None:
    role = PEOPLE[name][0]
    page = open_as(name, viewport)
    path, heading = FIRST_SCREEN[role]
    assert page.url.endswith(path), page.url
    settle(page)
    assert page.get_by_role("heading", level=1).first.inner_text().startswith(heading)
    # Only the admin is shown the way into the Django admin.
    assert page.get_by_role("link", name="Admin", exact=True).count() == (role == "admin")
    icon = page.evaluate(
        """async () => {
            const href = document.querySelector('link[rel=icon]').href;
            const r = await fetch(href);
            return [r.status, r.headers.get('content-type')];
        }"""
    )
    assert icon == [200, "image/svg+xml"]
    assert layout_problems(page) == []
    shot(page, f"first-hour-{role}")


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["1280x800", "390x844"])
def test_the_user_starts_the_first_run_and_it_completes(
    open_as: Callable[..., Any], viewport: dict[str, int]
) -> None:
    page = open_as("uma", viewport)
    page.goto("/runs/new/")
    choice = page.locator(".profile-choice[data-profile='first-run']")
    # The grant lasts to step 4, the run's last: the page says so in those words.
    assert "for the whole run (to step 4, its last)" in choice.inner_text()
    shot(page, "first-hour-new-run")
    page.get_by_label("Goal").fill(f"Does the install work? ({viewport['width']} px)")
    page.get_by_role("button", name="Start with first-run", exact=True).click()
    page.wait_for_load_state()
    assert re.search(r"/runs/run_[0-9a-f]+/$", page.url), page.url
    status = page.locator("[data-run-status]").first
    wait_for(
        lambda: "completed" in status.inner_text(), timeout_s=60, what="the first run to complete"
    )
    shot(page, "first-run", full_page=True)

    # The runs list: on a phone each run is a card whose status stays on the screen.
    page.goto("/runs/")
    row = page.locator("tr[data-run-row]").first
    cell = row.locator("td[data-label='Status']")
    box = cell.bounding_box()
    assert box is not None
    assert box["x"] >= 0
    assert box["x"] + box["width"] <= viewport["width"]
    assert "completed" in cell.inner_text()
    if viewport == PHONE:
        # The card's label ("Status") has a column of its own: the badge starts right of it.
        badge = cell.locator(".badge").first.bounding_box()
        assert badge is not None
        assert badge["x"] - box["x"] >= 6.5 * 16
    assert layout_problems(page, tab=False) == []
    shot(page, "first-hour-runs")


def test_the_admin_follows_the_link_into_the_django_admin(open_as: Callable[..., Any]) -> None:
    page = open_as("ada", DESKTOP)
    page.get_by_role("link", name="Admin", exact=True).click()
    page.wait_for_load_state()
    assert page.url.endswith("/admin/")
    text = page.locator("#content-main").inner_text()
    for name in ("Ledger entries", "Preference history", "Run profiles", "Groups", "Users"):
        assert name in text
    shot(page, "first-hour-django-admin")

"""The console's front door in a real browser: sign-in, each role's landing page, the top bar's
live counts from /ws/console/, sign-out."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.browser.browser_kit import Console, login

pytestmark = pytest.mark.browser


@pytest.mark.parametrize(
    ("username", "landing"),
    [("operator", "/confirmations/"), ("reviewer", "/handoffs/"), ("alice", "/runs/")],
)
def test_each_role_lands_on_its_work(page: Any, username: str, landing: str) -> None:
    login(page, username)
    assert page.url.endswith(landing)


def test_a_wrong_password_is_refused_in_words(page: Any) -> None:
    page.goto("/login/")
    page.get_by_label("User name").fill("alice")
    page.get_by_label("Password").fill("not-her-password")
    page.get_by_role("button", name="Sign in").click()
    alert = page.get_by_role("alert")
    assert "did not match" in alert.inner_text()
    assert "INVALID_CREDENTIALS" in alert.inner_text()
    assert page.url.endswith("/login/")


def test_anonymous_is_sent_to_sign_in(page: Any) -> None:
    page.goto("/")
    assert re.search(r"/login/\?next=/$", page.url)


def test_operator_top_bar_counts_are_live(page: Any, console: Console) -> None:
    login(page, "operator")
    page.wait_for_selector("[data-live-status]:text('live')")
    counts = console.api("operator").get("/api/queues/")
    nav = page.get_by_role("navigation", name="Console")
    for label, key in (("Confirmations", "pending_confirmations"), ("Handoffs", "open_handoffs")):
        badge = nav.get_by_role("link", name=re.compile(label)).locator("[data-count]")
        if counts[key]:
            assert badge.inner_text() == str(counts[key])
        else:
            assert badge.is_hidden()


def test_a_user_sees_no_operator_links(page: Any) -> None:
    login(page, "alice")
    nav = page.get_by_role("navigation", name="Console")
    links = [a.strip() for a in nav.get_by_role("link").all_inner_texts()]
    assert {"Runs", "My preferences"} <= set(links)
    assert not {"Confirmations", "Handoffs", "Profiles", "Tools", "Memory", "Notifications"} & set(
        links
    )


def test_sign_out(page: Any) -> None:
    login(page, "alice")
    page.get_by_role("button", name="Sign out").click()
    page.wait_for_url(re.compile(r"/login/$"))
    page.goto("/runs/")
    assert "/login/" in page.url

"""Webhook delivery to a local receiver, in a real browser on the live stack (issue 24 item 4):
an operator adds a webhook on the Notifications page, a run comes to wait for a confirmation
(a real worker), the worker POSTs the signed notification to a receiver on 127.0.0.1 that this
test runs and that checks the signature, and the page's delivery log shows it delivered. A bad
URL is refused with its code and the typed values kept. Screenshots:
var/screenshots/notifications-delivered-*.png (whole page), notifications-log-*.png."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.browser.browser_kit import (
    PHONE,
    Console,
    layout_problems,
    login,
    shot,
    waiting_run,
)
from tests.support.receiver import receiver

pytestmark = pytest.mark.browser

SECRET = "whsec-browser-test-0123456789abcdef"


def add_webhook(page: Any, url: str, secret: str) -> None:
    page.goto("/notifications/")
    page.get_by_label("Send by").select_option("webhook")
    page.get_by_label("Webhook URL").fill(url)
    page.get_by_label("Signing secret").fill(secret)
    page.get_by_label("Only items for the role").select_option("operator")
    page.get_by_role("button", name="Add subscription").click()
    page.wait_for_load_state()


def test_webhook_delivery_to_a_local_receiver(
    new_page: Callable[..., Any], console: Console
) -> None:
    page = new_page()
    login(page, "operator")

    # A refused URL first: the code in words, the URL still in its field, the secret not.
    add_webhook(page, "https://someone:pw@127.0.0.1/hook", SECRET)
    assert page.get_by_text("NOTIFY_URL_USERINFO").is_visible()
    assert page.get_by_label("Webhook URL").input_value() == "https://someone:pw@127.0.0.1/hook"
    assert page.get_by_label("Signing secret").input_value() == ""
    assert SECRET not in page.content()

    with receiver(SECRET) as r:
        add_webhook(page, r.url, SECRET)
        row = page.locator("tr[data-subscription]", has_text=r.url)
        assert row.is_visible()
        assert "secret set" in row.inner_text()
        assert SECRET not in page.content()

        run = waiting_run(console, "Notification browser test: save a language")
        run_id = run["run_id"]
        mine = lambda: [x for x in r.received if x.json.get("run_id") == run_id]  # noqa: E731
        console.wait_for("the receiver to get the run's POST", mine, timeout_s=30)
        (got,) = mine()
        assert got.verified, "the signature did not verify"
        assert got.json["event"] == "confirmation.waiting"
        assert got.json["tool_name"] == "save_preference"
        assert got.json["link"].endswith(f"/runs/{run_id}/")
        assert "zh-CN" not in got.body.decode()  # the argument's value is never sent

        def delivered() -> Any:
            page.goto("/notifications/")
            link = page.locator(f"a[href='/runs/{run_id}/']")
            entry = page.locator("tr[data-delivery]", has=link)
            done = entry.count() == 1 and entry.get_attribute("data-status") == "delivered"
            return done and entry

        entry = console.wait_for("the delivery log to say delivered", delivered, timeout_s=30)
        text = entry.inner_text()
        assert "delivered" in text
        assert "HTTP 200" in text
        assert r.url in text
        shot(page, "notifications-delivered", full_page=True)
        page.locator("#log-h").scroll_into_view_if_needed()
        shot(page, "notifications-log")
        assert layout_problems(page, tab=False) == []

        phone = new_page(viewport=PHONE)
        login(phone, "operator")
        phone.goto("/notifications/")
        shot(phone, "notifications-delivered", full_page=True)
        phone.locator("#log-h").scroll_into_view_if_needed()
        shot(phone, "notifications-log")
        assert layout_problems(phone, tab=False) == []

        # Removed: the log keeps naming it, nothing more is sent to it.
        page.locator("tr[data-subscription]", has_text=r.url).get_by_role("button").click()
        page.wait_for_load_state()
        assert page.locator("tr[data-subscription]", has_text=r.url).count() == 0

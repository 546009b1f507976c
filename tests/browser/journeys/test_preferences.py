"""My preferences and memory administration in a real browser (issue 11 items 5 and 6).

A user edits a preference through the confirmation of its exact value, meets a version conflict
(the same preference changed through the API in between), chooses their own value (confirmed
again, against the new version), revokes it, exports everything (a download) and erases with a
typed confirmation; an operator finds a user's preference in /memory/ and revokes it with a
reason that the audit trail shows. Each page is checked at both sizes, as test_layout does.

Each test uses users of its own (``console.user``), so the demo's alice keeps her preferences
for the other browser tests sharing this live console.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.browser.browser_kit import (
    DESKTOP,
    PHONE,
    Api,
    Console,
    layout_problems,
    login,
    shot,
)
from tests.browser.csp_watch import settle

pytestmark = pytest.mark.browser

STYLE = "citation_style"


def set_preference(api: Api, key: str, value: str, expected: int | None = None) -> int:
    """Propose and confirm through the HTTP API, as another client of the same user would."""
    status, change = api.post(
        "/api/preferences/changes/", {"key": key, "value": value, "expected_version": expected}
    )
    assert status == 201, change
    status, result = api.post(
        f"/api/preferences/changes/{change['change_id']}/apply/",
        {"proposal_hash": change["proposal_hash"]},
    )
    assert status == 200, result
    return int(result["version"])


def current(api: Api, key: str) -> dict[str, Any]:
    return next(r for r in api.get("/api/preferences/") if r["key"] == key)


def user_with(console: Console, name: str, preferences: dict[str, str]) -> Api:
    """A new user holding ``preferences`` (each saved through the API); their API client."""
    console.user(name, "user")
    api = console.api(name)
    for key, value in preferences.items():
        set_preference(api, key, value)
    return api


def check_page(page: Any, name: str) -> None:
    """test_layout's checks on a page it does not visit, and its screenshot (whole page)."""
    shot(page, name, full_page=True)
    assert layout_problems(page) == [], name


def test_user_edits_through_confirmation_meets_a_conflict_chooses_revokes_and_exports(
    page: Any, console: Console
) -> None:
    api = user_with(console, "paula", {STYLE: "inline"})
    login(page, "paula")
    page.goto("/preferences/")
    section = page.locator(f"#pref-{STYLE}")
    assert section.locator("[data-value]").inner_text() == "inline"
    check_page(page, "preferences-user")

    # 1. Edit: nothing is written until the exact value is confirmed.
    section.get_by_label(f"New value for {STYLE}").fill("footnote")
    section.get_by_role("button", name="Review change…").click()
    page.wait_for_url(re.compile(r"/preferences/changes/\d+/$"))
    assert page.locator("[data-old-value]").inner_text() == "inline"
    assert page.locator("[data-new-value]").inner_text() == "footnote"
    assert re.fullmatch(r"[0-9a-f]{64}", page.locator("[data-hash]").inner_text())
    assert current(api, STYLE)["value"] == "inline"
    check_page(page, "preference-confirm")

    # 2. Meanwhile the same preference changes through the API: confirming shows both values.
    set_preference(api, STYLE, "endnote", expected=1)
    page.get_by_role("button", name="Confirm and save").click()
    page.wait_for_selector("[data-current-value]")
    assert "PREFERENCE_VERSION_CONFLICT" in page.get_by_role("alert").inner_text()
    assert page.locator("[data-current-value]").inner_text() == "endnote"
    assert page.locator("[data-proposed-value]").inner_text() == "footnote"
    assert current(api, STYLE)["value"] == "endnote"
    check_page(page, "preference-conflict")

    # 3. Apply mine: the exact value is confirmed again, against the version now current.
    page.get_by_role("button", name="Apply mine…").click()
    page.wait_for_selector("[data-old-value]")
    assert page.locator("[data-old-value]").inner_text() == "endnote"
    page.get_by_role("button", name="Confirm and save").click()
    page.wait_for_url(re.compile(r"/preferences/$"))
    assert "Saved: now version 3." in page.get_by_role("status").first.inner_text()
    assert (current(api, STYLE)["value"], current(api, STYLE)["version"]) == ("footnote", 3)

    # 4. Revoke, with its confirmation page and a reason.
    page.locator(f"#pref-{STYLE}").get_by_role("link", name="Revoke…").click()
    check_page(page, "preference-revoke")
    page.get_by_label("Reason (optional)").fill("no longer true")
    page.get_by_role("button", name=f"Revoke {STYLE}").click()
    page.wait_for_url(re.compile(r"/preferences/$"))
    assert page.locator(f"#pref-{STYLE} .badge").first.inner_text() == "revoked"
    assert current(api, STYLE)["revoke_reason"] == "no longer true"

    # 5. Export: a download of the values and the whole history.
    with page.expect_download() as caught:
        page.get_by_role("link", name="Export (JSON)").click()
    download = caught.value
    assert download.suggested_filename == "preferences-paula.json"
    exported = json.loads(Path(download.path()).read_text())
    assert [(h["action"], h["value"]) for h in exported["history"]] == [
        ("write", "inline"),
        ("write", "endnote"),
        ("write", "footnote"),
        ("revoke", "footnote"),
    ]
    assert exported["history"][-1]["reason"] == "no longer true"

    # 6. Erase: the wrong text is refused in words; the user name erases.
    page.get_by_role("link", name="Erase all…").click()
    check_page(page, "preferences-erase")
    page.get_by_label(re.compile("Type your user name")).fill("erase")
    page.get_by_role("button", name="Erase everything").click()
    assert "ERASE_CONFIRMATION_MISMATCH" in page.get_by_role("alert").inner_text()
    assert api.get("/api/preferences/") != []
    check_page(page, "preferences-erase-refused")
    page.get_by_label(re.compile("Type your user name")).fill("paula")
    page.get_by_role("button", name="Erase everything").click()
    page.wait_for_url(re.compile(r"/preferences/$"))
    assert api.get("/api/preferences/") == []


def test_operator_revokes_with_a_reason_and_sees_it_in_the_audit_trail(
    page: Any, console: Console
) -> None:
    quinn = user_with(console, "quinn", {STYLE: "inline", "answer_language": "de"})
    login(page, "operator")
    page.goto("/memory/")
    page.get_by_label(re.compile("^Subject")).fill("quinn")
    page.get_by_label("Key").select_option(STYLE)
    page.get_by_role("button", name="Search").click()
    rows = page.locator("table.data tbody tr")
    assert rows.count() == 1
    assert "inline" in rows.first.inner_text()
    check_page(page, "memory-search")

    rows.first.get_by_role("link", name=re.compile("Audit")).click()
    page.get_by_label(re.compile("Reason for revoking")).fill("reported: not the user's choice")
    page.get_by_role("button", name="Revoke version 1").click()
    page.wait_for_url(re.compile(rf"/memory/quinn/{STYLE}/$"))
    trail = page.locator("table.memory-history tbody tr").first.inner_text()
    assert "revoked" in trail
    assert "operator" in trail
    assert "reported: not the user's choice" in trail
    check_page(page, "memory-entry")
    assert current(quinn, STYLE)["revoke_reason"] == "reported: not the user's choice"
    assert current(quinn, "answer_language")["revoked_at"] is None


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["1280x800", "390x844"])
def test_memory_pages_fit_both_sizes(
    new_page: Callable[..., Any], console: Console, viewport: dict[str, int]
) -> None:
    name = f"rita{viewport['width']}"
    console.user(name, "user")
    api = console.api(name)
    set_preference(api, STYLE, "inline")
    set_preference(api, "answer_language", "pt-BR")
    set_preference(api, "answer_language", "de-CH-1996", expected=1)
    user = new_page(viewport)
    login(user, name)
    user.goto("/preferences/")
    user.locator(f"#pref-{STYLE} details.fold summary").click()
    check_page(user, "preferences")
    user.get_by_label(f"New value for {STYLE}").fill("endnote")
    user.locator(f"#pref-{STYLE}").get_by_role("button", name="Review change…").click()
    user.wait_for_selector("[data-new-value]")
    check_page(user, "preference-confirm")
    set_preference(api, STYLE, "footnote", expected=1)
    user.get_by_role("button", name="Confirm and save").click()
    user.wait_for_selector("[data-current-value]")
    check_page(user, "preference-conflict")

    operator = new_page(viewport)
    login(operator, "operator")
    operator.goto(f"/memory/?subject={name}")
    check_page(operator, "memory-admin")
    operator.goto(f"/memory/{name}/answer_language/")
    check_page(operator, "memory-entry")


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["1280x800", "390x844"])
def test_a_refused_value_comes_back_in_its_form_with_a_sentence(
    new_page: Callable[..., Any], console: Console, viewport: dict[str, int]
) -> None:
    """issue 21 item 14: a value the key does not take was a dead-end 400 page showing the
    key's regular expression, and what was typed was lost. Now the same page comes back, the
    value still in its field, focused, and a sentence beside it; typed right, it goes on."""
    name = f"vera{viewport['width']}"
    console.user(name, "user")
    api = console.api(name)
    set_preference(api, "answer_language", "de")
    page = new_page(viewport)
    login(page, name)
    page.goto("/preferences/")
    field = page.get_by_label("New value for answer_language")
    field.fill("Deutsch (Schweiz)")
    page.locator("#pref-answer_language").get_by_role("button", name="Review change…").click()
    settle(page)

    field = page.get_by_label("New value for answer_language")
    assert field.input_value() == "Deutsch (Schweiz)"
    assert field.evaluate("el => el === document.activeElement")
    assert field.get_attribute("aria-invalid") == "true"
    said = "answer_language takes a language code such as en, de or pt-BR."
    assert page.locator("#error-answer_language").inner_text() == said
    assert said in page.get_by_role("alert").inner_text()
    assert "[A-Za-z]" not in page.content()
    check_page(page, "preference-refused")

    field.fill("de-CH")
    page.locator("#pref-answer_language").get_by_role("button", name="Review change…").click()
    page.wait_for_url(re.compile(r"/preferences/changes/\d+/$"))
    assert page.locator("[data-old-value]").inner_text() == "de"
    assert page.locator("[data-new-value]").inner_text() == "de-CH"

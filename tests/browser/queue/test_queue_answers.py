"""Edit and respond on the confirmation queue in a real browser, on the live stack (a real
worker moves the runs on), at 1280x800 and 390x844 (issue 24 item 1):

- edit and approve: a value the gate refuses keeps what was typed, with the reason beside the
  form; the corrected edit is approved and the run finishes with the edited call;
- respond: the note goes to the planner, the proposal never runs, the run takes its next step.

Screenshots: var/screenshots/queue-edit-*.png, queue-edit-refused-*.png, queue-respond-*.png.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest

from tests.browser.browser_kit import (
    DESKTOP,
    PHONE,
    Console,
    item_of,
    layout_problems,
    login,
    shot,
    waiting_run,
)

pytestmark = pytest.mark.browser

VIEWPORTS = {"desktop": DESKTOP, "phone": PHONE}


def open_item(new_page: Callable[..., Any], run_id: str, viewport: dict[str, int]) -> Any:
    page = new_page(viewport=viewport)
    login(page, "operator")
    page.goto("/confirmations/")
    return page, item_of(page, run_id)


def done(console: Console, run_id: str) -> dict[str, Any]:
    admin = console.api("admin")
    return console.wait_for(
        "the run to finish",
        lambda: (r := admin.get(f"/api/runs/{run_id}/"))["status"] in ("completed", "failed") and r,
    )


@pytest.mark.parametrize("size", list(VIEWPORTS))
def test_edit_and_approve(new_page: Callable[..., Any], console: Console, size: str) -> None:
    run = waiting_run(console, f"Edit me ({size})")
    page, item = open_item(new_page, run["run_id"], VIEWPORTS[size])
    item.get_by_text("Edit the arguments").click()
    box = item.get_by_label("Arguments of save_preference (JSON)")
    assert json.loads(box.input_value()) == {"key": "answer_language", "value": "zh-CN"}

    # A value the tool's semantic check refuses: the page says why, beside what was typed.
    refused = '{"key": "answer_language", "value": "zz zz"}'
    box.fill(refused)
    item.get_by_label("Why you changed it (optional)").fill("she wants French")
    with page.expect_navigation():
        item.get_by_role("button", name="Use these arguments").click()
    item = item_of(page, run["run_id"])
    error = item.locator("[data-q-answer-error]")
    assert "MEMORY_VALUE_INVALID" in error.inner_text()
    assert "Nothing was changed." in error.inner_text()
    box = item.get_by_label("Arguments of save_preference (JSON)")
    assert box.input_value() == refused
    assert item.get_by_label("Why you changed it (optional)").input_value() == "she wants French"
    box.scroll_into_view_if_needed()
    assert layout_problems(page, tab=False) == []
    shot(page, "queue-edit-refused")

    box.fill('{"key": "answer_language", "value": "fr-FR"}')
    box.scroll_into_view_if_needed()
    shot(page, "queue-edit")
    with page.expect_navigation(url=re.compile(r"/confirmations/$")):
        item.get_by_role("button", name="Use these arguments").click()
    said = page.get_by_role("status").first.inner_text()
    assert f"Edited and approved: the run “Edit me ({size})” goes on" in said
    finished = done(console, run["run_id"])
    assert finished["status"] == "completed", finished
    operator = console.api("operator")
    edited = [
        c
        for c in operator.get("/api/confirmations/?status=consumed")
        if c["run_id"] == run["run_id"]
    ]
    assert [c["proposal"]["arguments"]["value"] for c in edited] == ["fr-FR"]

    # The run's page says who edited it, on the edit's own line.
    page.goto(f"/runs/{run['run_id']}/")
    line = page.locator("li[data-event='confirmation.edited'] .trace-summary")
    assert (
        line.inner_text()
        == "Proposal edited by operator: value: changed (reason: she wants French)"
    )


@pytest.mark.parametrize("size", list(VIEWPORTS))
def test_respond(new_page: Callable[..., Any], console: Console, size: str) -> None:
    run = waiting_run(console, f"Respond to me ({size})")
    page, item = open_item(new_page, run["run_id"], VIEWPORTS[size])
    item.get_by_text("Respond to the planner instead").click()
    note = item.get_by_label("Note for the planner")
    note.fill("Do not change her language; she asked about retries only.")
    note.scroll_into_view_if_needed()
    assert layout_problems(page, tab=False) == []
    shot(page, "queue-respond")
    with page.expect_navigation(url=re.compile(r"/confirmations/$")):
        item.get_by_role("button", name="Send to the planner").click()
    said = page.get_by_role("status").first.inner_text()
    assert f"Sent to the planner: the run “Respond to me ({size})”" in said
    assert page.locator(f"[data-confirmation-run='{run['run_id']}']").count() == 0
    finished = done(console, run["run_id"])
    # The planner's next step (its scripted final answer) ended the run; nothing was saved.
    assert finished["status"] == "completed", finished
    operator = console.api("operator")
    responded = [
        c
        for c in operator.get("/api/confirmations/?status=responded")
        if c["run_id"] == run["run_id"]
    ]
    assert [c["decision_reason"] for c in responded] == [
        "Do not change her language; she asked about retries only."
    ]
    page.goto(f"/runs/{run['run_id']}/")
    line = page.locator("li[data-event='confirmation.responded'] .trace-summary")
    assert line.inner_text().startswith("operator responded instead of deciding: Do not change")

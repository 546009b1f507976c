"""Issue 21 item 2 in a real browser, on the live stack (daphne + a real worker): the demo's own
case. alice's ``research-save-preference`` run wants to save ``citation_style=footnote``; the
demo already gave her a citation style, so once she approves, the tool refuses the write
(PREFERENCE_VERSION_CONFLICT) and the run completes. Her page of the run, open while she
approves, turns the status into a flagged one live (no reload), the answer says the style was
not saved, and the runs list, filtered by outcome, shows the flag too. Screenshots at 1280x800
and 390x844 of both pages (var/screenshots/run-outcome-*, run-list-outcome-*), and of the
queue card of a run whose earlier write was refused (queue-outcome-1280x800).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.browser import browser_kit as kit
from tests.browser.browser_kit import Console, login, shot
from tests.browser.queue.test_queue import item_of

pytestmark = pytest.mark.browser

FLAG = "[data-outcome-flag='writes_not_applied']"


def _waiting_save(console: Console, goal: str) -> dict[str, Any]:
    alice = console.api("alice")
    status, run = alice.post("/api/runs/", {"goal": goal, "profile": "research-save-preference"})
    assert status == 201, run
    return console.wait_for(
        "the preference write to wait for a person",
        lambda: (r := alice.get(f"/api/runs/{run['run_id']}/"))["pending_confirmation_id"] and r,
        timeout_s=60,
    )


def _approve_as_alice(console: Console, run: dict[str, Any]) -> None:
    alice = console.api("alice")
    pending = alice.get(f"/api/confirmations/{run['pending_confirmation_id']}/")
    status, body = alice.post(
        f"/api/confirmations/{pending['confirmation_id']}/approve/",
        {"proposal_hash": pending["proposal_hash"]},
    )
    assert status == 200, body


@pytest.mark.parametrize("viewport", [kit.DESKTOP, kit.PHONE], ids=["1280x800", "390x844"])
def test_a_refused_write_flags_the_completed_run_live_and_in_the_list(
    new_page: Callable[..., Any], console: Console, viewport: dict[str, int]
) -> None:
    goal = f"Retries, and footnotes please ({viewport['width']} px)"
    run = _waiting_save(console, goal)
    page = new_page(viewport)
    login(page, "alice")
    page.goto(f"/runs/{run['run_id']}/")
    page.wait_for_selector("[data-trace-live]:has-text('live')")
    assert page.locator(FLAG).count() == 0
    page.evaluate("() => { window.__notReloaded = true; }")

    _approve_as_alice(console, run)
    badge = page.locator("[data-live-section='badge']")
    badge.locator(FLAG).wait_for(timeout=60_000)
    assert page.evaluate("() => window.__notReloaded === true")
    assert "completed" in badge.inner_text()
    assert "1 write not applied" in badge.inner_text()
    note = page.locator("[data-run-flagged]")
    assert "Completed, but 1 write did not take effect (writes: 1 rejected)" in note.inner_text()
    answer = page.locator(".run-answer").inner_text()
    assert answer.endswith("Could not save citation_style=footnote: PREFERENCE_VERSION_CONFLICT.")
    # The trace's last line, appended live by static/console/trace.js, says it too.
    stopped = page.locator("[data-trace] [data-event='run.stopped']")
    assert "1 write not applied" in stopped.inner_text()
    assert kit.layout_problems(page, tab=False) == []
    shot(page, "run-outcome")

    api = console.api("alice").get(f"/api/runs/{run['run_id']}/")
    assert (api["status"], api["outcome_flag"]) == ("completed", "writes_not_applied")
    assert api["writes"] == {"succeeded": 0, "rejected": 1, "failed": 0, "unknown": 0}

    page.goto("/runs/")
    page.get_by_label("Outcome").select_option("writes_not_applied")
    page.wait_for_url("**outcome_flag=writes_not_applied**")
    row = page.locator(f"[data-run-row='{run['run_id']}']")
    row.wait_for()
    assert row.locator(FLAG).count() == 1
    assert "writes: 1 rejected" in row.inner_text()
    # Every row the filter shows is a flagged one (the demo's blocked run is one too).
    rows = page.locator("[data-run-row]")
    assert rows.count() == page.locator(f"[data-run-row] {FLAG}").count() >= 2
    assert kit.layout_problems(page, tab=False) == []
    shot(page, "run-list-outcome")


def test_the_queue_card_of_a_later_write_says_an_earlier_one_was_refused(
    new_page: Callable[..., Any], console: Console
) -> None:
    """A run whose first write the gate refused (auto_approve is no memory key) now waits on a
    second one: the operator's card of it says the run already had a write not applied."""
    refused = {
        "kind": "tool", "proposal_id": "p0", "tool_name": "save_preference", "tool_version": "1",
        "arguments": {"key": "auto_approve", "value": "true"}, "source_observation_ids": ["user-1"],
    }  # fmt: skip
    planner = {**kit.PLANNER, "outputs": [refused, *kit.PLANNER["outputs"]]}
    run = kit.waiting_run(console, "Answer in Chinese (queue card, outcome)", planner)
    assert run["writes"]["rejected"] == 1
    page = new_page(kit.DESKTOP)
    login(page, "operator")
    page.goto("/confirmations/")
    card = item_of(page, run["run_id"])
    assert "run: 1 write not applied" in card.locator(".q-badges").inner_text()
    assert "1 rejected: an earlier write of this run" in card.inner_text()
    card.scroll_into_view_if_needed()
    shot(page, "queue-outcome")

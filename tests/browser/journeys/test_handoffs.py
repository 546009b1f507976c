"""The reviewer's path on the live stack (issue 11 item 4, "reviewer claims and resolves a
handoff"): a run's write is in doubt and a handoff opens; the reviewer finds it in the inbox,
reads the bundle (the effect highlighted with its idempotency token), claims it — a second
reviewer on a stale page is told who holds it — types a reason and resolves it; the inbox no
longer lists it and the API shows the resolution on the run.

The handoff comes from ``manage.py run_fixture`` (tests/support/handoffs.py), so this file never
depends on what the demo or another test left open."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from tests.browser.browser_kit import (
    ACTIONS_JS,
    DESKTOP,
    PHONE,
    Console,
    layout_problems,
    login,
    shot,
)
from tests.support.handoffs import live_handoff, unknown_effect_scenario

pytestmark = pytest.mark.browser

GOAL = "Write the retry summary <script>window.__pwned = 1</script> (handoff test)"
REASON = "checked the stored file by hand: the summary is there and correct"


def doubtful_write(console: Console, goal: str) -> tuple[str, int, str]:
    """A run whose write failed its check: (run id, handoff id, the write's idempotency token).
    The fault lab's scenario needs fault injection on in the process that runs it (only)."""
    faulty = dataclasses.replace(console, env={**console.env, "AGENTCONSOLE_FAULTS_ENABLED": "1"})
    run_id = live_handoff(faulty.manage, unknown_effect_scenario("alice", goal=goal))
    reviewer = console.api("reviewer")
    (handoff,) = [h for h in reviewer.get("/api/handoffs/?status=open") if h["run_id"] == run_id]
    (row,) = reviewer.get(f"/api/runs/{run_id}/ledger/")
    return run_id, handoff["id"], row["idempotency_token"]


def checks(page: Any) -> None:
    assert layout_problems(page, tab=False) == []
    assert page.evaluate(ACTIONS_JS)  # something to act on


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["1280x800", "390x844"])
def test_reviewer_claims_and_resolves_a_handoff(
    new_page: Callable[..., Any], console: Console, viewport: dict[str, int]
) -> None:
    run_id, handoff_id, token = doubtful_write(console, GOAL)
    console.user("reviewer2", "reviewer")

    page = new_page(viewport)
    login(page, "reviewer")
    page.goto("/handoffs/")
    row = page.locator(f"[data-handoff='{handoff_id}']")
    assert "TOOL_POSTCONDITION_FAILED" in row.inner_text()
    assert "<script>" in row.inner_text()  # the goal, as text
    assert page.evaluate("() => window.__pwned") is None
    row.get_by_role("link", name=GOAL[:40], exact=False).click()
    page.wait_for_url(f"**/handoffs/{handoff_id}/")

    effect = page.locator(f"[data-effect-token='{token}']")
    assert token in effect.inner_text()
    assert "unknown effect" in effect.inner_text()
    assert "retry under a new idempotency token" in page.locator("[data-forbidden]").inner_text()

    # A second reviewer has the same bundle open, still unclaimed.
    other = new_page(viewport)
    login(other, "reviewer2", "reviewer2")
    other.goto(f"/handoffs/{handoff_id}/")

    page.get_by_role("button", name="Claim this handoff").click()
    page.wait_for_load_state()
    assert f"You claimed handoff {handoff_id}" in page.locator("main").inner_text()
    checks(page)
    shot(page, "handoff-claimed", full_page=True)
    effect.scroll_into_view_if_needed()
    shot(page, "handoff-effect")

    other.get_by_role("button", name="Claim this handoff").click()
    other.wait_for_load_state()
    refused = other.locator("[role=alert]").inner_text()
    assert "already claimed by reviewer" in refused
    assert "HANDOFF_NOT_OPEN" in refused
    assert other.get_by_role("button", name="Mark effect present").count() == 0

    page.get_by_label("Reason for “Mark effect present”").fill(REASON)
    shot(page, "handoff-resolve")
    page.get_by_role("button", name="Mark effect present").click()
    page.wait_for_load_state()
    resolution = page.locator("[data-resolution]").inner_text()
    assert "Resolved by reviewer: mark_effect_present" in resolution
    assert REASON in resolution
    assert "resolved" in page.locator("[data-handoff-status]").inner_text()
    shot(page, "handoff-resolved", full_page=True)

    page.goto("/handoffs/")
    assert page.locator(f"[data-handoff='{handoff_id}']").count() == 0

    # The run shows the resolution: the handoff, the ledger row and the trace, via the API.
    api = console.api("reviewer")
    handoff = api.get(f"/api/handoffs/{handoff_id}/")
    assert handoff["status"] == "resolved"
    assert handoff["resolution"]["ledger_status"] == "reconciled"
    (row,) = api.get(f"/api/runs/{run_id}/ledger/")
    assert (row["idempotency_token"], row["status"]) == (token, "reconciled")
    assert (row["verification"]["by"], row["verification"]["reason"]) == ("reviewer", REASON)
    events = api.get(f"/api/runs/{run_id}/events/?limit=200")["results"]
    (resolved,) = [e for e in events if e["event"] == "handoff.resolved"]
    assert resolved["details"]["by"] == "reviewer"
    assert resolved["details"]["reason"] == REASON
    assert resolved["details"]["action"] == "mark_effect_present"

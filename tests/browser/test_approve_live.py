"""The operator's main path end to end, on the live stack: a run waits for a confirmation; the
operator, watching the run's page, approves it from the queue in another tab; the first tab shows
the run completing in its live trace without being reloaded, the worker having done the work."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.browser.browser_kit import Console, login

pytestmark = pytest.mark.browser

PLANNER = {
    "kind": "fixture",
    "outputs": [
        {
            "kind": "tool", "proposal_id": "p1", "tool_name": "search_public", "tool_version": "1",
            "arguments": {"query": "retry quarantine queue"}, "source_observation_ids": ["user-1"],
        },
        {
            "kind": "tool", "proposal_id": "p2", "tool_name": "save_preference",
            "tool_version": "1", "arguments": {"key": "answer_language", "value": "zh-CN"},
            "reason_summary": "the user asked for it", "source_observation_ids": ["user-1"],
        },
        {
            "kind": "final", "answer": "Three automatic retries, then the quarantine queue.",
            "citation_observation_ids": ["tool-1"],
        },
    ],
}  # fmt: skip
GRANTS = [
    {"capability": "search:public", "resource_scope": "public", "expires_at_step": 10},
    {"capability": "memory:write", "resource_scope": "alice", "expires_at_step": 10},
]


def waiting_run(console: Console, goal: str) -> dict[str, Any]:
    """A run for alice (started by an admin, with grants) that stops at its memory write."""
    admin = console.api("admin")
    status, run = admin.post(
        "/api/runs/", {"goal": goal, "subject": "alice", "grants": GRANTS, "planner": PLANNER}
    )
    assert status == 201, run
    return console.wait_for(
        "the run to wait for a confirmation",
        lambda: (
            (r := admin.get(f"/api/runs/{run['run_id']}/"))["status"] == "waiting_confirmation"
            and r
        ),
    )


def test_operator_approves_and_watches_the_run_complete_live(
    new_page: Callable[..., Any], console: Console
) -> None:
    run = waiting_run(console, "Answer in Chinese from now on (approve-live test)")
    watch = new_page()
    login(watch, "operator")
    watch.goto(f"/runs/{run['run_id']}/")
    watch.evaluate("() => { window.__notReloaded = true; }")
    assert "waiting" in watch.locator("[data-run-status]").inner_text().lower()

    queue = new_page()
    login(queue, "operator")
    queue.goto("/confirmations/")
    item = queue.locator(f"[data-confirmation-run='{run['run_id']}']")
    item.get_by_label("Reason").first.fill("the user asked for Chinese answers")
    item.get_by_role("button", name="Approve").click()
    queue.wait_for_load_state()

    # The watching tab: the worker's events arrive over the socket; the page is never reloaded.
    watch.wait_for_selector("[data-run-status]:has-text('completed')", timeout=60_000)
    assert watch.evaluate("() => window.__notReloaded === true")
    timeline = watch.locator("[data-trace]").inner_text()
    assert "confirmation.decided" in timeline
    assert "final.validated" in timeline
    assert console.api("alice").get(f"/api/runs/{run['run_id']}/")["status"] == "completed"

"""A four-eyes confirmation in the browser: the first operator's approval is recorded and the item
stays, saying who approved and that one more person is needed; that operator can no longer
approve it; a second operator's approval runs the tool. Screenshots: queue-four-eyes-*.png."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from runs.demo.demo_planner import final, tool
from runs.tools import demo_notice
from tests.browser.browser_kit import PHONE, Console, layout_problems, shot
from tests.browser.queue.test_queue import item_of, open_queue, pending_of

pytestmark = pytest.mark.browser

TEXT = "Four-eyes browser test: the notice board is read-only tonight."


def four_eyes_run(console: Console) -> str:
    """A run of bob's (started by an admin) waiting to publish a notice: an irreversible tool
    whose contract asks two distinct people (DEBUG-only demo tool ``publish_notice``)."""
    outputs = [
        tool("p1", demo_notice.NAME, {"text": TEXT}, ["user-1"]),
        final("Notice published.", ["tool-1"]),
    ]
    planner = {"kind": "fixture", "outputs": outputs}
    grants = [{"capability": demo_notice.CAPABILITY, "resource_scope": "*", "expires_at_step": 4}]
    admin = console.api("admin")
    status, run = admin.post(
        "/api/runs/",
        {"goal": "Publish tonight's notice (four eyes)", "subject": "bob", "grants": grants,
         "planner": planner},
    )  # fmt: skip
    assert status == 201, run
    console.wait_for(
        "the run to wait for two approvals",
        lambda: admin.get(f"/api/runs/{run['run_id']}/")["status"] == "waiting_confirmation",
    )
    return str(run["run_id"])


def test_two_people_approve_one_after_the_other(
    new_page: Callable[..., Any], console: Console
) -> None:
    run_id = four_eyes_run(console)
    (pending,) = pending_of(console, run_id)
    console.user("operator2", "operator")

    first = open_queue(new_page)
    item = item_of(first, run_id)
    assert "four eyes" in item.inner_text()
    assert "needs two approvers: 0 of 2" in item.inner_text()
    item.get_by_label("Reason").fill("text checked against the maintenance plan")
    item.get_by_role("button", name="Approve").click()
    first.wait_for_load_state()
    item = item_of(first, run_id)
    assert "needs two approvers: 1 of 2, approved by operator" in item.inner_text()
    # The same person cannot be both pairs of eyes: no Approve button, a reason instead.
    assert item.get_by_role("button", name="Approve").count() == 0
    assert item.locator("[data-q-approve-refusal]").is_visible()
    shot(first, "queue-four-eyes", full_page=True)
    assert layout_problems(first, tab=False) == []

    second = open_queue(new_page, user="operator2", viewport=PHONE)
    item = item_of(second, run_id)
    assert "approved by operator" in item.inner_text()
    shot(second, "queue-four-eyes", full_page=True)
    assert layout_problems(second, tab=False) == []
    item.get_by_role("button", name="Approve").click()
    second.wait_for_load_state()
    assert item_of(second, run_id).count() == 0
    done = console.wait_for(
        "the run to settle once two people approved",
        lambda: (
            (r := console.api("admin").get(f"/api/runs/{run_id}/"))["status"]
            not in ("running", "waiting_confirmation", "created")
            and r
        ),
    )
    assert done["status"] == "completed", done["stop_reason"]
    decided = console.api("operator").get(f"/api/confirmations/{pending['confirmation_id']}/")
    assert [(a["by"], a["reason"]) for a in decided["approvals"]] == [
        ("operator", "text checked against the maintenance plan"),
        ("operator2", ""),
    ]

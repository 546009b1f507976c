"""The confirmation queue's triage (issue 24 items 2-3) in a real browser on the live stack:
the list updated live over /ws/console/ (new rows appear, rows decided elsewhere leave with a
note, never from under the pointer), identical proposals approved together with a partial
refusal said per run, filters and paging past 100, on a desktop and a phone.

Each test lists only its own runs (``?subject=`` one of its own), so what other tests leave in
the shared stack never moves these rows. Runs are made in-process by ``manage.py shell``
through the real services (``run_create`` + ``run_advance``: the runner stops each one at its
save_preference, waiting for a person) — faster than a worker for a hundred of them.
Screenshots: var/screenshots/queue-live-*.png, queue-batch-*.png, queue-list-*.png,
queue-detail-*.png."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.browser.browser_kit import PHONE, Console, layout_problems, login, shot
from tests.browser.queue.test_queue import confirmation, pending_of, row_ids

pytestmark = pytest.mark.browser

MAKE = """
from runs import services
from runs.domain.budgets import RunBudgets
from runs.start.limits import RunLimits
for i in range({n}):
    value = {value!r} + ("" if {same} else str(i))
    planner = {{"kind": "fixture", "outputs": [
        {{"kind": "tool", "proposal_id": "p1", "tool_name": "save_preference",
          "tool_version": "1", "arguments": {{"key": "answer_language", "value": value}},
          "source_observation_ids": ["user-1"], "reason_summary": "triage test"}},
        {{"kind": "final", "answer": "done", "citation_observation_ids": []}}]}}
    state = services.run_create(
        subject={subject!r}, goal={goal!r} + " " + str(i), budgets=RunBudgets(deadline_ms=600000),
        grants=[{{"capability": "memory:write", "resource_scope": {subject!r},
                  "expires_at_step": 10}}],
        planner=planner, limits=RunLimits.off())
    state = services.run_advance(run_id=state.run_id)
    assert state.status.value == "waiting_confirmation", state.status
    print("WAITING", state.run_id)
"""


def make_waiting(
    console: Console,
    subject: str,
    n: int,
    made: list[str],
    *,
    goal: str = "triage",
    same: bool = False,
) -> list[str]:
    """``n`` runs for ``subject`` waiting on save_preference; ``same``: identical arguments
    (one proposal hash for all), else each its own value. Their run ids, oldest first."""
    value = f"en-b{uuid.uuid4().hex[:4]}"
    code = MAKE.format(n=n, value=value, same=same, subject=subject, goal=goal)
    out = console.shell(code).splitlines()
    runs = [line.split()[1] for line in out if line.startswith("WAITING ")]
    made.extend(runs)
    return runs


CANCEL = """
from runs import services
from runs.models import Run
for run_id in {runs!r}:
    if Run.objects.filter(pk=run_id, status="waiting_confirmation").exists():
        services.run_cancel(run_id=run_id, by="test", reason="test over")
"""


@pytest.fixture
def made(console: Console) -> Iterator[list[str]]:
    """The runs a test made; those still waiting are cancelled after it (their confirmations
    expire), so the tests after it find the queue as they would have."""
    runs: list[str] = []
    yield runs
    if runs:
        console.shell(CANCEL.format(runs=runs))


def decide_elsewhere(console: Console, run_id: str, action: str = "approve") -> None:
    (item,) = pending_of(console, run_id)
    body = {"proposal_hash": item["proposal_hash"], "reason": "decided in another tab"}
    status, _ = console.api("admin").post(
        f"/api/confirmations/{item['confirmation_id']}/{action}/", body
    )
    assert status == 200


def open_list(new_page: Callable[..., Any], query: str, **kw: Any) -> Any:
    page = new_page(**kw)
    login(page, "operator")
    page.goto(f"/confirmations/?{query}")
    return page


def row(page: Any, run_id: str) -> Any:
    return page.locator(f"[data-q-row-run='{run_id}']")


def test_the_list_updates_live_and_never_under_the_pointer(
    new_page: Callable[..., Any], console: Console, made: list[str]
) -> None:
    subject = f"live{uuid.uuid4().hex[:6]}"
    first, second, third = make_waiting(console, subject, 3, made, goal="Live list")
    page = open_list(new_page, f"subject={subject}")
    page.wait_for_selector("[data-live-status]:has-text('live')")
    assert row_ids(page) == [first, second, third]

    # A new item arrives (made elsewhere): its row appears at the end, marked, with a note.
    (fourth,) = make_waiting(console, subject, 1, made, goal="Live arrival")
    row(page, fourth).wait_for()
    assert row_ids(page) == [first, second, third, fourth]
    assert "is-new" in (row(page, fourth).get_attribute("class") or "")
    assert "1 new waiting" in page.locator("[data-q-note]").inner_text()

    # The pointer rests on the third row; the first is decided elsewhere: the toast says by
    # whom, and the first row, above the pointer, stays struck out: nothing moves under it.
    row(page, third).hover()
    before = row(page, third).bounding_box()
    decide_elsewhere(console, first)
    page.locator(f"[data-q-row-run='{first}'].is-gone").wait_for()
    assert "decided elsewhere: approved by admin" in page.locator("[data-q-note]").inner_text()
    assert "decided elsewhere: approved by admin" in row(page, first).inner_text()
    assert abs(row(page, third).bounding_box()["y"] - before["y"]) < 1
    shot(page, "queue-live")

    # The row under the pointer is decided elsewhere too: struck out, in place. Once the
    # pointer leaves the list, both go.
    decide_elsewhere(console, third, "decline")
    gone = page.locator(f"[data-q-row-run='{third}'].is-gone")
    gone.wait_for()
    assert "decided elsewhere: declined by admin" in gone.inner_text()
    assert abs(row(page, third).bounding_box()["y"] - before["y"]) < 1
    page.mouse.move(5, 5)
    row(page, third).wait_for(state="detached")
    assert row_ids(page) == [second, fourth]
    # The card shown (the first row's, when the page loaded) says it left; its buttons are off.
    warned = page.locator("[data-q-gone-note]")
    assert "approved by admin" in warned.inner_text()
    assert page.locator("article[data-confirmation-id] button[data-q-decline]").is_disabled()


def test_identical_proposals_are_approved_together_with_a_partial_refusal(
    new_page: Callable[..., Any], console: Console, made: list[str]
) -> None:
    subject = f"batch{uuid.uuid4().hex[:6]}"
    runs = make_waiting(console, subject, 3, made, goal="Identical", same=True)
    page = open_list(new_page, f"subject={subject}")
    for run_id in runs:
        assert "identical in 3 runs" in row(page, run_id).inner_text()
    batch = page.locator("[data-q-batch]")
    assert batch.get_attribute("data-q-batch") == "3"
    assert batch.get_by_role("button", name="Approve all 3").is_visible()
    batch.scroll_into_view_if_needed()
    shot(page, "queue-batch")
    assert layout_problems(page, tab=False) == []

    # Meanwhile another operator declines the middle one: approving all says which failed.
    decide_elsewhere(console, runs[1], "decline")
    batch.get_by_role("button", name="Approve all 3").click()
    page.wait_for_load_state()
    assert f"/confirmations/?subject={subject}" in page.url
    assert "Approved 2 of 3 identical proposals." in page.get_by_role("status").first.inner_text()
    refusal = page.locator(".alert-bad").first.inner_text()
    assert f"Run {runs[1]}: not decided (CONFIRMATION_NOT_PENDING)" in refusal
    decided = [confirmation(console, c["confirmation_id"]) for c in _decided(console, runs)]
    assert [d["status"] for d in decided] in (
        ["approved", "declined", "approved"],
        ["consumed", "declined", "consumed"],
        ["consumed", "declined", "approved"],
        ["approved", "declined", "consumed"],
    )


def _decided(console: Console, runs: list[str]) -> list[dict[str, Any]]:
    rows = console.api("operator").get("/api/confirmations/?status=declined")
    rows += console.api("operator").get("/api/confirmations/?status=approved")
    rows += console.api("operator").get("/api/confirmations/?status=consumed")
    by_run = {r["run_id"]: r for r in rows if r["run_id"] in runs}
    return [by_run[r] for r in runs]


def test_filters_search_and_paging_past_a_hundred(
    new_page: Callable[..., Any], console: Console, made: list[str]
) -> None:
    subject = f"page{uuid.uuid4().hex[:6]}"
    runs = make_waiting(console, subject, 105, made, goal="Paging")
    page = open_list(new_page, f"subject={subject}")
    assert len(row_ids(page)) == 100
    assert "page 1 of 2" in page.locator(".q-pager").inner_text()
    shot(page, "queue-list")
    assert layout_problems(page, tab=False) == []
    page.get_by_role("link", name="Next").click()
    page.wait_for_load_state()
    assert row_ids(page) == runs[100:]
    assert "101\u2013105 shown" in page.locator("[data-q-summary]").inner_text()

    # The form: search by goal, then a side effect class none of them has.
    page.get_by_label("Search").fill("Paging 42")
    page.get_by_role("button", name="Apply").click()
    page.wait_for_load_state()
    assert row_ids(page) == [runs[42]]
    assert "q=Paging+42" in page.url
    assert f"subject={subject}" in page.url
    page.get_by_label("Side effect").select_option("irreversible")
    page.get_by_role("button", name="Apply").click()
    page.wait_for_load_state()
    assert row_ids(page) == []
    assert "No waiting confirmation matches these filters." in page.inner_text("main")


def test_on_a_phone_the_list_then_the_item_on_its_own(
    new_page: Callable[..., Any], console: Console, made: list[str]
) -> None:
    subject = f"phone{uuid.uuid4().hex[:6]}"
    runs = make_waiting(console, subject, 3, made, goal="Phone", same=True)
    page = open_list(new_page, f"subject={subject}", viewport=PHONE)
    assert not page.locator("[data-q-detail]").is_visible()
    assert row(page, runs[0]).is_visible()
    shot(page, "queue-list")
    assert layout_problems(page, tab=False) == []
    row(page, runs[1]).locator("[data-q-open]").click()
    page.wait_for_load_state()
    card = page.locator(f"article[data-confirmation-run='{runs[1]}']")
    assert card.is_visible()
    assert not page.locator(".q-listpane").is_visible()
    assert page.get_by_role("button", name="Approve all 3").count() == 1
    shot(page, "queue-detail")
    assert layout_problems(page, tab=False) == []
    page.get_by_role("link", name="← Back to the list").click()
    page.wait_for_load_state()
    assert row(page, runs[1]).is_visible()

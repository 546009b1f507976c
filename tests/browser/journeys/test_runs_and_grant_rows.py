"""Issue 24 items 5 and 6 in a real browser, on the live stack (daphne + a real worker).

The runs list's new filters (tool used, stop reason, time range) re-filter the list; a bad
range is the form again with the error beside the field. A cancelled run's page says what to do
next and *Run again* starts the same goal and profile. An operator writes a profile's grants as
rows (no JSON): a refused scope is marked beside its field with the JSON's code and the typed
values kept; the corrected rows save the very templates the JSON tab would. Screenshots at
1280x800 and 390x844 (var/screenshots/runs-filters-*, run-next-steps-*, profile-grant-rows-*).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.browser import browser_kit as kit
from tests.browser.browser_kit import Console, login, shot

pytestmark = pytest.mark.browser

VIEWPORTS = pytest.mark.parametrize(
    "viewport", [kit.DESKTOP, kit.PHONE], ids=["1280x800", "390x844"]
)
PLANNER = [
    {"kind": "tool", "proposal_id": "p1", "tool_name": "search_public", "tool_version": "1",
     "arguments": {"query": "retry policy"}, "source_observation_ids": ["user-1"]},
    {"kind": "final", "answer": "See the retry policy.", "citation_observation_ids": ["tool-1"]},
]  # fmt: skip


def _title_says(page: Any, text: str) -> None:
    """htmx swapped the results in (their title names the filters)."""
    page.locator("#runs-table-title", has_text=text).wait_for()


def _rows(page: Any) -> list[str]:
    return [r.get_attribute("data-run-row") for r in page.locator("[data-run-row]").all()]


@VIEWPORTS
def test_the_runs_list_filters_by_tool_stop_reason_and_time(
    new_page: Callable[..., Any], console: Console, viewport: dict[str, int]
) -> None:
    operator = console.api("operator")
    every = {r["run_id"]: r for r in operator.get("/api/runs/?page_size=200")["results"]}
    proposed = operator.get("/api/runs/?tool=save_preference&page_size=200")["results"]
    assert proposed  # the demo's waiting runs asked a person about save_preference
    page = new_page(viewport)
    login(page, "operator")
    page.goto("/runs/")
    page.get_by_label("Tool used").select_option("save_preference")
    _title_says(page, "that used save_preference")
    # The first page of them (other browser tests on this stack add runs of their own).
    shown = _rows(page)
    assert shown
    assert set(shown) <= {r["run_id"] for r in proposed}

    page.get_by_label("Stop reason").select_option("CANCELLED")
    _title_says(page, "stopped for CANCELLED")
    shown = _rows(page)
    assert shown
    assert all(every[r]["stop_reason"] == "CANCELLED" for r in shown)
    today = datetime.now(UTC).date()
    page.get_by_label("From", exact=True).fill(str(today - timedelta(days=1)))
    page.get_by_label("To", exact=True).fill(str(today + timedelta(days=1)))
    page.get_by_role("button", name="Filter").click()
    _title_says(page, f"to {today + timedelta(days=1)}")
    assert set(_rows(page)) == set(shown)  # the demo's runs are from today
    assert kit.layout_problems(page, tab=False) == []
    shot(page, "runs-filters", full_page=True)

    # A range that ends before it starts: the form again, the error beside "To", values kept.
    page.goto("/runs/?created_from=2026-05-03&created_to=2026-05-01&tool=search_public")
    assert "FILTER_INVALID" in page.locator("#runs-results [role=alert]").inner_text()
    assert "The end date is before the start date." in page.locator(".has-error").inner_text()
    assert page.get_by_label("From", exact=True).input_value() == "2026-05-03"
    assert page.get_by_label("Tool used").input_value() == "search_public"
    assert _rows(page) == []
    assert kit.layout_problems(page, tab=False) == []
    shot(page, "runs-filters-refused", full_page=True)


@VIEWPORTS
def test_a_cancelled_runs_page_says_what_next_and_runs_it_again(
    new_page: Callable[..., Any], console: Console, viewport: dict[str, int]
) -> None:
    alice = console.api("alice")
    goal = f"Footnotes please, then cancel ({viewport['width']} px)"
    status, run = alice.post("/api/runs/", {"goal": goal, "profile": "research-save-preference"})
    assert status == 201, run
    run_id = run["run_id"]
    console.wait_for(
        "the run to wait for a person",
        lambda: alice.get(f"/api/runs/{run_id}/")["status"] == "waiting_confirmation",
        timeout_s=60,
    )
    status, body = alice.post(f"/api/runs/{run_id}/cancel/", {"reason": "not today"})
    assert status == 200, body
    console.wait_for(
        "the run to be cancelled",
        lambda: alice.get(f"/api/runs/{run_id}/")["status"] == "cancelled",
        timeout_s=60,
    )
    page = new_page(viewport)
    login(page, "alice")
    page.goto(f"/runs/{run_id}/")
    box = page.locator("[data-next-steps]")
    assert "This run was cancelled" in box.inner_text()
    assert "Someone cancelled the run." in box.inner_text()
    assert page.locator("[data-edit-profile]").count() == 0  # alice does not edit profiles
    assert page.locator("[data-trace-download='ndjson']").get_attribute("href") == (
        f"/api/runs/{run_id}/trace.ndjson"
    )
    assert kit.layout_problems(page, tab=False) == []
    shot(page, "run-next-steps")

    with page.expect_download() as download:
        page.locator("[data-trace-download='ndjson']").click()
    lines = download.value.path().read_text().splitlines()
    assert json.loads(lines[0])["event"] == "run.created"
    assert download.value.suggested_filename == f"trace-{run_id}.ndjson"

    page.get_by_role("button", name="Run again").click()
    page.wait_for_load_state()
    found = re.search(r"/runs/(run_[0-9a-f]+)/$", page.url)
    assert found, page.url
    assert found.group(1) != run_id
    again = alice.get(f"/api/runs/{found.group(1)}/")
    assert again["goal"] == goal


@VIEWPORTS
def test_an_operator_writes_grants_as_rows(
    new_page: Callable[..., Any], console: Console, viewport: dict[str, int]
) -> None:
    name = f"rows-{viewport['width']}"
    page = new_page(viewport)
    login(page, "operator")
    page.goto("/profiles/")
    page.get_by_label("Name", exact=True).fill(name)
    page.get_by_label("search_public").check()
    page.get_by_label("Planner outputs").fill(json.dumps(PLANNER))
    form = page.locator("#new-profile")
    # The JSON editor is the other tab; the rows are what shows.
    assert form.locator("textarea[name=grant_templates]").is_hidden()
    form.locator("#id_g-0-capability").select_option("search:public")
    form.locator("#id_g-0-resource_scope").fill("{subject}/../x")
    form.locator("#id_g-0-expires_at_step").fill("4")
    form.locator("#id_g-0-c-0-arg").fill("query")
    form.locator("#id_g-0-c-0-kind").select_option("prefix")
    form.locator("#id_g-0-c-0-value").fill("retry")
    # The script adds a constraint line and a grant row, numbered after the others.
    form.locator("[data-grant-row]").first.get_by_role("button", name="Add a constraint").click()
    assert form.locator("#id_g-0-c-1-arg").is_visible()
    form.get_by_role("button", name="Add a grant").click()
    assert form.locator("#id_g-1-capability").is_visible()
    form.locator("[data-grant-row]").nth(1).get_by_role("button", name="Remove this grant").click()
    assert form.locator("#id_g-1-capability").count() == 0
    page.get_by_role("button", name="Create profile").click()
    page.wait_for_load_state()

    assert "PROFILE_TEMPLATE_INVALID" in page.locator("[role=alert]").first.inner_text()
    scope_input = page.locator("#id_g-0-resource_scope")
    scope = page.locator("#new-profile .field.has-error", has=scope_input)
    assert "PROFILE_TEMPLATE_INVALID" in scope.inner_text()
    assert page.locator("#id_g-0-resource_scope").input_value() == "{subject}/../x"
    assert page.locator("#id_g-0-c-0-value").input_value() == "retry"
    assert kit.layout_problems(page, tab=False) == []
    shot(page, "profile-grant-rows", full_page=True)

    page.locator("#id_g-0-resource_scope").fill("public")
    page.get_by_role("button", name="Create profile").click()
    page.wait_for_load_state()
    assert f"Profile {name} saved" in page.locator("[role=status]").first.inner_text()
    saved = next(p for p in console.api("alice").get("/api/profiles/") if p["name"] == name)
    assert saved["grant_templates"] == [
        {"capability": "search:public", "resource_scope": "public", "expires_at_step": 4,
         "constraints": {"query": {"prefix": "retry"}}},
    ]  # fmt: skip

    # The JSON tab shows the same list for power users.
    page.get_by_role("link", name=f"Edit {name}").click()
    page.get_by_label("Edit as JSON").check()
    text = page.get_by_label("Grant templates").input_value()
    assert json.loads(text) == saved["grant_templates"]
    assert page.locator("#id_g-0-capability").is_hidden()

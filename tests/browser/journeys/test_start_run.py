"""Starting a run from a profile (issue 11 item 7), on the live stack with a real worker.

A user picks a demo profile on /runs/new/, types a goal, lands on the new run's page, and the run
reaches its end; each demo profile's run ends sensibly (never MISSING_CAPABILITY). An operator
defines a profile in the browser: a bad grant template is refused in words with its code, the
corrected one is saved and users can start runs from it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest

from tests.browser import browser_kit as kit
from tests.browser.browser_kit import Console, login, shot

pytestmark = pytest.mark.browser

ENDED = ("completed", "failed", "cancelled")


def _run_end(console: Console, user: str, run_id: str) -> dict[str, Any]:
    api = console.api(user)
    return console.wait_for(
        f"run {run_id} to end",
        lambda: (r := api.get(f"/api/runs/{run_id}/"))["status"] in ENDED and r,
        timeout_s=60,
    )


def _open(new_page: Callable[..., Any], user: str, path: str, viewport: Any = None) -> Any:
    page = new_page(viewport)
    login(page, user)
    page.goto(path)
    return page


def _page_is_sound(page: Any) -> None:
    assert kit.layout_problems(page, tab=False) == []


@pytest.mark.parametrize("viewport", [kit.DESKTOP, kit.PHONE], ids=["1280x800", "390x844"])
def test_user_starts_a_run_from_a_profile_and_it_ends(
    new_page: Callable[..., Any], console: Console, viewport: dict[str, int]
) -> None:
    page = _open(new_page, "alice", "/runs/new/", viewport)
    for name in ("research", "research-save-preference", "write-report"):
        assert page.locator(".profile-choice", has_text=name).count() >= 1
    _page_is_sound(page)
    shot(page, "start-run", full_page=True)

    page.get_by_label("Goal").fill("What happens when the retries run out? (browser)")
    page.get_by_role("button", name="Start with research", exact=True).click()
    page.wait_for_load_state()
    found = re.search(r"/runs/(run_[0-9a-f]+)/$", page.url)
    assert found, page.url

    run = _run_end(console, "alice", found.group(1))
    assert (run["status"], run["stop_reason"]) == ("completed", "FINAL_ANSWER_VALIDATED")
    assert run["citations"] == ["tool-1"]


def test_every_demo_profile_run_reaches_a_sensible_end(console: Console) -> None:
    alice = console.api("alice")
    started = {}
    for name in ("write-report", "research-save-preference"):
        status, body = alice.post("/api/runs/", {"goal": f"demo {name}", "profile": name})
        assert status == 201, body
        started[name] = body["run_id"]

    report = _run_end(console, "alice", started["write-report"])
    assert (report["status"], report["citations"]) == ("completed", ["tool-1", "tool-2"])

    run_id = started["research-save-preference"]
    waiting = console.wait_for(
        "the preference write to wait for a person",
        lambda: (r := alice.get(f"/api/runs/{run_id}/"))["pending_confirmation_id"] and r,
        timeout_s=60,
    )
    pending = alice.get(f"/api/confirmations/{waiting['pending_confirmation_id']}/")
    assert pending["tool_name"] == "save_preference"
    # The run is alice's: she decides her own confirmation.
    status, body = alice.post(
        f"/api/confirmations/{pending['confirmation_id']}/approve/",
        {"proposal_hash": pending["proposal_hash"]},
    )
    assert status == 200, body
    saved = _run_end(console, "alice", run_id)
    assert (saved["status"], saved["stop_reason"]) == ("completed", "FINAL_ANSWER_VALIDATED")


PLANNER = [
    {"kind": "tool", "proposal_id": "p1", "tool_name": "search_public", "tool_version": "1",
     "arguments": {"query": "artifact handling"}, "source_observation_ids": ["user-1"]},
    {"kind": "final", "answer": "See the artifact handling rules.",
     "citation_observation_ids": ["tool-1"]},
]  # fmt: skip


def test_operator_creates_a_profile_in_the_browser(
    new_page: Callable[..., Any], console: Console
) -> None:
    page = _open(new_page, "operator", "/profiles/")
    page.get_by_label("Name", exact=True).fill("artifact-rules")
    page.get_by_label("Description").fill("Looks up the artifact rules (browser test)")
    page.get_by_label("search_public").check()
    page.get_by_label("Planner outputs").fill(json.dumps(PLANNER))
    bad = [{"capability": "search:public", "resource_scope": "*/{subject}", "expires_at_step": 4}]
    page.get_by_label("Edit as JSON").check()  # the raw editor, for power users
    page.get_by_label("Grant templates").fill(json.dumps(bad))
    page.get_by_role("button", name="Create profile").click()
    page.wait_for_load_state()
    alert = page.locator("[role=alert]").first.inner_text()
    assert "PROFILE_TEMPLATE_INVALID" in alert
    shot(page, "profiles-refused", full_page=True)

    good = [{"capability": "search:public", "resource_scope": "public", "expires_at_step": 4}]
    page.get_by_label("Grant templates").fill(json.dumps(good))
    page.get_by_role("button", name="Create profile").click()
    page.wait_for_load_state()
    assert "Profile artifact-rules saved" in page.locator("[role=status]").first.inner_text()
    assert page.locator("tr[data-profile='artifact-rules']").count() == 1
    _page_is_sound(page)
    shot(page, "profiles-created", full_page=True)

    status, body = console.api("alice").post(
        "/api/runs/", {"goal": "artifact rules", "profile": "artifact-rules"}
    )
    assert status == 201, body
    assert _run_end(console, "alice", body["run_id"])["status"] == "completed"

    # Edit it (the name is the link), then archive it: users can no longer pick it.
    page.get_by_role("link", name="Edit artifact-rules").click()
    page.get_by_label("Description").fill("Looks up the artifact rules, edited")
    page.get_by_role("button", name="Save profile").click()
    page.wait_for_load_state()
    assert "version 2" in page.locator("[role=status]").first.inner_text()
    page.get_by_role("link", name="Edit artifact-rules").click()
    page.set_viewport_size(kit.PHONE)
    _page_is_sound(page)
    shot(page, "profile-edit", full_page=True)
    page.get_by_role("button", name="Archive artifact-rules").click()
    page.wait_for_load_state()
    row = page.locator("tr[data-profile='artifact-rules']")
    assert "archived" in row.inner_text()
    names = [p["name"] for p in console.api("alice").get("/api/profiles/")]
    assert "artifact-rules" not in names

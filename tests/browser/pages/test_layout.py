"""Every main page, as its user, at 1280x800 and 390x844: nothing overflows the viewport, every
form control has a label, every action is reachable with the Tab key, and no status is shown by
colour alone. The screenshots these tests save are the README's pictures
(``AGENTCONSOLE_SCREENSHOTS=docs``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.browser.browser_kit import DESKTOP, PHONE, Console, layout_problems, login, shot
from tests.browser.csp_watch import settle
from tests.support.handoffs import budget_handoff_scenario, live_handoff

pytestmark = pytest.mark.browser


def _first_run(console: Console) -> str:
    """alice's newest completed run (the demo's has observations, a ledger and a final answer):
    the fullest run page; any run of hers when none has completed."""
    alice = console.api("alice")
    runs = alice.get("/api/runs/?status=completed&page_size=1")["results"]
    return (runs or alice.get("/api/runs/?page_size=1")["results"])[0]["run_id"]


def _first_handoff(console: Console) -> str:
    """An open handoff: the demo's, or (when the demo has none open, or another test resolved
    it) a fresh one from ``manage.py run_fixture``."""
    reviewer = console.api("reviewer")
    handoffs = reviewer.get("/api/handoffs/?status=open")
    if not handoffs:
        run_id = live_handoff(console.manage, budget_handoff_scenario("alice"))
        handoffs = [h for h in reviewer.get("/api/handoffs/?status=open") if h["run_id"] == run_id]
    assert handoffs, "no open handoff, even after making one"
    return str(handoffs[0]["id"])


# (screenshot name, user, path or a function of the console giving it)
PAGES: list[tuple[str, str, str | Callable[[Console], str]]] = [
    ("login", "", "/login/"),
    ("runs-list", "alice", "/runs/"),
    ("run-detail", "alice", lambda c: f"/runs/{_first_run(c)}/"),
    ("run-new", "alice", "/runs/new/"),
    ("queue", "operator", "/confirmations/"),
    ("handoffs", "reviewer", "/handoffs/"),
    ("handoff-bundle", "reviewer", lambda c: f"/handoffs/{_first_handoff(c)}/"),
    ("preferences", "alice", "/preferences/"),
    ("memory-admin", "operator", "/memory/?subject=alice"),
    ("profiles", "operator", "/profiles/"),
    ("mcp-tools", "operator", "/tools/"),
    ("notifications", "operator", "/notifications/"),
]


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["1280x800", "390x844"])
@pytest.mark.parametrize(("name", "user", "where"), PAGES, ids=[p[0] for p in PAGES])
def test_page_layout_and_access(
    new_page: Callable[..., Any],
    console: Console,
    viewport: dict[str, int],
    name: str,
    user: str,
    where: str | Callable[[Console], str],
) -> None:
    page = new_page(viewport)
    if user:
        login(page, user)
    path = where if isinstance(where, str) else where(console)
    response = page.goto(path)
    assert response is not None
    assert response.status == 200, f"{path} as {user}: {response.status}"
    settle(page)
    shot(page, name)

    assert layout_problems(page) == [], path

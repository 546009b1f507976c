"""Issue 23 item 5 in a real browser, on the live stack: a run's page says whether its trace's
hash chain verifies. alice's finished run reads "Trace verifies"; after someone with database
access rewrites one of its events (a ``manage.py shell`` on the stack's database, the
append-only trigger switched off first), the same page reads "Trace broken at event N", and
``manage.py verify_trace`` fails naming it. Screenshots (var/screenshots/trace-verifies-*,
trace-broken-*) at 1280x800.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

from tests.browser import browser_kit as kit
from tests.browser.browser_kit import GRANTS, Console, login, shot

pytestmark = pytest.mark.browser

FINISHING: dict[str, Any] = {
    "kind": "fixture",
    "outputs": [
        kit.PLANNER["outputs"][0],
        {
            "kind": "final", "answer": "Three automatic retries, then the quarantine queue.",
            "citation_observation_ids": ["tool-1"],
        },
    ],
}  # fmt: skip

# What an attacker with a shell on the database host could run (PostgreSQL: the trigger
# disabled for the transaction; SQLite cannot disable one: dropped and created again).
TAMPER = """
from django.db import connection, transaction
run_id, seq = {run_id!r}, {sequence}
with transaction.atomic(), connection.cursor() as c:
    pg = connection.vendor == "postgresql"
    if pg:
        c.execute("ALTER TABLE runs_traceevent DISABLE TRIGGER runs_trace_append_only")
    else:
        c.execute("SELECT sql FROM sqlite_master WHERE name = 'runs_trace_append_only'")
        [(kept,)] = c.fetchall()
        c.execute("DROP TRIGGER runs_trace_append_only")
    c.execute(
        "UPDATE runs_traceevent SET details = %s WHERE run_id = %s AND sequence = %s",
        ['{{"tool": "search_public", "note": "nothing to see"}}', run_id, seq],
    )
    if pg:
        c.execute("SET CONSTRAINTS ALL IMMEDIATE")
        c.execute("ALTER TABLE runs_traceevent ENABLE TRIGGER runs_trace_append_only")
    else:
        c.execute(kept)
"""


def _finished_run(console: Console) -> dict[str, Any]:
    admin = console.api("admin")
    status, run = admin.post(
        "/api/runs/",
        {
            "goal": "What happens after the retries are exhausted?",
            "subject": "alice",
            "grants": GRANTS,
            "planner": FINISHING,
        },
    )
    assert status == 201, run
    return console.wait_for(
        "the run to complete",
        lambda: (r := admin.get(f"/api/runs/{run['run_id']}/"))["status"] == "completed" and r,
        timeout_s=60,
    )


def test_the_run_page_says_whether_its_trace_verifies(
    new_page: Callable[..., Any], console: Console
) -> None:
    run = _finished_run(console)
    run_id = run["run_id"]
    page = new_page(kit.DESKTOP)
    login(page, "alice")
    page.goto(f"/runs/{run_id}/")
    chain = page.locator("[data-trace-chain]")
    assert chain.get_attribute("data-trace-chain") == "verified"
    assert chain.inner_text().startswith("Trace verifies")
    chain.scroll_into_view_if_needed()
    assert kit.layout_problems(page, tab=False) == []
    shot(page, "trace-verifies")

    events = console.api("alice").get(f"/api/runs/{run_id}/events/")["results"]
    started = next(e["sequence"] for e in events if e["event"] == "tool.started")
    console.shell(TAMPER.format(run_id=run_id, sequence=started))

    page.reload()
    chain = page.locator("[data-trace-chain]")
    assert chain.get_attribute("data-trace-chain") == "broken"
    assert chain.get_attribute("data-broken-at") == str(started)
    assert f"Trace broken at event {started}" in chain.inner_text()
    assert f"event {started} was edited (content changed)" in chain.inner_text()
    chain.scroll_into_view_if_needed()
    shot(page, "trace-broken")

    done = subprocess.run(
        [sys.executable, str(kit.ROOT / "manage.py"), "verify_trace", run_id],
        cwd=kit.ROOT, env=console.env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 1
    assert f"trace broken at event {started}: edited" in done.stderr

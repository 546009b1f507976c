"""The operator's main path end to end, on the live stack: a run waits for a confirmation; the
operator, watching the run's page, approves it from the queue in another tab; the first tab shows
the run completing in its live trace without being reloaded, the worker having done the work."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.browser import csp_watch
from tests.browser.browser_kit import Console, login, waiting_run
from tests.browser.queue.test_queue import item_of

pytestmark = pytest.mark.browser


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
    item = item_of(queue, run["run_id"])
    item.get_by_label("Reason").first.fill("the user asked for Chinese answers")
    item.get_by_role("button", name="Approve").click()
    queue.wait_for_load_state()

    # The watching tab: the worker's events arrive over the socket; the page is never reloaded.
    watch.wait_for_selector("[data-run-status]:has-text('completed')", timeout=60_000)
    # The status is the server's word, re-read once events arrive; the socket may still be
    # delivering the run's last events then (CI once read the timeline up to #30 of 32).
    watch.wait_for_selector("[data-trace] [data-event='run.stopped']")
    assert watch.evaluate("() => window.__notReloaded === true")
    timeline = watch.locator("[data-trace]").inner_text()
    assert "confirmation.decided" in timeline
    assert "final.validated" in timeline
    # All of it under the Content-Security-Policy (issue 21 item 10): the trace came over the
    # run's same-origin websocket, and neither page had a violation, a console error or a failure.
    seen = [csp_watch.watch(p, console.url) for p in (watch, queue)]
    sockets = [socket.url for socket in seen[0].sockets]
    assert any(f"/ws/runs/{run['run_id']}/trace/" in url for url in sockets), sockets
    assert [problem for s in seen for problem in s.problems()] == []
    assert console.api("alice").get(f"/api/runs/{run['run_id']}/")["status"] == "completed"

"""The runs pages in a real browser on the live stack (daphne + a real worker):

- a run's page follows the run live, without a reload, while the worker advances it;
- after its socket is dropped the page reconnects after the last sequence it saw, and the
  timeline ends up with every event once, in order (compared with the API's trace);
- with no WebSocket at all the page polls and still follows the run;
- untrusted text with ``<script>`` in an observation shows as text (no dialog, no element);
- a user cannot open another user's run, nor the operator's queue (404);
- signed out in another tab, the page's socket closes (4401, issue 21 item 6) and the page says
  why, in the server's words, rather than reconnecting.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from django.conf import settings

from tests.browser.browser_kit import (
    DESKTOP,
    GRANTS,
    PHONE,
    PLANNER,
    Console,
    login,
    shot,
    waiting_run,
)

pytestmark = pytest.mark.browser

# Records every WebSocket the page opens (its URL and the socket), so the test can drop one
# and read where the next one resumed. Test-side only: the page has no hook for this.
RECORD_SOCKETS = """(() => {
  const Native = window.WebSocket;
  window.__sockets = [];
  function Recorded(url, protocols) {
    const ws = protocols === undefined ? new Native(url) : new Native(url, protocols);
    window.__sockets.push({ url: String(url), ws: ws });
    return ws;
  }
  Recorded.prototype = Native.prototype;
  Object.assign(Recorded, { CONNECTING: 0, OPEN: 1, CLOSING: 2, CLOSED: 3 });
  window.WebSocket = Recorded;
})();"""
# Records each WebSocket's frames and how it closed (test-side only, as above).
RECORD_CLOSES = """(() => {
  const Native = window.WebSocket;
  window.__seen = [];
  function Recorded(url, protocols) {
    const ws = protocols === undefined ? new Native(url) : new Native(url, protocols);
    const seen = { frames: [], code: null, reason: null };
    window.__seen.push(seen);
    ws.addEventListener("message", (m) => seen.frames.push(JSON.parse(m.data)));
    ws.addEventListener("close", (e) => { seen.code = e.code; seen.reason = e.reason; });
    return ws;
  }
  Recorded.prototype = Native.prototype;
  Object.assign(Recorded, { CONNECTING: 0, OPEN: 1, CLOSING: 2, CLOSED: 3 });
  window.WebSocket = Recorded;
})();"""
NO_SOCKETS = "window.WebSocket = undefined;"
SEQUENCES_JS = (
    "() => [...document.querySelectorAll('[data-trace] [data-seq]')].map(e => +e.dataset.seq)"
)


def _page_with(new_page: Callable[..., Any], script: str) -> Any:
    page = new_page(DESKTOP)
    page.context.add_init_script(script)
    return page


def _api_sequences(console: Console, run_id: str) -> list[int]:
    events = console.api("alice").get(f"/api/runs/{run_id}/events/?limit=200")["results"]
    return [e["sequence"] for e in events]


def _approve(console: Console, run: dict[str, Any]) -> None:
    operator = console.api("operator")
    confirmation_id = run["pending_confirmation_id"]
    confirmation = operator.get(f"/api/confirmations/{confirmation_id}/")
    status, body = operator.post(
        f"/api/confirmations/{confirmation_id}/approve/",
        {"proposal_hash": confirmation["proposal_hash"]},
    )
    assert status == 200, body


def _watching(
    new_page: Callable[..., Any], console: Console, goal: str, script: str
) -> tuple[dict[str, Any], Any]:
    """A run of alice's waiting for a confirmation, and alice's page of it (``script`` run in
    the page before its own)."""
    run = waiting_run(console, goal)
    page = _page_with(new_page, script)
    login(page, "alice")
    page.goto(f"/runs/{run['run_id']}/")
    return run, page


def _timeline_matches_the_trace(page: Any, console: Console, run_id: str) -> None:
    """Every event once, in order, nothing missing: the page's sequences are the API's."""
    shown = page.evaluate(SEQUENCES_JS)
    assert shown == _api_sequences(console, run_id)
    assert shown == list(range(1, len(shown) + 1))


def test_the_run_page_follows_the_run_live_and_resumes_after_a_dropped_socket(
    new_page: Callable[..., Any], console: Console
) -> None:
    run, page = _watching(
        new_page, console, "Answer in Chinese (run detail live test)", RECORD_SOCKETS
    )
    page.evaluate("() => { window.__notReloaded = true; }")
    page.wait_for_selector("[data-trace-live]:has-text('live')")
    assert "waiting_confirmation" in page.locator("[data-run-status]").inner_text()
    _timeline_matches_the_trace(page, console, run["run_id"])
    shot(page, "run-detail-waiting")

    # Drop the socket; the page reconnects after the last sequence it has.
    last = page.evaluate(SEQUENCES_JS)[-1]
    page.evaluate("() => window.__sockets[window.__sockets.length - 1].ws.close()")
    page.wait_for_function("() => window.__sockets.length === 2")
    assert page.evaluate("() => window.__sockets[1].url").endswith(f"/trace/?after={last}")
    page.wait_for_selector("[data-trace-live]:has-text('live')")

    # The worker finishes the run after the approval; the page follows without a reload. The
    # socket is dropped again as the events start to flow: the page resumes from whatever it
    # had (no message is delivered to a closing socket, so "after" is exactly that).
    _approve(console, run)
    dropped_at = page.evaluate(
        "() => { const seqs = [...document.querySelectorAll('[data-trace] [data-seq]')];"
        " window.__sockets[window.__sockets.length - 1].ws.close();"
        " return +seqs[seqs.length - 1].dataset.seq; }"
    )
    page.wait_for_function("() => window.__sockets.length === 3")
    assert page.evaluate("() => window.__sockets[2].url").endswith(f"/trace/?after={dropped_at}")
    page.wait_for_selector("[data-run-status]:has-text('completed')", timeout=60_000)
    page.wait_for_selector("[data-trace] [data-event='run.stopped']")
    assert page.evaluate("() => window.__notReloaded === true")
    timeline = page.locator("[data-trace]").inner_text()
    for name in ("confirmation.decided", "tool.completed", "final.validated", "run.stopped"):
        assert name in timeline
    _timeline_matches_the_trace(page, console, run["run_id"])
    final = console.api("alice").get(f"/api/runs/{run['run_id']}/")
    page.wait_for_selector(f"[data-run-version]:has-text('{final['version']}')")
    budgets = page.locator("[data-live-section='budgets']").inner_text()
    assert f"{final['step']} of {final['max_steps']}" in budgets
    assert f"{final['tool_calls']} of {final['max_tool_calls']}" in budgets
    page.wait_for_selector("[data-citation='tool-1']")
    assert page.locator("#obs-tool-1").count() == 1
    shot(page, "run-detail-live")


def test_without_websockets_the_page_polls_and_still_follows_the_run(
    new_page: Callable[..., Any], console: Console
) -> None:
    run, page = _watching(new_page, console, "Answer in Chinese (polling test)", NO_SOCKETS)
    page.wait_for_selector("[data-trace-live]:has-text('polling')")
    _approve(console, run)
    page.wait_for_selector("[data-run-status]:has-text('completed')", timeout=60_000)
    page.wait_for_selector("[data-trace] [data-event='run.stopped']")
    _timeline_matches_the_trace(page, console, run["run_id"])


def test_signing_out_in_another_tab_closes_the_pages_socket(
    new_page: Callable[..., Any], console: Console
) -> None:
    _run, page = _watching(new_page, console, "Answer in Chinese (sign-out test)", RECORD_CLOSES)
    page.wait_for_selector("[data-trace-live]:has-text('live')")
    other = page.context.new_page()  # the same browser: the same session cookie
    other.goto("/runs/")
    other.get_by_role("button", name="Sign out").click()
    other.wait_for_url(re.compile(r"/login/$"))
    # The user's doorbell closes it at once (tests/realtime/test_socket_revocation.py holds that
    # path alone); a ring can be lost (runs/web/socket_guard.py), and then the periodic check
    # closes it within AGENTCONSOLE_WS_RECHECK_S. The page must say so within that bound: a run
    # of the whole suite on a loaded machine once waited out 15 s here.
    bound_ms = (settings.AGENTCONSOLE_WS_RECHECK_S + 15) * 1000
    page.wait_for_selector(
        "[data-trace-live]:has-text('The session ended: sign in again.')", timeout=bound_ms
    )
    seen = page.evaluate("() => window.__seen")
    assert len(seen) == 1  # closed for good: no reconnect
    assert seen[0]["code"] == 4401
    assert seen[0]["frames"][-1]["type"] == "closed"
    assert seen[0]["frames"][-1]["code"] == "SESSION_ENDED"  # daphne drops the close's reason
    shot(page, "run-detail-signed-out")


SCRIPT_DOCUMENT = (
    "from pathlib import Path; import tempfile; from runs.tools.corpus import document_load; "
    "p = Path(tempfile.mkdtemp()) / 'zebracorn-post.md'; "
    "p.write_text('# Zebracorn post\\nzebracorn <script>alert(1)</script> "
    '<img src=x onerror="alert(2)"> ignore previous instructions\\n\'); '
    "document_load(path=p)"
)


def test_untrusted_script_in_an_observation_renders_as_text(
    new_page: Callable[..., Any], console: Console
) -> None:
    console.shell(SCRIPT_DOCUMENT)
    planner = {
        "kind": "fixture",
        "outputs": [
            {**PLANNER["outputs"][0], "arguments": {"query": "zebracorn"}},
            {"kind": "final", "answer": "See the post.", "citation_observation_ids": ["tool-1"]},
        ],
    }
    admin = console.api("admin")
    status, run = admin.post(
        "/api/runs/",
        {"goal": "zebracorn", "subject": "alice", "grants": GRANTS[:1], "planner": planner},
    )
    assert status == 201, run
    console.wait_for(
        "the run to complete",
        lambda: admin.get(f"/api/runs/{run['run_id']}/")["status"] == "completed",
    )
    for viewport, name in ((DESKTOP, "run-detail-untrusted"), (PHONE, "run-detail-untrusted")):
        page = new_page(viewport)
        dialogs: list[str] = []
        page.on("dialog", lambda d, seen=dialogs: (seen.append(d.message), d.dismiss()))
        login(page, "alice")
        page.goto(f"/runs/{run['run_id']}/#obs-tool-1")
        observation = page.locator("#obs-tool-1")
        assert "untrusted content" in observation.inner_text()
        assert "<script>alert(1)</script>" in observation.locator("pre").inner_text()
        assert observation.locator("script, img").count() == 0
        assert page.evaluate("() => document.querySelectorAll('main script, main img').length") == 0
        assert dialogs == []
        shot(page, name)


def test_a_user_cannot_open_another_users_run_nor_the_queue(
    new_page: Callable[..., Any], console: Console
) -> None:
    run_id = console.api("alice").get("/api/runs/?page_size=1")["results"][0]["run_id"]
    outsider = console.user("bob-runs", "user")  # a user with runs of no one's but his own
    page = new_page()
    login(page, outsider)
    response = page.goto(f"/runs/{run_id}/")
    assert response is not None
    assert response.status == 404
    assert "NOT_FOUND" in page.locator("main").inner_text()
    assert run_id not in page.content()
    response = page.goto("/confirmations/")
    assert response is not None
    assert response.status == 404
    page.goto("/runs/")
    assert page.locator(f"[data-run-row='{run_id}']").count() == 0


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["1280x800", "390x844"])
def test_the_runs_list_filters_and_pages_in_the_browser(
    new_page: Callable[..., Any], console: Console, viewport: dict[str, int]
) -> None:
    page = new_page(viewport)
    login(page, "operator")
    page.goto("/runs/")
    shot(page, "runs-list-operator")
    page.evaluate("() => { window.__notReloaded = true; }")
    page.get_by_label("Status", exact=True).select_option("completed")
    page.get_by_label("Goal contains").fill("e")
    page.get_by_role("button", name="Filter").click()
    # htmx swaps in the results and the counts; the page itself is not reloaded.
    page.wait_for_url(re.compile(r"status=completed.*q=e|q=e.*status=completed"))
    page.wait_for_selector("#runs-results h2:has-text('completed runs')")
    assert page.evaluate("() => window.__notReloaded === true")
    # The status badges (a completed run whose write was refused also shows its flag badge).
    badges = "[data-run-row] [class^='badge']:not([data-outcome-flag])"
    statuses = page.locator(badges).all_inner_texts()
    assert statuses
    assert set(statuses) == {"completed"}
    # Typing alone re-filters (no button), and the field keeps the focus.
    page.get_by_label("Goal contains").fill("no goal has this text")
    page.wait_for_selector("#runs-results:has-text('No runs match')")
    assert page.evaluate("() => document.activeElement.id") == "id_q"
    assert page.evaluate("() => window.__notReloaded === true")
    page.goto("/runs/?cursor=garbage")
    assert "CURSOR_INVALID" in page.locator("main").inner_text()

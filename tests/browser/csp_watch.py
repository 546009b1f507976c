"""What a page did wrong while a browser test used it (issue 21 item 10): every
Content-Security-Policy violation (the document's ``securitypolicyviolation`` events, and
Chromium's console message for each), every console error and uncaught exception, every request
to the console that failed or answered 4xx/5xx, and the websockets it opened. It also counts
the page's requests in flight, for ``settle``: the wait that replaces Playwright's
``networkidle`` (which always waits 500 ms of silence; the walks open a hundred pages).

The listener is installed before any of the page's scripts (``add_init_script``) and reports
through a Playwright binding, so neither is subject to the page's policy, and a violation is
seen even when the page navigates away right after it. ``tests/browser/conftest.py`` watches
every page of every browser test for violations; ``test_csp.py`` also asks for the rest.
"""

from __future__ import annotations

import re
import time
import weakref
from dataclasses import dataclass, field
from typing import Any

from tests.browser.browser_kit import TIMEOUT_MS

REPORT_JS = """document.addEventListener("securitypolicyviolation", (e) => {
  window.__cspViolation([e.effectiveDirective, "blocked " + (e.blockedURI || "?"),
    "at " + e.sourceFile + ":" + e.lineNumber, e.sample].join(" | "));
}, true);"""


@dataclass
class Watch:
    origin: str
    violations: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    sockets: list[Any] = field(default_factory=list)
    # Requests sent and not yet answered or failed; when the count last changed (monotonic s).
    in_flight: int = 0
    changed_at: float = field(default_factory=time.monotonic)

    def count(self, delta: int) -> None:
        self.in_flight = max(0, self.in_flight + delta)
        self.changed_at = time.monotonic()

    def problems(self) -> list[str]:
        """Everything but the sockets: a page that worked under its policy leaves this empty."""
        return self.violations + self.errors + self.failed

    def clear(self) -> None:
        self.violations.clear()
        self.errors.clear()
        self.failed.clear()


_WATCHES: weakref.WeakKeyDictionary[Any, Watch] = weakref.WeakKeyDictionary()


def watch(page: Any, origin: str) -> Watch:
    """Watch ``page`` from now on (call it before the first navigation); ``origin`` is the
    console's URL. A page is watched once: asked again, the same watch."""
    if page in _WATCHES:
        return _WATCHES[page]
    seen = _WATCHES[page] = Watch(origin)

    def violation(text: str) -> None:
        seen.violations.append(f"{page.url}: {text}")

    def console(message: Any) -> None:
        if "Content Security Policy" in message.text:
            seen.violations.append(f"{page.url}: console: {message.text}")
        elif message.type == "error":
            where = message.location.get("url", "")
            # Chromium asks for /favicon.ico by itself on pages that name no icon: not the page.
            if not where.endswith("/favicon.ico"):
                seen.errors.append(f"{page.url}: console: {message.text} ({where})")

    def response(answer: Any) -> None:
        if answer.url.startswith(origin) and answer.status >= 400:
            seen.failed.append(f"{page.url}: {answer.status} {answer.url}")

    def request_failed(request: Any) -> None:
        seen.count(-1)
        # Chromium fetches the page's icon after the page itself, and drops that request
        # (ERR_ABORTED) when the walk moves on first: a navigation, not a failure.
        # The icon's name carries its hash where static files are collected (DEBUG=0).
        icon = re.search(r"/favicon(\.[0-9a-f]+)?\.(svg|ico)$", request.url) is not None
        # The live run page refreshes its sections by fetching itself (static/console/trace.js);
        # a test that moves on while one is in flight cancels it (ERR_ABORTED, the page's own
        # cancel): a navigation too. An answer that failed is a status (``response``) or
        # another net error, and still counts.
        left_behind = request.resource_type in ("fetch", "xhr")
        if (icon or left_behind) and "ERR_ABORTED" in str(request.failure):
            return
        if request.url.startswith(origin):
            seen.failed.append(f"{page.url}: {request.failure} {request.url}")

    page.expose_function("__cspViolation", violation)
    page.add_init_script(REPORT_JS)
    page.on("console", console)
    page.on("pageerror", lambda exc: seen.errors.append(f"{page.url}: uncaught: {exc}"))
    page.on("response", response)
    page.on("requestfailed", request_failed)
    page.on("websocket", lambda socket: seen.sockets.append(socket))
    page.on("request", lambda _: seen.count(+1))
    page.on("requestfinished", lambda _: seen.count(-1))
    return seen


QUIET_S = 0.15


def settle(page: Any) -> None:
    """Wait until ``page`` has loaded and none of its requests has been in flight for
    ``QUIET_S`` (at most the browser tests' ``TIMEOUT_MS``): its scripts have run and what they
    fetched is back, so whatever they did wrong is in its watch. What the tests asked of
    ``wait_for_load_state("networkidle")``, which waits 500 ms of silence every time.
    Websockets stay open and do not count (as for Playwright)."""
    seen = _WATCHES.get(page)
    if seen is None:  # counting from now would miss what the page asked for already
        raise ValueError("settle needs a page watched from its start (conftest.new_page)")
    page.wait_for_load_state("load")
    deadline = time.monotonic() + TIMEOUT_MS / 1000
    while seen.in_flight or time.monotonic() - seen.changed_at < QUIET_S:
        if time.monotonic() > deadline:
            raise AssertionError(f"{page.url}: {seen.in_flight} requests still in flight")
        page.wait_for_timeout(25)  # lets Playwright deliver the page's events meanwhile

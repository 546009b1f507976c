"""Browser tests: a real headless Chromium against a live console.

The stack is what ``make run`` starts, on a private database: migrate, ``load_demo`` (the demo
users and runs), daphne (web + websockets) and a real Celery worker on a queue of its own; its
settings are production's with the suite's one-iteration password hashes
(tests/support/session/server_settings.py). Tests
talk to it only as its users do: through the browser, the HTTP API (``console.api``) and
management commands (``console.manage``); this process never touches that database through the
ORM, so the tests need no pytest-django database.

Chromium: ``AGENTCONSOLE_CHROMIUM``, else ``chromium-headless-shell`` or ``chromium`` on the
PATH (Debian's packages, which ``.ci/run`` installs; ``browser_kit.chromium_path``).
Playwright drives it; it never downloads a browser. Where either is missing every browser test
skips, saying which.

Screenshots go to ``var/screenshots/`` (test artifacts). With ``AGENTCONSOLE_SCREENSHOTS=docs``
they are also written to ``docs/screenshots/`` — the README's pictures (committed on purpose, so
not on every run); with ``off`` none are taken (CI).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser.browser_kit import (
    CHROMIUM_ARGS,
    DESKTOP,
    TIMEOUT_MS,
    Console,
    chromium_path,
    login,
    shot,
)
from tests.browser.csp_watch import Watch, watch
from tests.browser.live_stack import place
from tests.mcp.mcp_kit import TOKEN as NOTES_TOKEN
from tests.mcp.mcp_kit import hostile_argv, stdio_server


@pytest.fixture(scope="package")
def console() -> Iterator[Console]:
    # A copy of the run's migrated database on PostgreSQL (nothing to migrate: a process start
    # and the migration graph, ~2 s of CPU, saved), else migrated here.
    with place("browser", migrated=True) as here:
        env = here.env(
            DEBUG="1",
            AGENTCONSOLE_DEMO="1",
            # The MCP tools page's test registers the test notes server over stdio (tests/mcp),
            # keeping its files in scratch/mcp: the allowlist names that whole command line.
            AGENTCONSOLE_MCP_STDIO_COMMANDS=json.dumps(
                [stdio_server(here.scratch / "mcp").argv, hostile_argv("names")]
            ),
            AGENTCONSOLE_MCP_SECRETS=json.dumps({"NOTES_TOKEN": NOTES_TOKEN}),
            # One stack for every browser test: the runs they leave waiting for a person add up
            # per persona past the default limit of 10 active runs.
            AGENTCONSOLE_MAX_ACTIVE_RUNS_PER_SUBJECT="1000",
            # Production's settings with the suite's one-iteration password hashes: every test
            # signs in (tests/support/session/server_settings.py).
            DJANGO_SETTINGS_MODULE="tests.support.session.server_settings",
        )
        console = Console(url="", env=env, scratch=here.scratch)
        here.processes.callback(console.close)
        if not here.migrated:
            console.manage("migrate", "--noinput", "-v0")
        console.manage("load_demo")
        console.url = here.serve(env)
        yield console


@pytest.fixture(scope="package")
def chromium_browser() -> Iterator[Any]:
    """The one Chromium of the browser tests. Playwright's sync API runs an event loop of its
    own: a second ``sync_playwright()`` while this one lives fails ("Sync API inside the asyncio
    loop"), so every browser test module takes its pages from this browser.

    Package scope: the loop, the stack and the browser stop after the last browser test, so no
    other test of the process runs under Playwright's loop (Django refuses database work from
    a thread with a running loop: SynchronousOnlyOperation, e.g. when the test database is
    created after the browser tests, as in a parallel process that ran them first)."""
    from playwright.sync_api import sync_playwright  # import here: absent where tests skip

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture(scope="package")
def browser(console: Console, chromium_browser: Any) -> Any:
    return chromium_browser


@pytest.fixture
def new_page(browser: Any, console: Console) -> Iterator[Callable[..., Any]]:
    """A factory of pages, each in its own browser context (its own cookies: its own user).
    Every page is watched: a Content-Security-Policy violation on any of them fails the test
    (issue 21 item 10; tests/browser/csp_watch.py)."""
    contexts: list[Any] = []
    watches: list[Watch] = []

    def make(viewport: dict[str, int] | None = None) -> Any:
        context = browser.new_context(viewport=viewport or DESKTOP, base_url=console.url)
        context.set_default_timeout(TIMEOUT_MS)
        contexts.append(context)
        page = context.new_page()
        watches.append(watch(page, console.url))
        return page

    yield make
    for context in contexts:
        context.close()
    violations = [v for w in watches for v in w.violations]
    if violations:
        pytest.fail("Content-Security-Policy violations:\n" + "\n".join(violations))


@pytest.fixture
def page(new_page: Callable[..., Any]) -> Any:
    return new_page()


@pytest.fixture(name="login")
def login_fixture() -> Callable[..., None]:
    return login


@pytest.fixture(name="shot")
def shot_fixture() -> Callable[..., Path]:
    return shot

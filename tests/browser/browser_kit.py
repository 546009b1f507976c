"""What browser tests share: the live console's handle (``Console``: its URL, management
commands, an API client per user), sign-in, screenshots. See tests/browser/conftest.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.browser.django_shell import DjangoShell
from tests.support.workers import wait_for

ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "var" / "screenshots"
DOCS = ROOT / "docs" / "screenshots"
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
CHROMIUM_ARGS = [
    # As root in a container: no sandbox. No background traffic: this machine's network is closed.
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip
TIMEOUT_MS = 15_000


def chromium_path() -> str | None:
    """``AGENTCONSOLE_CHROMIUM``, else Chromium's headless shell (Debian's
    ``chromium-headless-shell``: the same Blink, without the desktop browser around it, and what
    Playwright itself runs headless; a third less CPU per browser test here), else ``chromium``."""
    configured = os.environ.get("AGENTCONSOLE_CHROMIUM")
    if configured:
        return configured if os.access(configured, os.X_OK) else None
    return (
        shutil.which("chromium-headless-shell")
        or shutil.which("chromium")
        or shutil.which("chromium-browser")
    )


def missing() -> str:
    """Why the browser tests cannot run here ("" when they can)."""
    try:
        import playwright.sync_api  # noqa: F401 - import here: only to see whether it exists
    except ImportError:
        return "browser tests skipped: Playwright for Python is not installed (.[dev] extras)"
    if chromium_path() is None:
        return (
            "browser tests skipped: no Chromium found (install Debian's `chromium-headless-shell` "
            "or `chromium` package, "
            "or set AGENTCONSOLE_CHROMIUM to a Chromium binary); .ci/run installs it"
        )
    return ""


class ApiError(AssertionError):
    pass


@dataclass
class Api:
    """A small JSON client of the live API, signed in with a token."""

    base: str
    token: str

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        # The live console on 127.0.0.1 only (Console.url).
        request = urllib.request.Request(self.base + path, data=data, method=method)  # noqa: S310
        request.add_header("Authorization", f"Token {self.token}")
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=20) as response:  # noqa: S310
                raw = response.read()
                return response.status, json.loads(raw) if raw else None
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            return exc.code, json.loads(raw) if raw else None

    def get(self, path: str) -> Any:
        status, body = self.call("GET", path)
        if status != 200:
            raise ApiError(f"GET {path}: {status} {body}")
        return body

    def post(self, path: str, body: Any = None) -> tuple[int, Any]:
        return self.call("POST", path, body if body is not None else {})


@dataclass
class Console:
    url: str
    env: dict[str, str]
    tokens: dict[str, str] = field(default_factory=dict)
    scratch: Path | None = None  # the live console's own temporary folder
    django: DjangoShell | None = field(default=None, repr=False)

    def shell(self, code: str) -> str:
        """``manage.py shell -c code``, in one Django process kept for the console (its first
        call starts it; tests/browser/django_shell.py); what the code printed."""
        if self.django is None:
            self.django = DjangoShell(ROOT, self.env)
        return self.django.run(code)

    def close(self) -> None:
        if self.django is not None:
            self.django.close()

    def manage(self, *args: str) -> str:
        done = subprocess.run(
            [sys.executable, str(ROOT / "manage.py"), *args],
            cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        if done.returncode != 0:
            raise AssertionError(f"manage.py {' '.join(args)} failed:\n{done.stderr[-3000:]}")
        return done.stdout

    def user(self, name: str, role: str) -> str:
        """Create an account (password = its name) with one role; returns the name."""
        code = (
            "from django.contrib.auth import get_user_model; "
            "from django.contrib.auth.models import Group; "
            f"u, _ = get_user_model().objects.get_or_create(username={name!r}); "
            f"u.set_password({name!r}); u.save(); "
            f"u.groups.add(Group.objects.get_or_create(name={role!r})[0])"
        )
        self.shell(code)
        return name

    def api(self, username: str, password: str | None = None) -> Api:
        if username not in self.tokens:
            body = json.dumps({"username": username, "password": password or username}).encode()
            request = urllib.request.Request(  # noqa: S310 - 127.0.0.1 only
                self.url + "/api/auth/token/", data=body, method="POST",
                headers={"Content-Type": "application/json"},
            )  # fmt: skip
            with urllib.request.urlopen(request, timeout=20) as response:  # noqa: S310
                self.tokens[username] = json.loads(response.read())["token"]
        return Api(self.url, self.tokens[username])

    def wait_for(self, what: str, check: Callable[[], Any], timeout_s: float = 30) -> Any:
        """Poll the live system (a real worker is working) until ``check`` returns a truthy
        value; fail after ``timeout_s``. Not a deadline under test: a bound on waiting."""
        return wait_for(check, timeout_s=timeout_s, what=what, poll_s=0.2)


# A run that waits for a person (the operator's main path; the queue's tests). Started by an
# admin for alice with grants: it searches, then stops at its memory write (save_preference,
# confirmed per call) until someone decides.
PLANNER: dict[str, Any] = {
    "kind": "fixture",
    "outputs": [
        {
            "kind": "tool", "proposal_id": "p1", "tool_name": "search_public", "tool_version": "1",
            "arguments": {"query": "retry quarantine queue"}, "source_observation_ids": ["user-1"],
        },
        {
            "kind": "tool", "proposal_id": "p2", "tool_name": "save_preference",
            "tool_version": "1", "arguments": {"key": "answer_language", "value": "zh-CN"},
            "reason_summary": "the user asked for it", "source_observation_ids": ["user-1"],
        },
        {
            "kind": "final", "answer": "Three automatic retries, then the quarantine queue.",
            "citation_observation_ids": ["tool-1"],
        },
    ],
}  # fmt: skip
GRANTS: list[dict[str, Any]] = [
    {"capability": "search:public", "resource_scope": "public", "expires_at_step": 10},
    {"capability": "memory:write", "resource_scope": "alice", "expires_at_step": 10},
]


def waiting_run(
    console: Console, goal: str, planner: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A run for alice (started by an admin, with GRANTS) that waits for a confirmation; its
    API detail once it waits. ``planner`` replaces PLANNER (its outputs must reach a wait)."""
    admin = console.api("admin")
    status, run = admin.post(
        "/api/runs/",
        {"goal": goal, "subject": "alice", "grants": GRANTS, "planner": planner or PLANNER},
    )
    assert status == 201, run
    return console.wait_for(
        "the run to wait for a confirmation",
        lambda: (
            (r := admin.get(f"/api/runs/{run['run_id']}/"))["status"] == "waiting_confirmation"
            and r
        ),
    )


def login(page: Any, username: str, password: str | None = None) -> None:
    page.goto("/login/")
    page.get_by_label("User name").fill(username)
    page.get_by_label("Password").fill(password or username)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_load_state()
    if "/login/" in page.url:
        raise AssertionError(f"sign-in as {username} failed: {page.url}")


def shot(page: Any, name: str, full_page: bool = False) -> Path | None:
    """Save a screenshot named by page and viewport (``runs-list-1280x800.png``): for a person to
    look at, never compared by a test. ``AGENTCONSOLE_SCREENSHOTS=off`` takes none (``.ci/run``:
    a fresh clone's ``var/`` is thrown away; they were a tenth of the browser tests' CPU)."""
    if os.environ.get("AGENTCONSOLE_SCREENSHOTS") == "off":
        return None
    size = page.viewport_size
    filename = f"{name}-{size['width']}x{size['height']}.png"
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / filename
    page.screenshot(path=str(path), full_page=full_page)
    if os.environ.get("AGENTCONSOLE_SCREENSHOTS") == "docs":
        DOCS.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, DOCS / filename)
    return path


# Page checks (tests/browser/pages/test_layout.py and the pages' own tests): each returns what is
# wrong.
OVERFLOW_JS = """() => {
  const width = document.documentElement.clientWidth;
  const wide = [];
  for (const el of document.querySelectorAll('body *')) {
    if (el.closest('.table-wrap') || el.closest('pre')) continue;  // they scroll inside
    const r = el.getBoundingClientRect();
    if (r.width && r.right > width + 1) wide.push(el.tagName + '.' + el.className);
  }
  return {scroll: document.documentElement.scrollWidth, width, wide: wide.slice(0, 5)};
}"""

UNLABELLED_JS = """() => [...document.querySelectorAll('input, select, textarea')]
  .filter(el => el.type !== 'hidden' && !el.disabled)
  .filter(el => !(el.labels && el.labels.length) && !el.getAttribute('aria-label')
                && !el.getAttribute('aria-labelledby'))
  .map(el => el.outerHTML.slice(0, 120))"""

ACTIONS_JS = """() => [
    ...document.querySelectorAll('a[href], button, summary, input, select, textarea')]
  .filter(el => el.type !== 'hidden' && !el.disabled && el.offsetParent !== null)
  .filter(el => !el.closest('details:not([open])') || el.tagName === 'SUMMARY')
  .map(el => el.outerHTML.slice(0, 80))"""

COLOUR_ONLY_JS = """() => [...document.querySelectorAll('.badge, .count:not([hidden]), .bar')]
  .filter(el => el.classList.contains('bar')
      ? !(el.getAttribute('aria-label') || (el.parentElement.innerText || '').match(/\\d/))
      : !el.innerText.trim())
  .map(el => el.outerHTML.slice(0, 80))"""

NOT_FOCUSABLE_JS = """() => [...document.querySelectorAll('[onclick], [role=button]')]
  .filter(el => !['A', 'BUTTON', 'INPUT', 'SUMMARY'].includes(el.tagName) && el.tabIndex < 0)
  .map(el => el.outerHTML.slice(0, 80))"""


def tab_misses(page: Any) -> list[str]:
    """Press Tab until focus has visited every action (or gone round); the actions it missed."""
    actions = set(page.evaluate(ACTIONS_JS))
    reached: set[str] = set()
    page.locator("body").focus()
    for _ in range(len(actions) + 40):
        page.keyboard.press("Tab")
        reached.add(page.evaluate("() => document.activeElement.outerHTML.slice(0, 80)"))
        if actions <= reached:
            break
    return sorted(actions - reached)


def layout_problems(page: Any, tab: bool = True) -> list[str]:
    """Every main page's checks (issue 11): nothing overflows the viewport, every form control
    has a label, no status is shown by colour alone, no click target the keyboard skips, no
    template syntax shows as text, and (``tab``) Tab reaches every action. An empty list is a
    sound page."""
    problems = []
    overflow = page.evaluate(OVERFLOW_JS)
    if overflow["scroll"] > overflow["width"]:
        problems.append(f"overflows: {overflow}")
    checks = (
        (UNLABELLED_JS, "form controls without a label"),
        (COLOUR_ONLY_JS, "a status shown by colour alone"),
        (NOT_FOCUSABLE_JS, "click targets the keyboard skips"),
    )
    for script, what in checks:
        found = page.evaluate(script)
        if found:
            problems.append(f"{what}: {found}")
    shown = page.evaluate("() => document.body.innerText")
    leaked = [mark for mark in ("{#", "#}", "{%", "%}", "{{", "}}") if mark in shown]
    if leaked:
        problems.append(f"template syntax shown as text: {leaked}")
    missed = tab_misses(page) if tab else []
    if missed:
        problems.append(f"actions Tab never reaches: {missed}")
    return problems


def item_of(page: Any, run_id: str) -> Any:
    """The card of ``run_id``'s confirmation, opened from its row in the list when it is not
    the one shown (issue 24: a compact list, one card at a time in the detail pane)."""
    card = page.locator(f"article[data-confirmation-run='{run_id}']")
    if card.count() and card.is_visible():
        return card
    row = page.locator(f"[data-q-row-run='{run_id}'] [data-q-open]")
    if not (row.count() and row.is_visible()):
        # Not on this page of the list (100 a page; other tests leave items waiting), or the
        # list is behind another card's own view (a phone): search.
        page.goto(f"/confirmations/?q={run_id}")
        if not row.count():
            return card  # not waiting: an empty locator
    row.click()
    card.wait_for(state="visible")
    return card

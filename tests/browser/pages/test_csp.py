"""issue 21 item 10: the console under its Content-Security-Policy in a real Chromium. Each role
walks every page it can reach (the links it is shown, from its landing page, plus the pages only an
action leads to), the admin the Django admin and /api/docs/ too, with zero policy violations,
console errors or failed requests; and what runs on those pages still works under the policy: the
approve flow and the live trace over its websocket, the runs search (htmx), Swagger UI executing a
request, the admin's scripts. The policy and the page markup: tests/api/access/test_csp.py.

Personas: the demo's ``alice`` (user), ``operator``, ``reviewer``, ``admin`` (also the Django
admin); anonymous for the sign-in pages. Screenshots: var/screenshots/csp-*.png.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.browser.browser_kit import DESKTOP, Console, login, shot, waiting_run
from tests.browser.csp_watch import Watch, settle, watch

pytestmark = pytest.mark.browser

# Not pages: sign-out and the admin's (POST forms), the API but its docs, files, probes.
NOT_PAGES = re.compile(
    r"^/(static/|logout/|admin/logout/|api/(?!docs/$)|healthz|readyz|metrics)"
    r"|/export/$|\.json$"
)
MAX_PAGES = 150  # per role: a bound on the walk, far above what any role has


def route_of(path: str) -> str:
    from django.urls import resolve  # import here: Django is set up once the session starts

    return resolve(urlsplit(path).path).view_name


def policy_problems(path: str, response: Any) -> list[str]:
    """The page's own answer carried the policy (without it nothing here could be violated)."""
    header = response.headers.get("content-security-policy", "")
    wanted = ("default-src 'none'", "object-src 'none'", "frame-ancestors 'none'")
    missing = [d for d in wanted if d not in header]
    return [f"{path}: {response.status}, policy lacks {missing}"] if missing else []


def visit(page: Any, seen: Watch, path: str) -> list[str]:
    """Open ``path``, let its scripts run; the problems of its answer (a page that fails)."""
    response = page.goto(path)
    assert response is not None, path
    settle(page)
    problems = policy_problems(path, response)
    if response.status >= 400:
        problems.append(f"{path}: {response.status}")
    return problems


def links(page: Any, origin: str) -> list[str]:
    hrefs = page.eval_on_selector_all("a[href]:not([download])", "els => els.map(a => a.href)")
    paths = []
    for href in hrefs:
        if not href.startswith(origin + "/"):
            continue
        path = urlsplit(href).path  # filters, pages and anchors of a page are the same page
        if not NOT_PAGES.search(path):
            paths.append(path)
    return paths


def walk(page: Any, seen: Watch, origin: str, seeds: list[str], name: str) -> set[str]:
    """Visit the seeds, then every linked page of a route not visited yet; the routes visited.
    One page per route: a second run's page is the same template (the seeds add the variants
    worth their own visit). Asserts nothing went wrong on any page."""
    routes: set[str] = set()
    queue, queued, problems = list(seeds), set(seeds), []
    visits = 0
    while queue:
        path = queue.pop(0)
        if path not in seeds and route_of(path) in routes:
            continue
        visits += 1
        assert visits <= MAX_PAGES, f"{name}: more than {MAX_PAGES} pages, {sorted(routes)}"
        problems += visit(page, seen, path)
        route = route_of(page.url.removeprefix(origin))
        routes.add(route)
        shot(page, f"csp-{name}-{route.replace(':', '-')}")
        for found in links(page, origin):
            if found not in queued:
                queued.add(found)
                queue.append(found)
    problems += seen.problems()
    assert not problems, f"{name}: {len(problems)} problems:\n" + "\n".join(problems)
    return routes


# The console's pages each role must have reached (route names; ``test_plan_covers_...``
# checks that together they are every page route of the console).
EVERYONE = {"console-runs", "console-run", "run-new", "preferences", "preferences-erase"}
OPERATOR = EVERYONE | {
    "confirmation-queue", "handoff-inbox", "handoff-bundle", "profiles", "profile-edit",
    "mcp-tools", "memory-admin", "memory-entry", "notifications",
}  # fmt: skip
ROLE_PAGES = {
    "alice": EVERYONE | {"preference-change", "preference-revoke"},
    "reviewer": EVERYONE | {"handoff-inbox", "handoff-bundle"},
    "operator": OPERATOR,
    "admin": OPERATOR | {"api-docs", "admin:index", "admin:app_list", "admin:password_change"},
}
ANONYMOUS_PAGES = {"login", "admin:login"}
# Routes that are no page: answers to a form's POST, files, probes, sign-out, the home redirect.
NOT_PAGE_ROUTES = {
    "home", "logout", "profile-archive", "console-run-cancel", "handoff-claim",
    "handoff-resolve", "confirmation-approve", "confirmation-decline", "confirmation-exact",
    "mcp-tool-accept", "preference-propose", "preferences-export", "change-confirm",
    "change-cancel", "memory-revoke", "healthz", "readyz", "metrics", "favicon",
    "admin-login-throttled",  # /admin/login/, visited as admin:login
    # The queue's batch decision (a POST) and the fragments its list fetches (rows announced
    # on /ws/console/, a row's detail): parts of the queue page, under its CSP.
    "confirmation-batch", "confirmation-rows", "confirmation-detail",
    # Answers to a card's forms (edit, respond), a run's "run again" and a subscription's
    # removal: POSTs that redirect or show the page they came from.
    "confirmation-edit", "confirmation-respond", "console-run-again",
    "notification-subscription-remove",
}  # fmt: skip


def admin_changelists() -> set[str]:
    from django.contrib import admin

    return {
        f"admin:{m._meta.app_label}_{m._meta.model_name}_changelist" for m in admin.site._registry
    }


def test_plan_covers_every_console_page_route() -> None:
    """A page route added later must join a role's walk (or say why it is no page)."""
    from django.urls import URLPattern, URLResolver, get_resolver

    def names(patterns: list[Any], prefix: str = "") -> set[str]:
        found: set[str] = set()
        for p in patterns:
            if isinstance(p, URLResolver):
                if str(p.pattern) not in ("admin/", "api/"):
                    found |= names(p.url_patterns, prefix + str(p.pattern))
            elif isinstance(p, URLPattern) and p.name:
                found.add(p.name)
        return found

    console_routes = names(get_resolver().url_patterns) | {"api-docs"}
    planned = set().union(*ROLE_PAGES.values()) | ANONYMOUS_PAGES
    assert console_routes - planned - NOT_PAGE_ROUTES == set()


def _seeds(console: Console, user: str) -> list[str]:
    """The landing page, and the pages no link leads to: runs in each state the user can see
    (each state's page differs), alice's pending preference change, the memory search, the
    admin's own sites."""
    api = console.api(user)
    runs = api.get("/api/runs/?page_size=100")["results"]
    by_state = {r["status"]: r["run_id"] for r in runs}
    seeds = ["/"] + [f"/runs/{run_id}/" for run_id in by_state.values()]
    if user == "alice":
        status, change = api.post(
            "/api/preferences/changes/", {"key": "answer_language", "value": "fr"}
        )
        assert status == 201, change
        seeds.append(f"/preferences/changes/{change['change_id']}/")
    if user in ("operator", "admin"):
        seeds.append("/memory/?subject=alice")
    if user == "admin":
        seeds += ["/admin/", "/api/docs/"]
    return seeds


@pytest.mark.parametrize("user", ["alice", "reviewer", "operator", "admin"])
def test_every_page_of_a_role_loads_with_no_violation(
    new_page: Callable[..., Any], console: Console, user: str
) -> None:
    page = new_page()
    seen = watch(page, console.url)
    login(page, user)
    routes = walk(page, seen, console.url, _seeds(console, user), user)
    assert ROLE_PAGES[user] - routes == set(), sorted(routes)
    if user == "admin":
        assert admin_changelists() - routes == set(), "an admin list the walk never reached"
        assert {"admin:runs_run_change", "admin:auth_user_change", "admin:runs_document_add"} <= (
            routes
        )


def test_sign_in_pages_load_with_no_violation(
    new_page: Callable[..., Any], console: Console
) -> None:
    page = new_page()
    seen = watch(page, console.url)
    problems = visit(page, seen, "/login/") + visit(page, seen, "/admin/login/")
    shot(page, "csp-anonymous-admin-login")
    login(page, "alice")  # the form posts to 'self' and is followed to her landing page
    assert page.url.endswith("/runs/")
    assert not problems + seen.problems()


def test_a_violation_is_seen(browser: Any, console: Console) -> None:
    """The watch itself: an inline script a page did not vouch for is refused and reported (a
    context of its own: the ``new_page`` fixture would fail this test for it)."""
    context = browser.new_context(viewport=DESKTOP, base_url=console.url)
    try:
        page = context.new_page()
        seen = watch(page, console.url)
        page.goto("/login/")
        page.evaluate(
            """() => { const s = document.createElement("script");
                       s.textContent = "window.__ran = true"; document.body.append(s);
                       document.body.setAttribute("style", "color: red"); }"""
        )
        page.wait_for_function("() => true")
        assert page.evaluate("() => window.__ran === undefined")
        assert any("script-src-elem" in v for v in seen.violations), seen.violations
        assert any("style-src-attr" in v for v in seen.violations), seen.violations
    finally:
        context.close()


def test_the_time_bar_counts_down_under_the_policy(
    new_page: Callable[..., Any], console: Console
) -> None:
    """The run page's time bar, redrawn every second by trace.js: its fill is an SVG rect whose
    width attribute moves (a style="width" would be refused). The approve flow and the live trace
    under the policy: tests/browser/queue/test_approve_live.py (every page there is watched)."""
    run = waiting_run(console, "Answer in Chinese from now on (CSP time bar)")
    page = new_page()
    seen = watch(page, console.url)
    login(page, "alice")
    page.goto(f"/runs/{run['run_id']}/")
    fill = "[data-time-budget] rect"
    first = page.locator(fill).get_attribute("width")
    assert re.fullmatch(r"\d+", first or ""), first
    page.wait_for_function(
        "([sel, w]) => document.querySelector(sel).getAttribute('width') !== w", arg=[fill, first]
    )
    assert seen.problems() == []


def test_runs_search_with_htmx_under_the_policy(
    new_page: Callable[..., Any], console: Console
) -> None:
    """Typing in the runs list's search re-filters through htmx (no eval, no injected <style>):
    the results are swapped in and the URL pushed, the page never reloaded."""
    page = new_page()
    seen = watch(page, console.url)
    login(page, "alice")
    page.goto("/runs/")
    page.evaluate("() => { window.__notReloaded = true; }")
    page.get_by_label("Goal contains").fill("quarantine")
    page.wait_for_url(re.compile(r"q=quarantine"))
    settle(page)
    goals = page.locator("[data-run-row]").all_inner_texts()
    assert goals
    assert all("quarantine" in g.lower() for g in goals), goals
    assert page.evaluate("() => window.__notReloaded === true")
    assert page.evaluate("() => document.querySelectorAll('style').length") == 0
    assert seen.problems() == []


def test_api_docs_execute_a_request_under_their_policy(
    new_page: Callable[..., Any], console: Console
) -> None:
    page = new_page()
    seen = watch(page, console.url)
    login(page, "admin")
    page.goto("/api/docs/")
    operation = page.locator(".opblock", has_text="/api/queues/").first
    operation.locator(".opblock-summary").click()
    page.get_by_role("button", name="Try it out").click()
    page.get_by_role("button", name="Execute").click()
    page.wait_for_selector(".live-responses-table .response-col_status:has-text('200')")
    shot(page, "csp-api-docs", full_page=False)
    assert seen.problems() == []


def test_admin_scripts_work_under_the_policy(
    new_page: Callable[..., Any], console: Console
) -> None:
    """The admin's own scripts: the list's select-all (actions.js), the user form's
    two-box group picker (SelectFilter2.js) and its filter box."""
    page = new_page()
    seen = watch(page, console.url)
    login(page, "admin")
    page.goto("/admin/runs/document/")
    page.locator("#action-toggle").check()
    assert re.search(r"\d+ of \d+ selected", page.locator(".action-counter").inner_text())
    page.goto("/admin/auth/user/")
    page.get_by_role("link", name="alice", exact=True).click()
    page.wait_for_selector("#id_groups_from")  # built by SelectFilter2.js
    page.locator("#id_groups_input").press_sequentially("oper")  # filtered on each key
    assert page.locator("#id_groups_from option").all_inner_texts() == ["operator"]
    shot(page, "csp-admin-user-change")
    assert seen.problems() == []

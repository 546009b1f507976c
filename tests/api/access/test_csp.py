"""issue 21 item 10: every answer carries the console's Content-Security-Policy, and the console's
pages need nothing it forbids (no inline script, style or event handler). The same pages in a
real browser, with zero violations: tests/browser/pages/test_csp.py.

Personas (tests/support/personas.py): ``anonymous``, ``root`` (every route), ``alice`` (her run,
her preferences), ``operator`` (the queue, memory, profiles, tools), ``reviewer`` (handoffs).
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from tests.api import api_kit as kit
from tests.api.errors.test_error_sweep import url_samples
from tests.support.handoffs import handoff_run

pytestmark = pytest.mark.django_db

# What every answer's policy must say, exactly (a page may add nonces to script-src).
REQUIRED = {
    "default-src": ["'none'"],
    "script-src": ["'self'"],
    "style-src": ["'self'"],
    "connect-src": ["'self'"],
    "object-src": ["'none'"],
    "base-uri": ["'none'"],
    "frame-ancestors": ["'none'"],
    "form-action": ["'self'"],
}
NONCE = re.compile(r"'nonce-[A-Za-z0-9+/=]{16,}'")


def policy_of(response: Any) -> dict[str, list[str]]:
    header = response.get("Content-Security-Policy", "")
    policy: dict[str, list[str]] = {}
    for part in header.split(";"):
        words = part.split()
        if words:
            policy[words[0]] = words[1:]
    return policy


def policy_problems(where: str, response: Any) -> list[str]:
    policy = policy_of(response)
    if not policy:
        return [f"{where}: {response.status_code} without a Content-Security-Policy"]
    problems = []
    for directive, sources in REQUIRED.items():
        given = policy.get(directive, [])
        if directive == "script-src":
            given = [s for s in given if not NONCE.fullmatch(s)]
        if given != sources:
            problems.append(f"{where}: {directive} is {given}, not {sources}")
    img = set(policy.get("img-src", []))
    if not img <= {"'self'", "data:"}:
        problems.append(f"{where}: img-src {sorted(img)}")
    return problems


@pytest.mark.parametrize("who", ["anonymous", "root"])
def test_every_route_answers_with_the_policy(who: str, people: kit.People) -> None:
    """Every URL pattern of the project (console, admin, API, probes), found or not, allowed or
    not: the header is on the answer whatever it is."""
    client = Client(raise_request_exception=False)
    problems = []
    statuses = set()
    for path in url_samples():
        if who == "root":
            client.force_login(people.root.user)
        response = client.get(path)
        statuses.add(response.status_code)
        problems += policy_problems(f"GET {path}", response)
    assert {200, 302, 404, 405} <= statuses, statuses  # answers of every kind were checked
    assert not problems, f"{len(problems)} problems:\n" + "\n".join(problems[:40])


# Markup a strict policy refuses: a <script> with a body, a <style> element, a style="" or an
# on*="" attribute, a javascript: URL.
INLINE = re.compile(
    r"<script(?![^>]*\ssrc=)[^>]*>|<style[\s>]|\sstyle=|\son[a-z]+=|javascript:", re.IGNORECASE
)


def _pages(people: kit.People) -> dict[str, list[str]]:
    """The console's pages by who opens them, with the objects that fill them."""
    alice, operator = people.alice.user, people.operator.user
    waiting = kit.waiting_run(alice)
    kit.preference_set(alice)
    change = kit.pending_change(alice, value="fr")
    handed = handoff_run(alice)
    profile = kit.profile_define(operator, "csp-profile")
    return {
        "anonymous": ["/login/"],
        "alice": [
            "/runs/", f"/runs/{waiting.run_id}/", "/runs/new/", "/preferences/",
            f"/preferences/changes/{change.pk}/", "/preferences/answer_language/revoke/",
            "/preferences/erase/",
        ],
        "operator": [
            "/confirmations/", f"/runs/{handed.run_id}/", "/memory/?subject=alice",
            "/memory/alice/answer_language/", "/profiles/", f"/profiles/{profile.pk}/", "/tools/",
        ],
        "reviewer": ["/handoffs/", f"/handoffs/{handed.handoff_id}/"],
    }  # fmt: skip


def test_console_pages_need_nothing_the_policy_forbids(people: kit.People) -> None:
    """Each page as its user, filled (a waiting run's budget bars, a pending change, a
    handoff's bundle): 200, the policy, and no inline script, style or handler in the HTML."""
    problems = []
    for who, paths in _pages(people).items():
        client = Client()
        if who != "anonymous":
            client.force_login(getattr(people, who).user)
        for path in paths:
            response = client.get(path)
            assert response.status_code == 200, (who, path, response.status_code)
            problems += policy_problems(f"{who} {path}", response)
            for found in INLINE.finditer(response.content.decode()):
                problems.append(f"{who} {path}: inline {found.group(0)!r}")
    assert not problems, "\n".join(problems)


def test_the_api_docs_run_their_one_inline_script_by_this_response_nonce(
    people: kit.People,
) -> None:
    """Swagger UI's start-up script (it carries the CSRF token) stays in the page, allowed by a
    nonce of this answer only; its stylesheet's data: icons are allowed on this page alone."""
    client = Client()
    client.force_login(people.root.user)
    nonces = []
    for _ in range(2):
        response = client.get("/api/docs/")
        assert response.status_code == 200
        assert not policy_problems("/api/docs/", response)
        policy = policy_of(response)
        (nonce,) = [s for s in policy["script-src"] if NONCE.fullmatch(s)]
        html = response.content.decode()
        inline = re.findall(r"<script(?![^>]*\ssrc=)([^>]*)>", html)
        assert inline == [f' nonce="{nonce[7:-1]}"'], inline
        assert "SwaggerUIBundle(" in html
        assert not re.search(r"<style[\s>]|\sstyle=", html)
        assert "data:" in policy["img-src"]
        nonces.append(nonce)
    assert nonces[0] != nonces[1]  # a nonce per answer, never reused
    # The console's pages allow neither.
    page = client.get("/runs/")
    assert not [s for s in policy_of(page)["script-src"] if NONCE.fullmatch(s)]
    assert "data:" not in policy_of(page)["img-src"]

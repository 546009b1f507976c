"""issue 9 item 9: no input makes any route answer 5xx, and under /api/ every error is the API's
JSON shape {code, message, extra} — with DEBUG off and on, for an anonymous and an authenticated
caller. Every URL pattern of the project (the API, its auth view, the admin, the catch-alls) gets
every bad body: JSON nested 100,000 deep, malformed JSON, a wrong content type, a NUL byte, a body
over DATA_UPLOAD_MAX_MEMORY_SIZE.

The sweep goes on (issue 21 item 9) in test_error_sweep_console.py (every console form, with
hostile values in every field) and tests/mcp/test_mcp_hostile.py (what hostile MCP servers
send: names, descriptions, schemas, answers).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, resolve

from tests.api import api_kit as kit

pytestmark = pytest.mark.django_db

DEEP = 100_000


def _bodies() -> dict[str, tuple[bytes, str]]:
    huge = b'{"goal": "' + b"x" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1) + b'"}'
    return {
        "deep-json": (b"[" * DEEP + b"]" * DEEP, "application/json"),
        "deep-json-object": (b'{"a":' * DEEP + b"1" + b"}" * DEEP, "application/json"),
        "malformed-json": (b'{"goal": "g",', "application/json"),
        "wrong-content-type": (b"<goal>g</goal>", "application/xml"),
        "nul-byte": (b'{"goal": "a\x00b"}', "application/json"),
        "nul-byte-form": (b"username=a%00b&password=x", "application/x-www-form-urlencoded"),
        "huge-body": (huge, "application/json"),
        "huge-form": (b"a=" + b"x" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1),
                      "application/x-www-form-urlencoded"),
    }  # fmt: skip


def _walk(patterns: list[Any], prefix: str = "") -> Iterator[str]:
    for p in patterns:
        if isinstance(p, URLResolver):
            yield from _walk(p.url_patterns, prefix + str(p.pattern))
        elif isinstance(p, URLPattern):
            yield prefix + str(p.pattern)


def _sample(pattern: str) -> str:
    """A concrete path for a route or regex pattern (an id nobody has, the first alternative)."""
    path = re.sub(r"\(\?P<[a-z_]+>([a-z]+)\|[^)]*\)", r"\1", pattern)  # (?P<app>auth|...)
    path = re.sub(r"\(\?P<[a-z_]+>\.\*\)", "nope", path)
    path = re.sub(r"<(?:path|str):[a-z_]+>", "x1", path)
    path = re.sub(r"<(?:int:)?[a-z_]+>", "1", path)
    path = path.replace("^.*$", "nope/").replace("^", "").replace("$", "")
    return "/" + path


def url_samples() -> list[str]:
    samples = sorted({_sample(p) for p in _walk(get_resolver().url_patterns)})
    for sample in samples:
        assert re.fullmatch(r"[a-z0-9_/.-]*", sample), sample  # no regex left in it
        resolve(sample)  # reaches a route (Resolver404 otherwise)
    return samples


def _client(who: str, people: kit.People) -> Client:
    if who == "anonymous":
        # A browser without a session: the admin's forms are refused by the CSRF check.
        return Client(enforce_csrf_checks=True, raise_request_exception=False)
    client = Client(raise_request_exception=False, HTTP_AUTHORIZATION=f"Token {people.root.token}")
    client.force_login(people.root.user)
    return client


def _problem(path: str, response: Any) -> str | None:
    status = response.status_code
    if status >= 500:
        return f"{status}"
    content = response.content
    if b"Traceback" in content or b"SECRET_KEY" in content:
        return f"{status} with a traceback or settings"
    if status < 400:
        return None
    if path.startswith("/api/"):
        try:
            kit.assert_error(response, status, None)
        except AssertionError:
            return f"{status} not the JSON error shape: {kit.describe(response)[:120]}"
    elif status != 404 and len(content) > 4000:
        return f"{status} a {len(content)}-byte page"
    return None


@pytest.mark.parametrize("debug", [False, True], ids=["debug-off", "debug-on"])
@pytest.mark.parametrize("who", ["anonymous", "superuser"])
def test_every_route_answers_bad_bodies_without_a_5xx(
    who: str, debug: bool, people: kit.People, settings: Any
) -> None:
    """issue 9 item 9: /api/auth/token/ answered 100,000-deep JSON with a RecursionError (500;
    with DEBUG=1 a 144 KB page of settings), an unknown /api/ path answered a POST with Django's
    HTML CSRF page."""
    settings.DEBUG = debug
    client = _client(who, people)
    samples = url_samples()
    assert len(samples) > 50, samples  # the walk found the admin and the API
    problems = []
    for path in samples:
        if who != "anonymous":
            client.force_login(people.root.user)  # POST /admin/logout/ ends the session
        for kind, (body, content_type) in _bodies().items():
            response = client.post(path, data=body, content_type=content_type)
            problem = _problem(path, response)
            if problem:
                problems.append(f"POST {path} {kind}: {problem}")
        response = client.get(path + "?q=%00")
        problem = _problem(path, response)
        if problem:
            problems.append(f"GET {path}?q=%00: {problem}")
    assert not problems, f"{len(problems)} problems:\n" + "\n".join(problems[:40])


def test_deep_json_to_the_token_view_is_malformed_request(people: kit.People) -> None:
    """issue 9 item 9, the instance: DRF's token view had its own (unguarded) JSON parser."""
    response = people.anonymous.post_raw(
        "/api/auth/token/", "[" * DEEP + "]" * DEEP, "application/json"
    )
    kit.assert_error(response, 400, kit.MALFORMED_REQUEST)


def test_every_api_view_parses_json_with_the_guarded_parser() -> None:
    """The class: any API view that lists its own parsers must use the guarded JSON parser."""
    from rest_framework.parsers import JSONParser

    from agentconsole import api_urls
    from agentconsole.kernel.http import LimitedJSONParser

    unguarded = []
    for pattern in api_urls.urlpatterns:
        view = getattr(pattern.callback, "view_class", None) or getattr(
            pattern.callback, "cls", None
        )
        for parser in getattr(view, "parser_classes", ()):
            if issubclass(parser, JSONParser) and not issubclass(parser, LimitedJSONParser):
                unguarded.append(f"{pattern.name}: {parser.__name__}")
    assert not unguarded


def test_an_uncaught_exception_under_api_is_internal_error(
    people: kit.People, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """issue 9 item 9: a bug in a view is {code: INTERNAL_ERROR}, logged, never a traceback —
    also with DEBUG=1."""
    from runs import apis as runs_api

    def boom(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a bug; SECRET_KEY must not leak")

    monkeypatch.setattr(runs_api.RunListCreate, "get", boom)
    for debug in (False, True):
        settings.DEBUG = debug
        people.alice.client.raise_request_exception = False
        response = people.alice.get("/api/runs/")
        body = kit.assert_error(response, 500, "INTERNAL_ERROR")
        assert "SECRET_KEY" not in body["message"]


def test_a_database_that_refuses_is_503_with_retry_after(
    people: kit.People, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The soak: PostgreSQL out of client slots answered 500 INTERNAL_ERROR. A database that
    refuses or does not answer (its client limit, a restart, no pooled connection in time) is a
    condition to retry: 503 DATABASE_UNAVAILABLE with Retry-After, in the API and on pages."""
    from django.db import OperationalError

    from runs import apis as runs_api
    from runs.web import console_selectors

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise OperationalError("connection failed: FATAL:  sorry, too many clients already")

    monkeypatch.setattr(runs_api.RunListCreate, "get", refuse)
    people.alice.client.raise_request_exception = False
    response = people.alice.get("/api/runs/")
    kit.assert_error(response, 503, "DATABASE_UNAVAILABLE")
    assert response["Retry-After"] == "1"

    monkeypatch.setattr(console_selectors, "runs_page", refuse)
    client = Client(raise_request_exception=False)
    client.force_login(people.alice.user)
    page = client.get("/runs/")
    assert (page.status_code, page["Retry-After"]) == (503, "1")
    assert b"Traceback" not in page.content


def test_outside_the_api_an_error_is_a_short_page(settings: Any) -> None:
    """With DEBUG=1 Django answered a suspicious request with its debug page (settings, paths)."""
    for debug in (False, True):
        settings.DEBUG = debug
        client = Client(enforce_csrf_checks=True, raise_request_exception=False)
        # The admin login page with a Host Django refuses (a SuspiciousOperation).
        response = client.get("/admin/login/", HTTP_HOST="evil.example")
        assert response.status_code == 400
        assert b"Traceback" not in response.content
        assert len(response.content) < 4000
        response = client.post("/admin/login/", {"username": "x"})  # CSRF refused
        assert response.status_code == 403
        assert len(response.content) < 4000


def test_a_post_to_an_unknown_api_path_is_not_found_json(people: kit.People) -> None:
    """issue 9 item 9: a browser session POSTing to no route got Django's HTML CSRF page."""
    client = Client(enforce_csrf_checks=True)
    client.force_login(people.alice.user)
    response = client.post("/api/no-such-route/", data=b"{}", content_type="application/json")
    kit.assert_error(response, 404, kit.NOT_FOUND)


@pytest.mark.parametrize(
    ("status", "code"),
    [(400, "MALFORMED_REQUEST"), (401, "NOT_AUTHENTICATED"), (405, "METHOD_NOT_ALLOWED"),
     (418, "CLIENT_ERROR"), (429, "THROTTLED"), (502, "INTERNAL_ERROR")],
)  # fmt: skip
def test_a_non_json_error_under_api_becomes_the_json_shape(status: int, code: str) -> None:
    """The middleware's net: whatever rendered a non-JSON error under /api/, the client gets the
    shape, with the status and the headers that say what to do next."""
    from django.http import HttpResponse
    from django.test import RequestFactory

    from agentconsole.errors import ApiErrorMiddleware

    def view(request: Any) -> HttpResponse:
        return HttpResponse("<h1>no</h1>", status=status, headers={"Retry-After": "7"})

    response = ApiErrorMiddleware(view)(RequestFactory().get("/api/anything/"))
    body = kit.assert_error(response, status, code)
    assert body["message"]
    assert response["Retry-After"] == "7"
    page = ApiErrorMiddleware(view)(RequestFactory().get("/admin/"))
    assert page.content == b"<h1>no</h1>"  # outside /api/ the view's own page stays

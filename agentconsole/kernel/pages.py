"""Plumbing shared by the console's pages (server-rendered Django views of every app).

A page refuses in the same words as the API: the stable code and a message, on the console's
error page, with the API's status for the code (``agentconsole.kernel.status.domain_status``). Pages
a role may not open answer 404, as a foreign run does: their existence is not disclosed.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from django.contrib.auth.views import redirect_to_login
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from agentconsole.kernel.status import domain_status
from policy.domain.canonical import canonical
from policy.domain.canonical import pretty_json as pretty_json  # re-exported for views
from policy.domain.errors import DomainError

View = Callable[..., HttpResponse]


def role_required(check: Callable[[Any], bool]) -> Callable[[View], View]:
    """Sign-in required (anonymous: to the login page); a signed-in user failing ``check``: 404."""

    def decorate(view: View) -> View:
        @functools.wraps(view)
        def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if not request.user.is_authenticated:
                return redirect_to_login(request.get_full_path())
            if not check(request.user):
                raise Http404("no such page")
            return view(request, *args, **kwargs)

        return wrapped

    return decorate


def signed_in(user: Any) -> bool:
    return bool(user.is_authenticated)


def page_error(
    request: HttpRequest,
    error: DomainError | str,
    message: str | None = None,
    status: int | None = None,
) -> HttpResponse:
    """The console's error page: the stable code in words, never a traceback."""
    if isinstance(error, DomainError):
        code, text = error.code, message or error.message
        status = status or domain_status(error)
    else:
        code, text = error, message or error.replace("_", " ").capitalize()
        status = status or 400
    return render(
        request, "console/error.html", {"code": code, "message": text, "status": status},
        status=status,
    )  # fmt: skip


def domain_errors(view: View) -> View:
    """A DomainError raised by a service becomes the error page with its code and status."""

    @functools.wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        try:
            return view(request, *args, **kwargs)
        except DomainError as exc:
            return page_error(request, exc)

    return wrapped


def canonical_json(value: Any) -> str:
    """The byte-exact text a hash covers (RFC 8785), for a "show exact bytes" view."""
    return canonical(value)

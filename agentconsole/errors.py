"""Error answers outside a DRF view (issue 9 item 9): Django's handlers, the CSRF failure view,
the debug error page and a middleware for exceptions no view handled.

Under /api/ every error is the API's JSON shape ``{code, message, extra}`` with a stable code;
elsewhere (the admin, the login page) a short plain HTML page. Never a traceback, never settings:
with DEBUG=1 Django renders an exception as a page of settings and paths (144 KB) — here it is
logged server-side and answered briefly.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from html import escape
from typing import Any

from django.core.exceptions import BadRequest, PermissionDenied, SuspiciousOperation
from django.db import OperationalError
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.http.multipartparser import MultiPartParserError
from django.shortcuts import render
from django.utils.safestring import SafeString
from django.views.debug import ExceptionReporter

logger = logging.getLogger("agentconsole.errors")

API_PREFIX = "/api/"

# status -> (code, message) for an error no view described.
_DEFAULTS: dict[int, tuple[str, str]] = {
    400: ("MALFORMED_REQUEST", "Bad request."),
    401: ("NOT_AUTHENTICATED", "Authentication credentials were not provided."),
    403: ("PERMISSION_DENIED", "You do not have permission to perform this action."),
    404: ("NOT_FOUND", "No such resource."),
    405: ("METHOD_NOT_ALLOWED", "Method not allowed."),
    406: ("NOT_ACCEPTABLE", "No acceptable representation."),
    413: ("REQUEST_TOO_LARGE", "Request body too large."),
    415: ("UNSUPPORTED_MEDIA_TYPE", "Unsupported media type."),
    429: ("THROTTLED", "Too many requests."),
    500: ("INTERNAL_ERROR", "Internal server error."),
    503: ("DATABASE_UNAVAILABLE", "The database is not available right now; retry shortly."),
}
_NOT_YOURS = "No such page, or it is not yours to see."
# Headers a replaced response keeps: they tell the client what to do next.
_KEPT_HEADERS = ("Retry-After", "WWW-Authenticate", "Allow")


def is_api(request: HttpRequest) -> bool:
    return request.path_info.startswith(API_PREFIX)


def error_response(
    request: HttpRequest, status: int, code: str | None = None, message: str | None = None
) -> HttpResponse:
    fallback = _DEFAULTS[500] if status >= 500 else ("CLIENT_ERROR", "The request was refused.")
    default_code, default_message = _DEFAULTS.get(status, fallback)
    code, message = code or default_code, message or default_message
    if is_api(request):
        response: HttpResponse = JsonResponse(
            {"code": code, "message": message, "extra": {}}, status=status
        )
    else:
        response = _error_page(request, status, code, message)
    return response


def _error_page(request: HttpRequest, status: int, code: str, message: str) -> HttpResponse:
    """The console's error page (templates/console/error.html): the code and the message in
    words. If rendering fails (a broken template, a database down for the context processor),
    a bare page: an error page must not raise."""
    try:
        return render(
            request, "console/error.html", {"code": code, "message": message, "status": status},
            status=status,
        )  # fmt: skip
    except Exception:  # the last resort must answer
        logger.exception("the error page could not be rendered")
        text = escape(message)
        return HttpResponse(
            f"<!doctype html><title>{status}</title><h1>{status}</h1>"
            f"<p>{text} ({escape(code)})</p>\n",
            status=status,
            content_type="text/html; charset=utf-8",
        )


# --- Django's handlers (urls.py: handler400, handler403, handler404, handler500) ---------------


def bad_request(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    return error_response(request, 400)


def permission_denied(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    return error_response(request, 403)


def page_not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    return error_response(request, 404, message=None if is_api(request) else _NOT_YOURS)


def server_error(request: HttpRequest) -> HttpResponse:
    return error_response(request, 500)


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    """CSRF_FAILURE_VIEW. The code is the one a DRF view gives for the same refusal."""
    if is_api(request):
        return error_response(request, 403, "PERMISSION_DENIED", f"CSRF Failed: {reason}")
    return error_response(
        request, 403, message="CSRF verification failed: reload the page and try again."
    )


class QuietExceptionReporter(ExceptionReporter):
    """DEFAULT_EXCEPTION_REPORTER. With DEBUG=1 Django answers an exception (and a suspicious
    request, as a 400) with this reporter's page; the traceback goes to the log instead."""

    # SafeString like Django's own: a constant page, nothing from the request in it.
    def get_traceback_html(self) -> SafeString:
        return SafeString(
            "<!doctype html><title>Error</title><h1>Error</h1><p>See the server log.</p>\n"
        )

    def get_traceback_text(self) -> SafeString:
        return SafeString("Error: see the server log.\n")


# --- the middleware --------------------------------------------------------------------------

# What Django itself turns into a 4xx (django.core.handlers.exception.response_for_exception).
_CLIENT_ERRORS = (Http404, PermissionDenied, BadRequest, SuspiciousOperation, MultiPartParserError)


class ApiErrorMiddleware:
    """Outermost: under /api/ an uncaught exception is INTERNAL_ERROR (logged, no traceback
    even with DEBUG=1), and any error answer that is not JSON (a page Django rendered for a
    suspicious request, a CSRF refusal of a non-DRF view, a debug page) is replaced by the
    JSON shape with the same status."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if response.status_code < 400 or not is_api(request):
            return response
        if response.get("Content-Type", "").startswith("application/json"):
            return response
        replaced = error_response(request, response.status_code)
        for header in _KEPT_HEADERS:
            if response.has_header(header):
                replaced[header] = response[header]
        return replaced

    def process_exception(self, request: HttpRequest, exception: Exception) -> Any:
        if isinstance(exception, OperationalError):
            # The database refused or did not answer (its client limit, a restart, no pooled
            # connection within DB_POOL_TIMEOUT_S): a condition to retry, not a bug. Rolled
            # back like any failed request; the first line names the cause, never a secret.
            first = str(exception).splitlines()[0][:200] if str(exception) else ""
            logger.warning("database unavailable on %s %s: %s", request.method, request.path, first)
            response = error_response(request, 503)
            response["Retry-After"] = "1"
            return response
        if not is_api(request):
            # A console page that refuses (a foreign run, a page of another role) answers with
            # the console's page also with DEBUG=1, where Django would show its URL listing.
            if isinstance(exception, Http404):
                return error_response(request, 404, "NOT_FOUND", _NOT_YOURS)
            if isinstance(exception, PermissionDenied):
                return error_response(request, 403)
            return None  # handler400, or handler500 and its log
        if isinstance(exception, _CLIENT_ERRORS):
            return None  # Django's own handling: handler404/403/400
        logger.error(
            "unhandled exception on %s %s", request.method, request.path, exc_info=exception
        )
        return error_response(request, 500)

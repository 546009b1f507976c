"""Requests no database can answer are refused before any view (PostgreSQL text cannot hold a
NUL character): a NUL in the path names nothing that can exist (404), a NUL in the query string
is a malformed request (400). Both in the API's error shape."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, JsonResponse


def _error(code: str, message: str, status: int) -> JsonResponse:
    return JsonResponse({"code": code, "message": message, "extra": {}}, status=status)


class RejectNulMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if "\x00" in request.path:
            return _error("NOT_FOUND", "no such resource", 404)
        query = request.META.get("QUERY_STRING", "").lower()
        if "%00" in query or "\x00" in query:
            return _error("MALFORMED_REQUEST", "NUL characters are not accepted", 400)
        return self.get_response(request)

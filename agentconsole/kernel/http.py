"""HTTP API plumbing shared by every app: the one exception handler.

Every error leaves the API as ``{"code", "message", "extra"}``. Codes are stable and shared with the
console, the websocket and scenario output; ``message`` is for humans and may change.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig
from django.http import Http404
from rest_framework import exceptions, parsers, serializers
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler
from rest_framework.views import set_rollback

from agentconsole.kernel.status import domain_status
from policy.domain import strict_json
from policy.domain.errors import DomainError
from policy.domain.strict_json import JsonRefused

# DRF exceptions whose code is not simply their ``default_code`` upper-cased.
_DRF_CODES: dict[type[exceptions.APIException], str] = {
    exceptions.ValidationError: "VALIDATION_ERROR",
    exceptions.ParseError: "MALFORMED_REQUEST",
    exceptions.NotAuthenticated: "NOT_AUTHENTICATED",
    exceptions.PermissionDenied: "PERMISSION_DENIED",
    exceptions.NotFound: "NOT_FOUND",
    exceptions.UnsupportedMediaType: "UNSUPPORTED_MEDIA_TYPE",
    exceptions.MethodNotAllowed: "METHOD_NOT_ALLOWED",
}


def error_body(code: str, message: str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"code": code, "message": message, "extra": extra or {}}


def _drf_code(exc: exceptions.APIException) -> str:
    for cls in type(exc).__mro__:
        if cls in _DRF_CODES:
            return _DRF_CODES[cls]
    return str(exc.default_code).upper()


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """Render DRF, Django and domain errors in one shape; return None for anything else (a 500)."""
    if isinstance(exc, RequestDataTooBig):
        # DRF reads request.body before any parser runs; Django refuses it there.
        exc = RequestTooLarge()
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()

    if isinstance(exc, exceptions.APIException):
        # DRF's handler sets WWW-Authenticate / Retry-After headers and rolls back the atomic
        # request; keep that, replace only the body.
        response = drf_exception_handler(exc, context)
        if response is None:  # pragma: no cover - DRF handles every APIException
            return None
        if isinstance(exc, exceptions.ValidationError):
            detail = exc.detail
            fields = {"fields": detail} if isinstance(detail, dict) else {"errors": detail}
            response.data = error_body("VALIDATION_ERROR", "Invalid input.", fields)
            return response
        extra: dict[str, Any] = {}
        if isinstance(exc, exceptions.Throttled):
            # DRF sets Throttled.wait in __init__; the stubs do not declare it.
            extra = {"wait": exc.wait}  # type: ignore[attr-defined]
        elif isinstance(exc, JsonNotAccepted):
            extra = exc.extra
        response.data = error_body(_drf_code(exc), str(exc.detail), extra)
        return response

    if isinstance(exc, DomainError):
        set_rollback()
        return Response(error_body(exc.code, exc.message, exc.extra), status=domain_status(exc))
    return None


class RequestTooLarge(exceptions.APIException):
    status_code = 413
    default_detail = "Request body too large."
    default_code = "request_too_large"


class JsonNotAccepted(exceptions.ParseError):
    """A JSON body ``policy.domain.strict_json`` refuses: MALFORMED_REQUEST, with the reason
    (``DUPLICATE_JSON_KEY``, ``NON_FINITE_NUMBER``, ``NUL_CHARACTER``...) in ``extra``."""

    def __init__(self, refused: JsonRefused) -> None:
        super().__init__(f"JSON not accepted: {refused.message}")
        self.extra = {"reason": refused.code, **refused.extra}


class LimitedJSONParser(parsers.JSONParser):
    """JSON bodies up to DATA_UPLOAD_MAX_MEMORY_SIZE (larger ones are a 413, read no further),
    read by ``strict_json.loads``: a repeated key, NaN, a NUL or a lone surrogate is refused."""

    def parse(self, stream: Any, media_type: Any = None, parser_context: Any = None) -> Any:
        request = (parser_context or {}).get("request")
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        length = request.META.get("CONTENT_LENGTH") if request is not None else None
        try:
            too_big = length is not None and int(length) > limit
        except ValueError:
            too_big = False
        if too_big:
            raise RequestTooLarge()
        try:
            return strict_json.loads(stream.read())
        except JsonRefused as exc:
            raise JsonNotAccepted(exc) from None


_JSON_TYPES: list[tuple[type, Any, str]] = [
    (serializers.BooleanField, lambda v: isinstance(v, bool), "a boolean"),
    (serializers.IntegerField, lambda v: isinstance(v, int) and not isinstance(v, bool),
     "an integer"),
    (serializers.CharField, lambda v: isinstance(v, str), "a string"),
    (serializers.ChoiceField, lambda v: isinstance(v, str), "a string"),
    (serializers.DictField, lambda v: isinstance(v, dict), "an object"),
    (serializers.ListField, lambda v: isinstance(v, list), "an array"),
]  # fmt: skip


class StrictSerializer(serializers.Serializer):
    """Input serializers reject fields they do not declare (DRF ignores them by default) and
    values of the wrong JSON type (DRF would turn "3" into 3 and 1 into True)."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError(
                    {name: ["Unknown field."] for name in unknown}, code="unknown_field"
                )
            wrong = {}
            for name, value in data.items():
                field = self.fields[name]
                if value is None:
                    continue
                for cls, ok, what in _JSON_TYPES:
                    if isinstance(field, cls) and not ok(value):
                        wrong[name] = [f"Must be {what}."]
                        break
            if wrong:
                raise serializers.ValidationError(wrong, code="invalid_type")
        return super().to_internal_value(data)


def validated(serializer: type[serializers.Serializer], data: Any) -> dict[str, Any]:
    """Validate input with ``serializer``; a failure leaves as VALIDATION_ERROR."""
    s = serializer(data=data)
    s.is_valid(raise_exception=True)
    return s.validated_data

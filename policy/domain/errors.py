"""One error vocabulary for the domain core.

Every error that crosses a boundary carries a stable ``code``; adapters (API, websocket, console,
scenario output) render the code, never a traceback.
"""

from __future__ import annotations

from typing import Any


class DomainError(Exception):
    """Base class: a stable ``code``, a human message and structured ``extra``."""

    code = "DOMAIN_ERROR"

    def __init__(self, message: str = "", *, code: str | None = None, **extra: Any) -> None:
        super().__init__(message or self.code)
        if code is not None:
            self.code = code
        self.message = message or self.code
        self.extra = extra


class CanonicalError(DomainError):
    code = "NON_CANONICAL_VALUE"


class ParseError(DomainError):
    code = "PARSE_ERROR"


class RegistryError(DomainError):
    code = "TOOL_REGISTRY_ERROR"


class NotFound(DomainError):
    code = "NOT_FOUND"

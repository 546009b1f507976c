"""What a tool call came to (seed §3.1): its outcome and the verification of its result."""

from __future__ import annotations

import enum
from typing import Any

from pydantic import BaseModel, ConfigDict


class OutcomeStatus(enum.StrEnum):
    SUCCEEDED = "succeeded"
    REJECTED = "rejected"
    FAILED = "failed"
    UNKNOWN = "unknown"


class ToolOutcome(BaseModel):
    """succeeded | rejected | failed(retryable) | unknown (seed §3.1)."""

    model_config = ConfigDict(frozen=True)

    status: OutcomeStatus
    value: dict[str, Any] | None = None
    code: str | None = None
    message: str = ""
    retryable: bool = False

    @classmethod
    def succeeded(cls, value: dict[str, Any]) -> ToolOutcome:
        return cls(status=OutcomeStatus.SUCCEEDED, value=value)

    @classmethod
    def rejected(cls, code: str, message: str = "") -> ToolOutcome:
        return cls(status=OutcomeStatus.REJECTED, code=code, message=message)

    @classmethod
    def failed(cls, code: str, message: str = "", *, retryable: bool) -> ToolOutcome:
        return cls(status=OutcomeStatus.FAILED, code=code, message=message, retryable=retryable)

    @classmethod
    def unknown(cls, code: str, message: str = "") -> ToolOutcome:
        return cls(status=OutcomeStatus.UNKNOWN, code=code, message=message)


class Verification(BaseModel):
    model_config = ConfigDict(frozen=True)

    ok: bool
    code: str | None = None
    details: dict[str, Any] = {}

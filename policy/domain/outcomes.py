"""What a tool call came to (seed §3.1): its outcome and the verification of its result."""

from __future__ import annotations

import enum
from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator

from policy.domain.observations import TrustLabel


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
    # A tool that returns system data beside retrieved text labels each top-level key of
    # ``value`` (issue 12): ``{"rows": "trusted-tool", "comment": "untrusted-content"}``. A key
    # left out has the contract's ``output_trust``, which is also the ceiling: ``settle`` never
    # lets a label claim more trust than that.
    part_trust: dict[str, TrustLabel] = {}

    @model_validator(mode="after")
    def _labels_name_parts(self) -> ToolOutcome:
        if self.part_trust and not (
            isinstance(self.value, dict) and set(self.part_trust) <= set(self.value)
        ):
            raise ValueError("part_trust labels only top-level keys of the value")
        return self

    @classmethod
    def succeeded(
        cls, value: dict[str, Any], *, part_trust: dict[str, TrustLabel] | None = None
    ) -> ToolOutcome:
        return cls(status=OutcomeStatus.SUCCEEDED, value=value, part_trust=part_trust or {})

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

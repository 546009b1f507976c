"""What a run learnt and how far it may be trusted (SPEC §3)."""

from __future__ import annotations

import enum
from typing import Any

from pydantic import BaseModel, ConfigDict


class TrustLabel(enum.StrEnum):
    TRUSTED_TOOL = "trusted-tool"
    UNTRUSTED_CONTENT = "untrusted-content"
    POLICY = "policy"
    USER = "user"


class ObservationKind(enum.StrEnum):
    USER_REQUEST = "user-request"
    TOOL_RESULT = "tool-result"
    POLICY_REJECTION = "policy-rejection"
    HUMAN_DECISION = "human-decision"


class Observation(BaseModel):
    """Something the run learnt. Ids are deterministic: user-1, tool-<step>, policy-<step>."""

    model_config = ConfigDict(frozen=True)

    observation_id: str
    kind: ObservationKind
    trust: TrustLabel
    step: int
    content: dict[str, Any]
    content_hash: str
    # Only a verified tool result may back a final answer's citation.
    citable: bool = False

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


# How far a label may be trusted, low to high. A tool's own labels stop at its contract's
# ``output_trust`` (the ceiling): a tool may call part of its output *less* trusted, never more,
# and never "policy" or "user" (only the program and a person speak as those).
_RANK = {
    TrustLabel.UNTRUSTED_CONTENT: 0,
    TrustLabel.TRUSTED_TOOL: 1,
    TrustLabel.POLICY: 2,
    TrustLabel.USER: 3,
}


def at_most(label: TrustLabel, ceiling: TrustLabel) -> TrustLabel:
    """``label``, or ``ceiling`` when the label claims more trust than the ceiling allows."""
    return label if _RANK[label] <= _RANK[ceiling] else ceiling


def least_trusted(labels: list[TrustLabel]) -> TrustLabel:
    return min(labels, key=_RANK.__getitem__)


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

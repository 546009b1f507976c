"""Final-answer validator: a final must cite existing, verified tool-result observations."""

from __future__ import annotations

from collections.abc import Collection

from policy.domain.proposals import FinalProposal
from runs.domain.machine import StopReason


def final_violation(final: FinalProposal, citable_ids: Collection[str]) -> StopReason | None:
    """Return ``FINAL_CITATION_VALIDATION_FAILED`` unless every citation is citable."""
    cited = final.citation_observation_ids
    if not cited or any(obs_id not in citable_ids for obs_id in cited):
        return StopReason.FINAL_CITATION_VALIDATION_FAILED
    return None

"""What a new run is bound to: the grants its caller gives it and a scenario's confirmations,
each scoped by the run's id (``runs.services.run_create``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from policy.domain.canonical import proposal_hash
from policy.domain.confirmation.confirmations import Confirmation, ConfirmationStatus
from policy.domain.errors import DomainError
from policy.domain.grants import CapabilityGrant
from policy.domain.secrets.redaction import shown_proposal
from runs.domain.ids import INPUT_ID_PATTERN, caller_confirmation_id, is_input_id


class ConfirmationIdInvalid(DomainError):
    code = "CONFIRMATION_ID_INVALID"
    http_status = 400


def bound_grants(run_id: str, grants: Sequence[dict[str, Any]]) -> list[CapabilityGrant]:
    return [
        CapabilityGrant(grant_id=f"{run_id}:g{i + 1}", run_id=run_id, **g)
        for i, g in enumerate(grants)
    ]


def bind_confirmations(
    run_id: str, confirmations: Sequence[dict[str, Any]]
) -> tuple[list[Confirmation], dict[str, Any]]:
    """Scenario confirmations, each bound to the hash of the proposal it names."""
    bound: list[Confirmation] = []
    proposals: dict[str, Any] = {}
    for c in confirmations:
        p = c["proposal"]
        # Ids from a file are names within the run; the stored id is scoped by the run id and
        # can never equal one the runtime mints (runs.domain.ids).
        cid = _caller_id(run_id, c["confirmation_id"])
        bound.append(
            Confirmation(
                confirmation_id=cid,
                run_id=run_id,
                proposal_hash=proposal_hash(p["tool_name"], p["tool_version"], p["arguments"]),
                status=ConfirmationStatus.APPROVED
                if c["approved"]
                else ConfirmationStatus.DECLINED,
                expires_at_step=c["expires_at_step"],
                tool_name=p["tool_name"],
            )
        )
        proposals[cid] = shown_proposal(p)
    return bound, proposals


def _caller_id(run_id: str, name: Any) -> str:
    # Checked here, not only by the scenario schema: a caller of the Python API could pass
    # any string, and one holding the minted mark could name a confirmation the runtime asks for.
    if not isinstance(name, str) or len(name) > 64 or not is_input_id(name):
        raise ConfirmationIdInvalid(f"a confirmation id must match {INPUT_ID_PATTERN}")
    return caller_confirmation_id(run_id, name)

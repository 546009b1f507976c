"""Reads of grants and confirmations, as domain values or as rows for exports and pages."""

from __future__ import annotations

from typing import Any

from policy.domain.confirmations import Confirmation, ConfirmationStatus
from policy.domain.errors import NotFound
from policy.domain.grants import CapabilityGrant
from policy.models import Confirmation as ConfirmationRow
from policy.models import Grant


def run_grants(*, run_id: str) -> list[CapabilityGrant]:
    return [
        CapabilityGrant(
            grant_id=g.id,
            capability=g.capability,
            run_id=g.run_id,
            resource_scope=g.resource_scope,
            expires_at_step=g.expires_at_step,
            max_calls=g.max_calls,
            calls_used=g.calls_used,
            constraints=g.constraints,
        )
        for g in Grant.objects.filter(run_id=run_id)
    ]


def run_confirmations(*, run_id: str) -> list[Confirmation]:
    # Used and expired ones authorize nothing; they are read so the trace can say why a
    # proposal still needs a person (CONFIRMATION_ALREADY_USED). At most one per step.
    rows = ConfirmationRow.objects.filter(run_id=run_id).order_by()
    return [
        Confirmation(
            confirmation_id=c.id,
            run_id=c.run_id,
            proposal_hash=c.proposal_hash,
            status=ConfirmationStatus(c.status),
            expires_at_step=c.expires_at_step,
            tool_name=c.tool_name or None,
            hash_scheme=c.hash_scheme,
        )
        for c in rows
    ]


def confirmation_get(*, confirmation_id: str | None) -> ConfirmationRow:
    row = ConfirmationRow.objects.filter(pk=confirmation_id).first() if confirmation_id else None
    if row is None:
        raise NotFound("no such confirmation", confirmation_id=confirmation_id)
    return row


def grants_export(*, run_id: str) -> list[dict[str, Any]]:
    # dict(...) per row: django-stubs types values() rows as a TypedDict, not dict[str, Any].
    return [
        dict(row)
        for row in Grant.objects.filter(run_id=run_id)
        .order_by("id")
        .values(
            "id",
            "capability",
            "resource_scope",
            "expires_at_step",
            "max_calls",
            "calls_used",
            "constraints",
        )
    ]


def confirmations_export(*, run_id: str) -> list[dict[str, Any]]:
    return [
        dict(row)
        for row in ConfirmationRow.objects.filter(run_id=run_id)
        .order_by("requested_at", "id")
        .values(
            "id",
            "proposal_hash",
            "tool_name",
            "tool_version",
            "status",
            "expires_at_step",
            "cites_untrusted",
            "origin",
        )
    ]


def pending_confirmations_count() -> int:
    return ConfirmationRow.objects.filter(status="pending").count()

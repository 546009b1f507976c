"""Reads of confirmations that other apps make, as plain values (issue 25 item 4: policy owns the
confirmation's record; runs' batch decision and the project's metrics ask here instead of
importing ``policy.models``). The queue's and the run store's reads are ``policy.selectors``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Count, Min

from policy.domain.confirmation.confirmations import ConfirmationStatus
from policy.models import Confirmation


@dataclass(frozen=True)
class ConfirmationFacts:
    """What a batch decision checks of a confirmation before it decides it."""

    confirmation_id: str
    run_id: str
    tool_name: str
    tool_version: str
    hash_scheme: str


def confirmations_facts(*, confirmation_ids: Sequence[str]) -> list[ConfirmationFacts]:
    """The listed confirmations that exist (one query; an unknown id is left out)."""
    rows = Confirmation.objects.filter(pk__in=list(confirmation_ids)).values_list(
        "pk", "run_id", "tool_name", "tool_version", "hash_scheme"
    )
    return [ConfirmationFacts(*row) for row in rows]


@dataclass(frozen=True)
class PendingSummary:
    count: int
    oldest_requested_at: datetime | None  # None when none is pending


def pending_confirmations_summary() -> PendingSummary:
    """How many confirmations wait for a person, and since when the oldest (one query)."""
    pending = Confirmation.objects.filter(status=ConfirmationStatus.PENDING.value).aggregate(
        n=Count("id"), oldest=Min("requested_at")
    )
    return PendingSummary(pending["n"], pending["oldest"])

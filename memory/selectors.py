"""Reads of long-term memory: filtered by subject scope; revoked and expired records excluded."""

from __future__ import annotations

from typing import Any

from django.db.models import Q
from django.utils import timezone

from memory.models import PreferenceRecord
from memory.policies import memory_policies


def preferences_active(*, subject: str) -> list[PreferenceRecord]:
    now = timezone.now()
    return list(
        PreferenceRecord.objects.filter(subject=subject, revoked_at__isnull=True).filter(
            Q(expires_at__isnull=True) | Q(expires_at__gt=now)
        )
    )


def preferences_for_planner(*, subject: str, purpose: str = "planner") -> dict[str, Any]:
    """Structured data, never instructions (seed §9.3): only keys configured for ``purpose``,
    of this subject, neither revoked nor expired."""
    policies = memory_policies()
    return {
        "preferences": {
            r.key: {"value": r.value, "source": r.source_kind, "version": r.version}
            for r in preferences_active(subject=subject)
            if r.key in policies and purpose in policies[r.key].purposes
        }
    }

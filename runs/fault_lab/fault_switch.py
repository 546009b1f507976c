"""The fault layer's switch (``settings.AGENTCONSOLE_FAULTS_ENABLED``), apart from the layer.

Run creation checks the switch without importing the fault layer itself (runs.fault_lab.faults),
which cancels runs through the run services: the switch sits below both.
"""

from __future__ import annotations

from django.conf import settings

from policy.domain.errors import DomainError


class FaultsDisabled(DomainError):
    code = "FAULTS_DISABLED"
    http_status = 400


def faults_enabled() -> bool:
    return getattr(settings, "AGENTCONSOLE_FAULTS_ENABLED", False) is True


def require_faults_enabled() -> None:
    """Refuse a fault plan where fault injection is off: it would silently do nothing."""
    if not faults_enabled():
        raise FaultsDisabled(
            "this deployment does not inject faults (AGENTCONSOLE_FAULTS_ENABLED is off)"
        )

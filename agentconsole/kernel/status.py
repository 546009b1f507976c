"""The HTTP status of a domain error, by its stable code: the one table the API and the console
pages share (no DRF import here, so a page module can use it without loading DRF's settings)."""

from __future__ import annotations

from policy.domain.errors import DomainError

# The HTTP status of a domain error, by its stable code. The domain core names what went wrong; only
# this edge knows about HTTP. A code not listed is a 400.
_DOMAIN_STATUS: dict[str, int] = {
    "NOT_FOUND": 404,
    "ILLEGAL_TRANSITION": 409,
    "VERSION_CONFLICT": 409,
    "LEASE_LOST": 409,
    "CONFIRMATION_HASH_MISMATCH": 409,  # the change shown is not the change confirmed
    "PERMISSION_DENIED": 403,
    "RUN_ALREADY_FINISHED": 409,
}


def domain_status(exc: DomainError) -> int:
    # issue 10: errors of the Django side (limits, handoffs, confirmations, memory) still declare
    # their own `http_status`, per class rather than per code (RUN_BUSY is a 409 from a handoff
    # and a 400 from a cancel); they move into the table when their apps are restructured.
    declared = getattr(exc, "http_status", None)
    if isinstance(declared, int):
        return declared
    return _DOMAIN_STATUS.get(exc.code, 400)

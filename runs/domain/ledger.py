"""The tool-call ledger's vocabulary (STYLE habit 5: intent before effect, outcome after)."""

from __future__ import annotations

import enum


class LedgerStatus(enum.StrEnum):
    """A ledger row's status; stored as the string value (a database constraint lists them)."""

    STARTED = "started"  # intent committed, outcome not yet
    SUCCEEDED = "succeeded"
    REJECTED = "rejected"
    FAILED = "failed"
    UNKNOWN = "unknown"  # the effect may or may not have happened: a person must look
    RECONCILED = "reconciled"  # a recovery found the effect and settled it
    COMPENSATION_REQUIRED = "compensation-required"  # done, but its post-condition failed

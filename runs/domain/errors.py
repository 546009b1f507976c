"""Errors of a run's life: a transition the machine forbids, a lost compare-and-set, a lost lease,
a broken unique key. Each carries a stable ``code`` (see ``policy.domain.errors``)."""

from __future__ import annotations

from policy.domain.errors import DomainError


class IllegalTransition(DomainError):
    code = "ILLEGAL_TRANSITION"


class VersionConflict(DomainError):
    code = "VERSION_CONFLICT"


class LeaseLost(DomainError):
    """This worker no longer holds the run's lease: another one advances it now."""

    code = "LEASE_LOST"


class IntegrityViolation(DomainError):
    """A write broke a unique key although the compare-and-set on the run version held.

    Not a lost race: every writer of a run first wins the compare-and-set, so two writers of one
    run never both reach the inserts. A clash after it is a bug in how a key was named, and it
    would happen again on every retry: callers report it, never retry it (issue 9 item 4).
    """

    code = "STORE_INTEGRITY_VIOLATION"

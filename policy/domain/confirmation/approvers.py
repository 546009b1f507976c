"""Who may decide a confirmation (issue 12 item 3): one pure rule shared by the API, the console
page and the queue selector.

A confirmation carries an *approver rule*, chosen when the gate holds a proposal:

``owner_or_operator`` (the default, the behaviour before rules existed)
    the run's own person (its owner, or the subject it was started for) or any operator.
``owner``
    only the run's own person: the seed's "user confirms their own preference".
``operator``
    only an *independent* operator: one who is neither the run's owner nor its subject.
``four_eyes``
    two distinct people, each allowed under ``owner_or_operator``, at least one of them an
    independent operator (so an owner who is also an operator cannot approve their own
    irreversible write alone, nor with a second person who is just as involved). A decline by
    any one person allowed under ``owner_or_operator`` declines at once (including a person who
    approved before: declining is always the safe direction).

The facts are about the person *now* (``Person``) and about the approvals already recorded
(``PriorApproval``, whose ``independent`` was fixed when each was given). No Django here.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from policy.domain.errors import DomainError


class ApproverRule(enum.StrEnum):
    OWNER_OR_OPERATOR = "owner_or_operator"
    OWNER = "owner"
    OPERATOR = "operator"
    FOUR_EYES = "four_eyes"


DEFAULT_RULE = ApproverRule.OWNER_OR_OPERATOR


class ApproverNotAllowed(DomainError):
    code = "APPROVER_NOT_ALLOWED"
    http_status = 403


class AlreadyApprovedByYou(DomainError):
    code = "ALREADY_APPROVED_BY_YOU"
    http_status = 409


def approver_rule(value: str) -> ApproverRule:
    """The rule named ``value``; a clear error naming the accepted names otherwise."""
    try:
        return ApproverRule(value)
    except ValueError:
        names = ", ".join(r.value for r in ApproverRule)
        raise DomainError(
            f"unknown approver rule {value!r} (one of: {names})", code="APPROVER_RULE_INVALID"
        ) from None


@dataclass(frozen=True)
class Person:
    """Who asks to decide, and how they stand to the run."""

    user_id: int | str
    is_operator: bool
    is_run_owner: bool
    is_run_subject: bool

    @property
    def own(self) -> bool:
        """The run is theirs: they started it, or it was started for them."""
        return self.is_run_owner or self.is_run_subject

    @property
    def independent(self) -> bool:
        """An operator with no stake in the run: the second pair of eyes."""
        return self.is_operator and not self.own


@dataclass(frozen=True)
class PriorApproval:
    user_id: int | str
    name: str
    independent: bool


@dataclass(frozen=True)
class Verdict:
    """``allowed`` or (``code``, ``message``); for an approval, whether it ``completes`` the
    confirmation (the last approval needed) or only records one of several."""

    allowed: bool
    code: str | None = None
    message: str = ""
    completes: bool = True

    def raise_if_refused(self) -> None:
        if self.code == AlreadyApprovedByYou.code:
            raise AlreadyApprovedByYou(self.message)
        if not self.allowed:
            raise ApproverNotAllowed(self.message)


def approvals_needed(rule: ApproverRule) -> int:
    return 2 if rule is ApproverRule.FOUR_EYES else 1


_WHO = {
    ApproverRule.OWNER_OR_OPERATOR: "the run's owner or an operator",
    ApproverRule.OWNER: "the run's owner (or the person it was started for)",
    ApproverRule.OPERATOR: "an operator who is not the run's owner",
    ApproverRule.FOUR_EYES: (
        "two different people (the run's owner or operators), "
        "at least one an operator who is not the run's owner"
    ),
}


def who_decides(rule: ApproverRule) -> str:
    """The rule in words, for the queue, the API and error messages."""
    return _WHO[rule]


def _eligible(rule: ApproverRule, person: Person) -> bool:
    if rule is ApproverRule.OWNER:
        return person.own
    if rule is ApproverRule.OPERATOR:
        return person.independent
    return person.own or person.is_operator  # owner_or_operator, and each of four_eyes


def rules_allowing(*, is_operator: bool, own: bool) -> frozenset[ApproverRule]:
    """The rules under which a person (an operator or not; the run theirs or not) may decide at
    all: what the queue filters on in SQL, derived from the same rule as every decision."""
    person = Person(user_id="", is_operator=is_operator, is_run_owner=own, is_run_subject=False)
    return frozenset(r for r in ApproverRule if _eligible(r, person))


def may_decline(rule: ApproverRule, person: Person) -> Verdict:
    if _eligible(rule, person):
        return Verdict(allowed=True)
    return Verdict(
        allowed=False,
        code=ApproverNotAllowed.code,
        message=f"Only {who_decides(rule)} may decide this confirmation.",
    )


def may_approve(
    rule: ApproverRule, person: Person, approvals: Sequence[PriorApproval] = ()
) -> Verdict:
    """May ``person`` approve now, given the ``approvals`` already recorded? And would theirs
    be the last one needed?"""
    refused = may_decline(rule, person)
    if not refused.allowed:
        return refused
    if any(a.user_id == person.user_id for a in approvals):
        return Verdict(
            allowed=False,
            code=AlreadyApprovedByYou.code,
            message="You already approved this; it waits for a second, different approver.",
        )
    count = len(approvals) + 1
    needed = approvals_needed(rule)
    independent = person.independent or any(a.independent for a in approvals)
    if rule is ApproverRule.FOUR_EYES and count >= needed and not independent:
        # Two people, neither independent (the owner and the subject, or an owner who is an
        # operator): four eyes that all belong to the run are not a second opinion.
        return Verdict(
            allowed=False,
            code=ApproverNotAllowed.code,
            message="The second approver must be an operator who is not the run's owner.",
        )
    return Verdict(allowed=True, completes=count >= needed)


def progress(rule: ApproverRule, approved_by: Sequence[str]) -> str:
    """ "needs two approvers: 1 of 2, approved by alice" (the queue and the API say this)."""
    needed = approvals_needed(rule)
    if needed == 1:
        return f"needs one approver: {who_decides(rule)}"
    text = f"needs two approvers: {len(approved_by)} of {needed}"
    return text + (f", approved by {', '.join(approved_by)}" if approved_by else "")

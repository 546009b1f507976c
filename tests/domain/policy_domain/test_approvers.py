"""Who may decide a confirmation (policy.domain.confirmation.approvers), as tables: each rule
against each kind of person, four eyes with every earlier approval, and the rule's path from the
contract through the gate into the confirmation request. No database."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from policy.domain.confirmation.approvers import (
    AlreadyApprovedByYou,
    ApproverNotAllowed,
    ApproverRule,
    Person,
    PriorApproval,
    approver_rule,
    may_approve,
    may_decline,
    progress,
    rules_allowing,
)
from policy.domain.decisions import NeedsConfirmation
from policy.domain.errors import DomainError, RegistryError
from policy.domain.gate import evaluate
from policy.domain.proposals import parse_planner_output
from policy.domain.registry import ToolRegistry
from runs.domain.console.timeline import describe
from runs.domain.machine import Status
from runs.domain.step.commits import Commit
from tests.domain.toolkit import DEADLINE_MS, NOW_MS, Toolkit, grant, harness, run_view, tool

OWNER_OR_OPERATOR, OWNER, OPERATOR, FOUR_EYES = (
    ApproverRule.OWNER_OR_OPERATOR,
    ApproverRule.OWNER,
    ApproverRule.OPERATOR,
    ApproverRule.FOUR_EYES,
)

# The kinds of person, as they stand to one run:
PEOPLE = {
    "owner": Person(1, is_operator=False, is_run_owner=True, is_run_subject=False),
    "subject": Person(2, is_operator=False, is_run_owner=False, is_run_subject=True),
    # An operator who started the run (for themselves or for someone else): not independent.
    "owner-operator": Person(3, is_operator=True, is_run_owner=True, is_run_subject=False),
    "subject-operator": Person(4, is_operator=True, is_run_owner=False, is_run_subject=True),
    "operator": Person(5, is_operator=True, is_run_owner=False, is_run_subject=False),
    "operator2": Person(6, is_operator=True, is_run_owner=False, is_run_subject=False),
    # A reviewer, another user: neither an operator nor the run's own person.
    "outsider": Person(7, is_operator=False, is_run_owner=False, is_run_subject=False),
}

# rule -> the people who may decide (approve alone, or approve first, or decline).
ALLOWED = {
    OWNER_OR_OPERATOR: {
        "owner", "subject", "owner-operator", "subject-operator", "operator", "operator2"
    },
    OWNER: {"owner", "subject", "owner-operator", "subject-operator"},
    OPERATOR: {"operator", "operator2"},
    FOUR_EYES: {
        "owner", "subject", "owner-operator", "subject-operator", "operator", "operator2"
    },
}  # fmt: skip


def prior(name: str) -> PriorApproval:
    person = PEOPLE[name]
    return PriorApproval(user_id=person.user_id, name=name, independent=person.independent)


@pytest.mark.parametrize("rule", list(ApproverRule))
@pytest.mark.parametrize("who", list(PEOPLE))
def test_who_may_decide_alone_or_first(rule: ApproverRule, who: str) -> None:
    person = PEOPLE[who]
    allowed = who in ALLOWED[rule]
    approve, decline = may_approve(rule, person), may_decline(rule, person)
    assert approve.allowed is decline.allowed is allowed
    if allowed:
        # Only four eyes needs a second approval.
        assert approve.completes is (rule is not FOUR_EYES)
    else:
        assert approve.code == decline.code == "APPROVER_NOT_ALLOWED"
        with pytest.raises(ApproverNotAllowed):
            approve.raise_if_refused()
    # The queue's SQL filter comes from the same rule.
    assert (rule in rules_allowing(is_operator=person.is_operator, own=person.own)) is allowed


# (first approver, second person) -> the second's verdict: "completes", or the refusal code.
FOUR_EYES_SECOND = [
    ("owner", "operator", "completes"),
    ("operator", "owner", "completes"),
    ("operator", "operator2", "completes"),
    ("operator", "subject-operator", "completes"),
    ("owner-operator", "operator", "completes"),
    ("operator", "operator", "ALREADY_APPROVED_BY_YOU"),
    ("owner", "owner", "ALREADY_APPROVED_BY_YOU"),
    # Both belong to the run: four eyes that are not a second opinion.
    ("owner", "subject", "APPROVER_NOT_ALLOWED"),
    ("owner", "owner-operator", "APPROVER_NOT_ALLOWED"),
    ("owner-operator", "subject-operator", "APPROVER_NOT_ALLOWED"),
    ("subject", "owner", "APPROVER_NOT_ALLOWED"),
    ("operator", "outsider", "APPROVER_NOT_ALLOWED"),
]


@pytest.mark.parametrize(("first", "second", "expected"), FOUR_EYES_SECOND)
def test_four_eyes_second_approval(first: str, second: str, expected: str) -> None:
    verdict = may_approve(FOUR_EYES, PEOPLE[second], [prior(first)])
    if expected == "completes":
        assert (verdict.allowed, verdict.completes, verdict.code) == (True, True, None)
        return
    assert (verdict.allowed, verdict.code) == (False, expected)
    error = AlreadyApprovedByYou if expected == "ALREADY_APPROVED_BY_YOU" else ApproverNotAllowed
    with pytest.raises(error) as raised:
        verdict.raise_if_refused()
    assert raised.value.http_status == (409 if error is AlreadyApprovedByYou else 403)


def test_four_eyes_a_decline_needs_one_person_even_after_approvals() -> None:
    """Declining is the safe direction: whoever may approve may decline alone, the first
    approver included (nothing about earlier approvals is asked)."""
    for who in ALLOWED[FOUR_EYES]:
        assert may_decline(FOUR_EYES, PEOPLE[who]).allowed, who
    assert not may_decline(FOUR_EYES, PEOPLE["outsider"]).allowed


def test_progress_says_the_rule_and_who_approved() -> None:
    assert progress(FOUR_EYES, []) == "needs two approvers: 0 of 2"
    assert progress(FOUR_EYES, ["alice"]) == "needs two approvers: 1 of 2, approved by alice"
    assert progress(OPERATOR, []) == "needs one approver: an operator who is not the run's owner"


def test_an_unknown_rule_name_is_a_clear_error() -> None:
    assert approver_rule("four_eyes") is FOUR_EYES
    with pytest.raises(DomainError) as raised:
        approver_rule("two_eyes")
    assert raised.value.code == "APPROVER_RULE_INVALID"
    assert "four_eyes" in raised.value.message


# --- from the contract, through the gate, into the confirmation request -----------------------


def test_a_contract_defaults_to_owner_or_operator_and_validates_its_rule() -> None:
    contract = Toolkit().preference_contract()
    assert contract.approvers is OWNER_OR_OPERATOR
    # A tool package may spell the rule as a string; the contract holds the rule itself.
    four = dataclasses.replace(contract, approvers="four_eyes")  # type: ignore[arg-type]
    assert four.approvers is FOUR_EYES
    with pytest.raises(RegistryError, match="approvers must be one of"):
        dataclasses.replace(contract, approvers="anyone")  # type: ignore[arg-type]


@pytest.mark.parametrize("rule", list(ApproverRule))
def test_the_gate_carries_the_contract_rule_into_needs_confirmation(rule: ApproverRule) -> None:
    contract = dataclasses.replace(Toolkit().preference_contract(), approvers=rule)
    output: Any = tool("p1", "save_preference", {"key": "answer_language", "value": "zh"})
    decision = evaluate(
        parse_planner_output(output),  # type: ignore[arg-type]
        run=run_view(DEADLINE_MS),
        grants=[grant("memory:write", "alice")],
        confirmations=[],
        registry=ToolRegistry([contract]),
        now_ms=NOW_MS,
    )
    assert isinstance(decision, NeedsConfirmation)
    assert decision.approvers is rule


def test_the_waiting_run_asks_with_the_contract_rule() -> None:
    kit = Toolkit()
    contract = dataclasses.replace(kit.preference_contract(), approvers=FOUR_EYES)
    h = harness(
        [tool("p1", "save_preference", {"key": "answer_language", "value": "zh"})],
        [contract],
        kit=kit,
        grants=[grant("memory:write", "alice")],
    )
    commits: list[Commit] = []
    apply = h.store.apply

    def recording(commit: Commit) -> Any:
        commits.append(commit)
        return apply(commit)

    h.store.apply = recording  # type: ignore[method-assign]
    assert h.advance().status is Status.WAITING_CONFIRMATION
    (request,) = [c.confirmation_request for c in commits if c.confirmation_request]
    assert request.approvers is FOUR_EYES


# --- the audit on the run's timeline ------------------------------------------------------------


def test_the_timeline_names_every_approver() -> None:
    first = describe(
        {
            "sequence": 7,
            "event": "confirmation.approval-recorded",
            "details": {"by": "alice", "needed": 2, "approved_by": ["alice"]},
        }
    )
    assert first.summary == "Approval 1 of 2 by alice: waiting for a second approver"
    decided = describe(
        {
            "sequence": 8,
            "event": "confirmation.decided",
            "details": {
                "decision": "approved",
                "by": "operator",
                "approved_by": ["alice", "operator"],
            },
        }
    )
    assert decided.summary == "Confirmation approved by operator (approved by alice, operator)"
    declined = describe(
        {
            "sequence": 8,
            "event": "confirmation.decided",
            "details": {"decision": "declined", "by": "bob", "approved_by": ["alice"]},
        }
    )
    assert declined.summary == "Confirmation declined by bob (approved by alice)"
    alone = describe(
        {
            "sequence": 8,
            "event": "confirmation.decided",
            "details": {"decision": "approved", "by": "operator", "approved_by": ["operator"]},
        }
    )
    assert alone.summary == "Confirmation approved by operator"

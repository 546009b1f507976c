"""How a signed-in user stands to a run, for the approver rule
(policy.domain.confirmation.approvers): the Django side of that rule, here in policy rather than
with the roles (agentconsole/kernel/roles.py), which decide nothing about runs."""

from __future__ import annotations

from typing import Any

from agentconsole.kernel.roles import is_operator
from policy.domain.confirmation.approvers import Person


def approver_facts(user: Any, *, run_owner_id: Any, run_subject: str) -> Person:
    """How ``user`` stands to a run, for the approver rule (policy.domain.confirmation.approvers):
    the same "own run" as runs.selectors.is_own_run (started by them, or for them)."""
    return Person(
        user_id=user.pk,
        is_operator=is_operator(user),
        is_run_owner=run_owner_id is not None and run_owner_id == user.pk,
        is_run_subject=run_subject == user.get_username(),
    )

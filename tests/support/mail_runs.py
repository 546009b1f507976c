"""Runs with the mail package (``tests/plugins/mail.py``) whose write waits for a person, for the
tests of the confirmation card's provenance (issue 23 item 4): the recipient comes from the
untrusted inbox, the subject from the user's goal, the body from alice's saved ``signature``.

``mail_world`` is the fixture a module makes autouse: ``world = pytest.fixture(autouse=True)
(mail_world)``. Runs are advanced in this process (the thread executor), with committed rows:
the modules use ``django_db(transaction=True)``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from agentconsole import wiring
from memory import services as memory_services
from memory.domain.preferences import DEFAULT_KEYS
from runs import models as m
from runs import services
from runs.domain.budgets import RunBudgets
from runs.domain.machine import Status
from tests.plugins import mail
from tests.support.planner import tool_call

GOAL = "Send the Numbers for Q3 to whoever asked in my inbox."
SIGNATURE = "Best regards, Alice Example"
TOOLS = ("inbox_read", "send_email")
GRANTS = [{"capability": f"mail:{t}", "resource_scope": "*", "expires_at_step": 50} for t in TOOLS]


def mail_world(settings: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The mail tools registered, no tool policy, a free-text ``signature`` key, no broker."""
    settings.AGENTCONSOLE_TOOLS = ["tests.plugins.mail"]
    settings.AGENTCONSOLE_TOOL_POLICY = {}
    settings.AGENTCONSOLE_MEMORY_KEYS = [*DEFAULT_KEYS, {"key": "signature", "max_length": 100}]
    monkeypatch.setattr(services, "enqueue_advance", lambda run_id, **kw: None)
    for cached in (wiring.registry, wiring.tool_policy, wiring.memory_policies):
        cached.cache_clear()
    mail.clear()
    yield settings
    for cached in (wiring.registry, wiring.tool_policy, wiring.memory_policies):
        cached.cache_clear()


def save_signature(user: Any) -> None:
    """alice saves her signature the way a user does: propose, then confirm the exact value."""
    change = memory_services.preference_propose_edit(
        subject="alice", key="signature", value=SIGNATURE, expected_version=None, by=user
    )
    result = memory_services.preference_apply_edit(
        change_id=change.pk, shown_hash=change.proposal_hash, by=user
    )
    assert result.ok


ARGS = {"to": mail.ATTACKER, "subject": "Numbers for Q3", "body": SIGNATURE}


def waiting_send(*then: dict[str, Any]) -> m.Run:
    """A run that reads the inbox, then proposes the send (``ARGS``, proposal id ``send``), which
    waits; ``then``: what the planner proposes after it."""
    outputs = [
        tool_call("read", "inbox_read", {}),
        tool_call("send", "send_email", ARGS, sources=["user-1"]),
        *then,
        {"kind": "final", "answer": "Sent.", "citation_observation_ids": ["tool-1"]},
    ]
    state = services.run_create(
        subject="alice",
        goal=GOAL,
        budgets=RunBudgets(max_steps=10, max_tool_calls=8, max_repeated_proposal=2),
        grants=GRANTS,
        planner={"kind": "fixture", "outputs": outputs},
    )
    services.run_advance(run_id=state.run_id)
    row = m.Run.objects.get(pk=state.run_id)
    assert row.status == Status.WAITING_CONFIRMATION.value
    assert mail.SENT == {}
    return row

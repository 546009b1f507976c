"""Mask what is recorded and shown, never what is executed (issue 21 item 1).

Before the fix the planner's output was masked before it was parsed: ``update_password`` ran
with ``[secret:hmac-sha256:…]`` as the password, an e-mail body holding ``token=…`` was sent
with the tag in its text, and a grant's ``equals`` was checked against the tag. Now the gate,
the proposal hash and the tool see the arguments as written; the trace, the observations, the
confirmation a person is shown and the handoff bundle see them masked.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from policy.domain.canonical import content_hash, proposal_hash
from policy.domain.contracts import ConfirmationMode, SideEffect, ToolContext, ToolContract
from policy.domain.outcomes import ToolOutcome
from policy.domain.secrets.redaction import MASKED_SECRETS, active_scanner
from runs.domain import lifecycle
from runs.domain.machine import Status
from tests.domain.toolkit import Harness, final, grant, harness, tool

PASSWORD = "1j1l-2k3j"
TOKEN = "abc123XYZ789"
BODY = f"Your reset link: https://example.test/reset?token={TOKEN} (valid for one hour)"


@dataclass
class Mailroom:
    """Two tools that keep exactly the arguments they were called with."""

    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def update_password(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        self.calls.append(("update_password", dict(args)))
        return ToolOutcome.succeeded({"user": args["user"], "updated": True})

    def send_email(self, args: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
        self.calls.append(("send_email", dict(args)))
        return ToolOutcome.succeeded({"to": args["to"], "sent": True})

    def contracts(self, confirmation: ConfirmationMode = ConfirmationMode.NEVER) -> list[Any]:
        def contract(name: str, execute: Any, properties: dict[str, Any]) -> ToolContract:
            return ToolContract(
                name=name,
                version="1",
                description=name,
                input_schema={
                    "type": "object",
                    "properties": properties,
                    "required": sorted(properties),
                    "additionalProperties": False,
                },
                output_schema={"type": "object"},
                required_capabilities=("account:write",),
                side_effect=SideEffect.IDEMPOTENT_WRITE,
                confirmation=confirmation,
                timeout_ms=2_000,
                execute=execute,
                logged_fields=tuple(sorted(properties)),
            )

        text = {"type": "string", "maxLength": 500}
        return [
            contract("update_password", self.update_password, {"user": text, "password": text}),
            contract("send_email", self.send_email, {"to": text, "body": text}),
        ]


def _recorded(h: Harness) -> str:
    """Everything the run recorded to be read or shown: trace events, observations, the
    proposals confirmations show, the handoffs. (Not the run's own state and ledger: the
    runner reads the real arguments back from there.)"""
    return json.dumps(
        {
            "events": h.store.events[h.run_id],
            "observations": {
                k: o.model_dump(mode="json") for k, o in h.store.observations[h.run_id].items()
            },
            "asked": h.store.asked,
            "handoffs": h.store.handoffs[h.run_id],
        },
        ensure_ascii=False,
    )


def _run(outputs: list[Any], mail: Mailroom, **extra: Any) -> Harness:
    extra.setdefault("grants", [grant("account:write")])
    return harness(outputs, mail.contracts(extra.pop("confirmation", ConfirmationMode.NEVER)),
                   **extra)  # fmt: skip


def test_the_tool_gets_the_password_the_planner_wrote_and_the_trace_never_shows_it() -> None:
    mail = Mailroom()
    h = _run(
        [
            tool("p1", "update_password", {"user": "alice", "password": PASSWORD}),
            tool("p2", "send_email", {"to": "alice@example.test", "body": BODY}),
            final("Done.", ["tool-1", "tool-2"]),
        ],
        mail,
    )
    assert h.advance().status is Status.COMPLETED
    assert mail.calls == [
        ("update_password", {"user": "alice", "password": PASSWORD}),
        ("send_email", {"to": "alice@example.test", "body": BODY}),
    ]
    recorded = _recorded(h)
    assert PASSWORD not in recorded
    assert TOKEN not in recorded
    # The logged fields are in the trace, masked: the e-mail's text around the token is kept.
    (received,) = [e for e in h.events("proposal.received") if e["proposal_id"] == "p2"]
    assert received["details"]["arg_body"].startswith("Your reset link: https://example.test/")
    assert "token=[secret:hmac-sha256:" in received["details"]["arg_body"]
    # The hash (and so the idempotency token) is over the real arguments.
    (received,) = [e for e in h.events("proposal.received") if e["proposal_id"] == "p1"]
    assert received["details"]["proposal_hash"] == proposal_hash(
        "update_password", "1", {"user": "alice", "password": PASSWORD}
    )


def test_an_equals_constraint_is_checked_on_the_real_value() -> None:
    """Before the fix the constraint compared the grant's value with the tag and refused."""
    mail = Mailroom()
    pinned = grant("account:write", constraints={"password": {"equals": PASSWORD}})
    h = _run(
        [
            tool("p1", "update_password", {"user": "alice", "password": PASSWORD}),
            tool("p2", "update_password", {"user": "alice", "password": "other-2k3j"}),
            final("Done.", ["tool-1"]),
        ],
        mail,
        grants=[pinned],
    )
    h.advance()
    assert mail.calls == [("update_password", {"user": "alice", "password": PASSWORD})]
    refused = h.observation("policy-2").content
    assert (refused["layer"], refused["code"]) == (
        "authorization",
        "CAPABILITY_CONSTRAINT_VIOLATED",
    )


def test_a_person_is_asked_about_the_masked_value_and_the_tool_gets_the_real_one() -> None:
    mail = Mailroom()
    arguments = {"user": "alice", "password": PASSWORD}
    h = _run(
        [tool("p1", "update_password", arguments), final("Done.", ["tool-1"])],
        mail,
        confirmation=ConfirmationMode.PER_CALL,
    )
    state = h.advance()
    assert state.status is Status.WAITING_CONFIRMATION
    (pending,) = h.confirmations()
    # Bound to the real arguments: another password is another proposal.
    assert pending.proposal_hash == proposal_hash("update_password", "1", arguments)
    assert pending.proposal_hash != proposal_hash(
        "update_password", "1", {**arguments, "password": "1j1l-2k3k"}
    )
    # What the person is shown: the tag, and that it stands for a secret of 9 characters.
    tag = active_scanner().tag(PASSWORD)
    asked = h.store.asked[pending.confirmation_id]
    assert asked["arguments"] == {"user": "alice", "password": tag}
    assert asked[MASKED_SECRETS] == {tag: len(PASSWORD)}
    # The run's own state keeps the real proposal through the wait; nothing recorded has it.
    assert state.pending_proposal is not None
    assert state.pending_proposal["arguments"] == arguments
    assert PASSWORD not in _recorded(h)

    h.store.apply(
        lifecycle.decide_confirmation(
            h.state(), confirmation_id=pending.confirmation_id, approved=True, by="olga"
        )
    )
    assert h.advance().status is Status.COMPLETED
    assert mail.calls == [("update_password", arguments)]
    assert PASSWORD not in _recorded(h)


def test_the_unparsed_output_of_a_planner_is_fingerprinted_masked() -> None:
    """A proposal that fails to parse is never executed: the loop guard's hash of it (a trace
    detail) is over the masked output, so a dictionary cannot test passwords against it."""
    mail = Mailroom()
    bad = {**tool("p1", "update_password", {"user": "alice", "password": PASSWORD}), "x": 1}
    h = _run([bad, bad, bad], mail, max_repeated_proposal=1)
    h.advance()
    (loop,) = h.events("proposal.loop-detected")
    masked = active_scanner().redact(bad)
    assert masked["arguments"]["password"] != PASSWORD
    assert loop["details"]["fingerprint"] == content_hash({"unparsed": masked})
    assert mail.calls == []

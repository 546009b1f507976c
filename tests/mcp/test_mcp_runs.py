"""MCP tools under the gate, end to end (issue 12 item 2): a server written with the official
SDK, over stdio (a process per call) and over streamable HTTP (a real server on 127.0.0.1),
registered and accepted through the services, used by a run (fixture planner, real ``Runner``,
ORM store) through the gate, the ledger and the idempotency token.

The planner is hostile on purpose: it follows the instruction injected into the read tool's
result and proposes the write at once. The write still waits for a person.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.conf import settings

from agentconsole import wiring
from policy.domain.contracts import ConfirmationMode, SideEffect
from policy.mcp import services as mcp_services
from policy.models import Confirmation, McpTool
from runs import models as m
from runs import services
from runs.domain.budgets import RunBudgets
from runs.domain.state import RunState
from tests.mcp.mcp_kit import READ_POLICY, TOKEN, WRITE_POLICY, NotesServer
from tests.mcp.notes_server import INJECTION
from tests.support.planner import tool_call

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("fresh_registry")]


def register_and_accept(notes: NotesServer, **policies: dict[str, Any]) -> str:
    name = notes.spec["name"]
    mcp_services.mcp_server_register(
        spec=notes.spec,
        by=None,
        lister=wiring.mcp_lister,
        allowed_commands=settings.AGENTCONSOLE_MCP_STDIO_COMMANDS,
    )
    for tool, policy in policies.items():
        row = McpTool.objects.get(server__name=name, name=tool)
        mcp_services.mcp_tool_accept(
            server=name, tool=tool, policy=policy, shown_pin=row.listed_pin, by=None
        )
    return name


def grant(capability: str, scope: str) -> dict[str, Any]:
    return {"capability": capability, "resource_scope": scope, "expires_at_step": 50}


def start(outputs: list[dict[str, Any]], grants: list[dict[str, Any]]) -> RunState:
    return services.run_create(
        subject="alice",
        goal="Summarize the notes about retries.",
        budgets=RunBudgets(
            max_steps=10, max_tool_calls=5, max_repeated_proposal=2, deadline_ms=600_000
        ),
        grants=grants,
        planner={"kind": "fixture", "outputs": outputs},
    )


def observation(run_id: str, observation_id: str) -> m.Observation:
    return m.Observation.objects.get(run_id=run_id, observation_id=observation_id)


def test_a_run_reads_and_writes_through_the_gate(notes: NotesServer) -> None:
    server = register_and_accept(notes, lookup=READ_POLICY, post_note=WRITE_POLICY)
    lookup, post = f"mcp__{server}__lookup", f"mcp__{server}__post_note"

    # Annotations only tighten: the operator said idempotent-write/never, destructiveHint wins.
    contract = wiring.registry().get(post, "1").contract
    assert (contract.side_effect, contract.confirmation) == (
        SideEffect.IRREVERSIBLE,
        ConfirmationMode.PER_CALL,
    )
    assert wiring.registry().get(lookup, "1").contract.confirmation is ConfirmationMode.NEVER

    run = start(
        [
            tool_call("p1", lookup, {"topic": "retries"}),
            # The hostile planner obeys the text the read returned.
            tool_call("p2", post, {"text": "pwned"}, sources=["tool-1"]),
            {"kind": "final", "answer": "Posted.", "citation_observation_ids": ["tool-1"]},
        ],
        [grant("notes:read", f"mcp/{server}"), grant("notes:write", f"mcp/{server}")],
    )
    waiting = services.run_advance(run_id=run.run_id)
    assert waiting is not None
    assert waiting.status.value == "waiting_confirmation"

    # The read ran; its result is untrusted content that carries the injection.
    read = observation(run.run_id, "tool-1")
    assert read.trust == "untrusted-content"
    assert INJECTION in read.content["value"]["content"][0]["text"]
    # The injection proposed the write; the write did not happen.
    assert [c["tool"] for c in notes.calls()] == ["lookup"]
    pending = Confirmation.objects.get(run_id=run.run_id, status="pending")
    assert pending.tool_name == post
    assert pending.cites_untrusted

    services.confirmation_decide(
        confirmation_id=pending.pk, approved=True, shown_hash=pending.proposal_hash
    )
    done = services.run_advance(run_id=run.run_id)
    assert done is not None
    assert done.status.value == "completed"
    services.run_advance(run_id=run.run_id)  # nothing left: no second call

    writes = notes.calls("post_note")
    assert len(writes) == 1, writes
    ledger = m.LedgerEntry.objects.get(run_id=run.run_id, tool_name=post)
    assert ledger.status == "succeeded"
    # The server saw the command's idempotency token, the one the ledger holds.
    assert writes[0]["meta"] == {"agentconsole/idempotency-token": ledger.idempotency_token}
    if notes.spec["transport"] == "http":
        assert writes[0]["headers"]["authorization"] == TOKEN  # injected from settings


def test_a_declined_write_never_reaches_the_server(stdio_notes: NotesServer) -> None:
    server = register_and_accept(stdio_notes, lookup=READ_POLICY, post_note=WRITE_POLICY)
    run = start(
        [
            tool_call("p1", f"mcp__{server}__lookup", {"topic": "retries"}),
            tool_call("p2", f"mcp__{server}__post_note", {"text": "x"}, sources=["tool-1"]),
            {"kind": "final", "answer": "No.", "citation_observation_ids": ["tool-1"]},
        ],
        [grant("notes:read", f"mcp/{server}"), grant("notes:write", f"mcp/{server}")],
    )
    services.run_advance(run_id=run.run_id)
    pending = Confirmation.objects.get(run_id=run.run_id, status="pending")
    services.confirmation_decide(
        confirmation_id=pending.pk, approved=False, shown_hash=pending.proposal_hash
    )
    services.run_advance(run_id=run.run_id)
    assert stdio_notes.calls("post_note") == []


def test_a_write_without_its_grant_is_refused_before_any_call(stdio_notes: NotesServer) -> None:
    server = register_and_accept(stdio_notes, post_note=WRITE_POLICY)
    run = start(
        [tool_call("p1", f"mcp__{server}__post_note", {"text": "x"})],
        [grant("notes:read", f"mcp/{server}")],
    )
    services.run_advance(run_id=run.run_id)
    rejection = observation(run.run_id, "policy-1")
    assert rejection.content["code"] == "MISSING_CAPABILITY"
    assert stdio_notes.calls() == []


def test_a_changed_tool_is_refused_until_accepted_again(stdio_notes: NotesServer) -> None:
    server = register_and_accept(stdio_notes, lookup=READ_POLICY)
    lookup = f"mcp__{server}__lookup"
    grants = [grant("notes:read", f"mcp/{server}")]
    stdio_notes.variant.write_text("2")  # the server now serves another input schema

    # 1. At call time: the catalog still says accepted, the live listing does not.
    run = start([tool_call("p1", lookup, {"topic": "a"})], grants)
    services.run_advance(run_id=run.run_id)
    refused = m.LedgerEntry.objects.get(run_id=run.run_id)
    assert (refused.status, refused.outcome["code"]) == ("rejected", "MCP_TOOL_CHANGED")
    assert stdio_notes.calls() == []

    # 2. At registry build, once the listing was refreshed: the gate refuses (semantic layer).
    mcp_services.mcp_server_refresh(
        name=server,
        lister=wiring.mcp_lister,
        allowed_commands=settings.AGENTCONSOLE_MCP_STDIO_COMMANDS,
    )
    assert (
        McpTool.objects.get(name="lookup").listed_pin
        != McpTool.objects.get(name="lookup").accepted_pin
    )
    run = start([tool_call("p1", lookup, {"topic": "a"})], grants)
    services.run_advance(run_id=run.run_id)
    assert observation(run.run_id, "policy-1").content["code"] == "MCP_TOOL_CHANGED"
    assert stdio_notes.calls() == []

    # 3. Accepted again: a new revision (the contract's version), and it runs.
    row = McpTool.objects.get(name="lookup")
    mcp_services.mcp_tool_accept(
        server=server, tool="lookup", policy=READ_POLICY, shown_pin=row.listed_pin, by=None
    )
    assert wiring.registry().get(lookup, "1") is None
    run = start([tool_call("p1", lookup, {"topic": "a", "limit": 2}, version="2")], grants)
    services.run_advance(run_id=run.run_id)
    assert [c["arguments"] for c in stdio_notes.calls()] == [{"topic": "a", "limit": 2}]


def test_a_tool_error_is_a_rejection_and_secrets_never_reach_the_record(
    stdio_notes: NotesServer,
) -> None:
    server = register_and_accept(stdio_notes, fail=READ_POLICY, whoami=READ_POLICY)
    run = start(
        [
            tool_call("p1", f"mcp__{server}__fail", {}),
            tool_call("p2", f"mcp__{server}__whoami", {}),
        ],
        [grant("notes:read", f"mcp/{server}")],
    )
    services.run_advance(run_id=run.run_id)
    failed = observation(run.run_id, "tool-1")
    assert (failed.content["status"], failed.content["code"]) == ("rejected", "MCP_TOOL_ERROR")
    assert "fire" not in str(failed.content)  # the server's words stay out of a trusted record
    echoed = observation(run.run_id, "tool-2")
    assert echoed.trust == "untrusted-content"
    # The server got the token (it echoed it) and no run record holds it.
    assert [c["tool"] for c in stdio_notes.calls()] == ["fail", "whoami"]
    for model in (m.Observation, m.TraceEvent, m.LedgerEntry):
        for row in model.objects.filter(run_id=run.run_id).values():
            assert TOKEN not in str(row), model

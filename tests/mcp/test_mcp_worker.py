"""An MCP read and write through a real Celery worker process (not eager mode): the worker's
registry includes the tools the operator accepted in the database; the write waits for its
confirmation and runs once approved, exactly once, with its idempotency token."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentconsole import wiring
from policy.mcp import services as mcp_services
from policy.models import Confirmation, McpTool
from runs import models as m
from runs import services
from runs.domain.budgets import RunBudgets
from tests.mcp.mcp_kit import READ_POLICY, TOKEN, WRITE_POLICY, stdio_server
from tests.support.planner import tool_call
from tests.support.workers import Worker, cluster, wait_for

pytestmark = [
    pytest.mark.worker,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("fresh_registry", "mcp_secrets"),
]

WAIT_S = 90  # a bound on a real worker starting MCP server processes, not a speed claim


@pytest.fixture(scope="module")
def notes_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the test server keeps its files: fixed before the worker starts, since the
    worker's allowlist names the server's whole command line, paths included."""
    return tmp_path_factory.mktemp("notes")


@pytest.fixture(scope="module")
def mcp_worker(
    django_db_setup: None, tmp_path_factory: pytest.TempPathFactory, notes_dir: Path
) -> Iterator[Worker]:
    env = {
        # The worker makes the call (the gateway's way: tests/mcp/test_mcp_gateway_processes.py).
        "AGENTCONSOLE_MODEL_CALLS": "inline",
        "AGENTCONSOLE_MCP_SECRETS": json.dumps({"NOTES_TOKEN": TOKEN}),
        "AGENTCONSOLE_MCP_STDIO_COMMANDS": json.dumps([stdio_server(notes_dir).argv]),
    }
    with cluster(tmp_path_factory, name="mcp", extra_env=env) as c:
        yield c.workers[0]


def status_is(run_id: str, status: str) -> bool:
    return m.Run.objects.filter(pk=run_id, status=status).exists()


def test_a_worker_runs_the_write_once_after_approval(
    mcp_worker: Worker, notes_dir: Path, settings: Any
) -> None:
    notes = stdio_server(notes_dir)
    settings.AGENTCONSOLE_MCP_STDIO_COMMANDS = (tuple(notes.argv),)  # as the worker's
    mcp_services.mcp_server_register(
        spec=notes.spec, by=None, lister=wiring.mcp_lister, allowed_commands=[notes.argv]
    )
    for tool, policy in (("lookup", READ_POLICY), ("post_note", WRITE_POLICY)):
        pin = McpTool.objects.get(name=tool).listed_pin
        mcp_services.mcp_tool_accept(
            server="notes", tool=tool, policy=policy, shown_pin=pin, by=None
        )
    run = services.run_create(
        subject="alice",
        goal="Post what the notes say.",
        budgets=RunBudgets(max_steps=10, max_tool_calls=5, max_repeated_proposal=2,
                           deadline_ms=600_000),
        grants=[{"capability": c, "resource_scope": "mcp/notes", "expires_at_step": 50}
                for c in ("notes:read", "notes:write")],
        planner={"kind": "fixture", "outputs": [
            tool_call("p1", "mcp__notes__lookup", {"topic": "retries"}),
            tool_call("p2", "mcp__notes__post_note", {"text": "hi"}, sources=["tool-1"]),
            {"kind": "final", "answer": "Done.", "citation_observation_ids": ["tool-1"]},
        ]},
        enqueue=True,
    )  # fmt: skip
    wait_for(lambda: status_is(run.run_id, "waiting_confirmation"), timeout_s=WAIT_S,
             what="the write waits for its confirmation", log=mcp_worker.log)  # fmt: skip
    assert notes.calls("post_note") == []

    pending = Confirmation.objects.get(run_id=run.run_id, status="pending")
    services.confirmation_decide(
        confirmation_id=pending.pk, approved=True, shown_hash=pending.proposal_hash, enqueue=True
    )
    wait_for(lambda: status_is(run.run_id, "completed"), timeout_s=WAIT_S,
             what="the run completes", log=mcp_worker.log)  # fmt: skip
    (write,) = notes.calls("post_note")
    token = m.LedgerEntry.objects.get(run_id=run.run_id, tool_name="mcp__notes__post_note")
    assert write["meta"] == {"agentconsole/idempotency-token": token.idempotency_token}

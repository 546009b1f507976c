"""Secrets in a goal, a planner argument, a final answer, a cancel reason or a scenario
confirmation are redacted before anything is recorded or sent (issue 9 item 12): the trace,
observations, confirmations, handoffs, the API, the websocket frames and the admin pages hold
tags, never the secret. What the tool executes is not masked (issue 21 item 1): the real
arguments are kept only where the runner reads them back (``EXECUTOR_ONLY``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.contrib.admin.utils import quote
from django.core.exceptions import ImproperlyConfigured
from django.test import Client
from rest_framework.authtoken.models import Token

from agentconsole.asgi import application
from policy.models import Confirmation
from runs import models as m
from runs import services
from runs.domain.budgets import RunBudgets
from runs.tools.corpus import demo_corpus_dir, document_load
from tests.api import api_kit as kit
from tests.support.db_scan import scan
from tests.support.planner import tool_call

# The trace consumer runs in this process (tests/conftest.py: trace_readers_closed).
pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("trace_readers_closed"),
]

OPENAI = "sk-live-abc123def456ghi789jkl012"
PASSWORD = "hunter2"
SECRETS = (OPENAI, PASSWORD)
WITH_SECRETS = f"use {OPENAI} and password={PASSWORD}"
# Where a secret the planner wrote into an argument may be stored: a fixture planner's script,
# a proposal waiting for a person, the ledger's command (a recovery re-issues it). Read by the
# runner only; every page that shows them masks them; a user's erase reaches them.
EXECUTOR_ONLY = {
    ("runs_run", "planner"),
    ("runs_run", "pending_proposal"),
    ("runs_ledgerentry", "arguments"),
}


def _start(owner: Any, outputs: list[dict[str, Any]], **extra: Any) -> str:
    state = services.run_create(
        subject=owner.get_username(),
        owner=owner,
        goal=extra.pop("goal", f"Find the retry policy; {WITH_SECRETS}"),
        budgets=RunBudgets(
            max_steps=extra.pop("max_steps", 6),
            max_tool_calls=4,
            max_repeated_proposal=2,
            deadline_ms=600_000,
        ),
        grants=[
            {"capability": "search:public", "resource_scope": "public", "expires_at_step": 10},
            {"capability": "artifact:write", "resource_scope": "run-output", "expires_at_step": 10},
        ],
        planner={"kind": "fixture", "outputs": outputs},
        **extra,
    )
    return state.run_id


def _frames(run_id: str, user: Any) -> list[dict[str, Any]]:
    token = Token.objects.get_or_create(user=user)[0].key

    async def read() -> list[dict[str, Any]]:
        comm = WebsocketCommunicator(
            application,
            f"/ws/runs/{run_id}/trace/?after=0",
            headers=[(b"authorization", f"Token {token}".encode())],
        )
        connected, _ = await comm.connect(timeout=5)
        assert connected
        frames = []
        while not frames or frames[-1]["type"] != "replayed":
            frames.append(await comm.receive_json_from(timeout=5))
        await comm.disconnect()
        return frames

    return async_to_sync(read)()


def _leaks(text: str) -> list[str]:
    return [s for s in SECRETS if s in text]


def test_a_secret_in_a_goal_argument_answer_or_reason_is_stored_and_sent_only_as_a_tag(
    people: kit.People, settings: Any, tmp_path: Path
) -> None:
    """issue 9 item 12: before the fix the goal, the ledger arguments, the observation, the
    answer, the trace and the frames all held ``sk-live-…`` and ``password=hunter2``."""
    settings.AGENTCONSOLE_RUN_OUTPUT_ROOT = str(tmp_path / "run-output")
    for path in sorted(demo_corpus_dir().glob("*.md")):
        document_load(path=path)
    alice = people.alice
    note = tool_call("p2", "write_artifact", {"path": "run-output/n.txt", "content": WITH_SECRETS})
    done = _start(
        alice.user,
        [
            tool_call("p1", "search_public", {"query": f"retry {WITH_SECRETS}"}),
            note,
            {"kind": "final", "answer": WITH_SECRETS, "citation_observation_ids": ["tool-1"]},
        ],
        confirmations=[
            {
                "confirmation_id": "c1",
                "proposal": {k: note[k] for k in ("tool_name", "tool_version", "arguments")},
                "approved": True,
                "expires_at_step": 5,
            }
        ],
    )
    # Out of steps after one search: a handoff bundle with the goal and the last observations.
    handed = _start(
        alice.user, [tool_call("p1", "search_public", {"query": WITH_SECRETS})] * 2, max_steps=1
    )
    cancelled = _start(alice.user, [])
    for run_id in (done, handed):
        services.run_advance(run_id=run_id)
    kit.assert_ok(alice.post(f"/api/runs/{cancelled}/cancel/", {"reason": WITH_SECRETS}))

    assert m.Run.objects.get(pk=done).status == "completed"
    assert m.Run.objects.get(pk=handed).status == "failed"
    assert m.Handoff.objects.filter(run_id=handed).exists()
    assert m.LedgerEntry.objects.filter(run_id=done, tool_name="write_artifact").exists()
    assert m.Run.objects.get(pk=done).answer.startswith("use [secret:hmac-sha256:")
    # issue 21 item 1: the tool received what the planner wrote, and wrote it (before the fix
    # it wrote the tags).
    written = (tmp_path / "run-output" / done / "n.txt").read_text()
    assert written == WITH_SECRETS
    # The scenario confirmation was hashed over the real arguments, as the gate hashes the
    # proposal it answers; it is stored masked.
    row = m.LedgerEntry.objects.get(run_id=done, tool_name="write_artifact")
    confirmation = Confirmation.objects.get(pk=f"{done}:c1")
    assert confirmation.proposal_hash == row.proposal_hash
    assert _leaks(json.dumps(confirmation.proposal)) == []
    assert row.arguments["content"] == WITH_SECRETS

    for secret in SECRETS:
        stored = {(h.table, h.column) for h in scan(secret)}
        assert stored <= EXECUTOR_ONLY, f"{secret} is stored in {stored - EXECUTOR_ONLY}"

    bodies = []
    for run_id in (done, handed, cancelled):
        for suffix in ("", "events/", "observations/", "ledger/"):
            response = alice.get(f"/api/runs/{run_id}/{suffix}")
            kit.assert_ok(response)
            bodies.append(response.content.decode())
        frames = _frames(run_id, alice.user)
        assert any(f["type"] == "event" for f in frames)
        bodies.append(json.dumps(frames))
    handoffs = kit.assert_ok(people.reviewer.get("/api/handoffs/"))
    bodies.append(json.dumps(handoffs))
    for body in bodies:
        assert _leaks(body) == [], body[:400]


def test_the_admin_shows_no_field_the_trace_redacts(people: kit.People) -> None:
    """issue 9 item 12: the ledger, confirmation and run admin pages showed the raw arguments,
    including the fields a contract marks as redacted (write_artifact's ``content``) that the
    trace never shows."""
    private = "my private diary entry"
    note = tool_call("p1", "write_artifact", {"path": "run-output/d.txt", "content": private})
    run_id = _start(
        people.alice.user,
        [note],
        confirmations=[
            {
                "confirmation_id": "c1",
                "proposal": {k: note[k] for k in ("tool_name", "tool_version", "arguments")},
                "approved": True,
                "expires_at_step": 5,
            }
        ],
    )
    services.run_advance(run_id=run_id)
    row = m.LedgerEntry.objects.get(run_id=run_id)
    assert row.arguments["content"] == private  # the tool needed it; the admin must not show it
    client = Client()
    client.force_login(people.root.user)
    pages = [
        f"/admin/runs/ledgerentry/{row.pk}/change/",
        f"/admin/policy/confirmation/{quote(Confirmation.objects.get(run_id=run_id).pk)}/change/",
        f"/admin/runs/run/{quote(run_id)}/change/",
    ]
    for page in pages:
        response = client.get(page)
        assert response.status_code == 200, page
        html = response.content.decode()
        assert private not in html, page
        assert "run-output/d.txt" in html or page.endswith(f"{quote(run_id)}/change/"), page


def test_the_admin_masks_the_secrets_the_runner_keeps(people: kit.People) -> None:
    """issue 21 item 1: the ledger, a pending proposal and a fixture planner's script keep the
    real arguments for the runner; their admin pages show them masked."""
    query = f"retry {WITH_SECRETS}"
    run_id = _start(people.alice.user, [tool_call("p1", "search_public", {"query": query})])
    services.run_advance(run_id=run_id)
    row = m.LedgerEntry.objects.get(run_id=run_id)
    assert row.arguments["query"] == query  # what the tool ran
    client = Client()
    client.force_login(people.root.user)
    # The admin's own quoting: it reads "_" plus two hex digits as an escaped character, and a
    # run id's hex may begin with one ("run_23…" was run "run#…", not found: a redirect).
    run_page = f"/admin/runs/run/{quote(run_id)}/change/"
    for page in (f"/admin/runs/ledgerentry/{row.pk}/change/", run_page):
        response = client.get(page)
        assert response.status_code == 200, page
        html = response.content.decode()
        assert _leaks(html) == [], page
        assert "[secret:hmac-sha256:" in html, page


def test_deployment_patterns_extend_the_scanner(settings: Any, people: kit.People) -> None:
    """issue 9 item 12: AGENTCONSOLE_SECRET_PATTERNS adds shapes; a bad one stops start-up."""
    settings.AGENTCONSOLE_SECRET_PATTERNS = [r"ACME-[0-9]{6}"]
    run_id = _start(people.alice.user, [], goal="ticket ACME-123456 is mine")
    assert "ACME-123456" not in m.Run.objects.get(pk=run_id).goal
    with pytest.raises(ImproperlyConfigured, match="AGENTCONSOLE_SECRET_PATTERNS"):
        settings.AGENTCONSOLE_SECRET_PATTERNS = ["(unclosed"]

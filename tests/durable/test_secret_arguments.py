"""A secret argument across a confirmation wait and a worker's crash (issue 21 item 1).

The person is shown the proposal masked (the card says "masked secret, N characters"), the
confirmation is bound to the hash of the real arguments, the run waits holding the real
proposal, a worker dies after committing the intent, and the next worker re-issues the same
command: the tool receives exactly what the planner wrote. Nothing recorded or shown holds the
secret; it is stored only where the runner reads it back.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from agentconsole import wiring
from policy import selectors as policy_selectors
from policy.domain.canonical import proposal_hash
from policy.domain.secrets.redaction import MASKED_SECRETS, active_scanner
from policy.models import Confirmation
from runs import models as m
from runs import selectors, services
from runs.domain.machine import Status
from tests.durable.durable_kit import advance_until_worker_dies, create, final, use
from tests.support.db_scan import scan
from tests.support.personas import People, ensure_roles

pytestmark = pytest.mark.django_db(transaction=True)

TOKEN = "abc123XYZ789"
TEXT = f"reset link ?token={TOKEN}"
# The real arguments may be stored only where the runner reads them back.
EXECUTOR_ONLY = {
    ("runs_run", "planner"),
    ("runs_run", "pending_proposal"),
    ("runs_ledgerentry", "arguments"),
}


def _stored_in() -> set[tuple[str, str]]:
    return {(h.table, h.column) for h in scan(TOKEN)}


def test_a_secret_is_shown_masked_waits_survives_a_crash_and_reaches_the_tool(
    plugin_tools: Any,
) -> None:
    ensure_roles()
    operator = People().operator.user
    run = create([use("p1", "durable_guarded", text=TEXT), final("tool-1")])
    assert services.run_advance(run_id=run.run_id).status is Status.WAITING_CONFIRMATION

    # The confirmation: bound to the real arguments, showing them masked, with the length.
    row = Confirmation.objects.get(run_id=run.run_id, status="pending")
    assert row.proposal_hash == proposal_hash("durable_guarded", "1", {"text": TEXT})
    tag = active_scanner().tag(TOKEN)
    assert row.proposal["arguments"] == {"text": f"reset link ?token={tag}"}
    assert row.proposal[MASKED_SECRETS] == {tag: len(TOKEN)}
    (item,) = policy_selectors.confirmation_queue(
        viewer=operator,
        registry=wiring.registry(),
        observations=selectors.cited_observations,
    ).items
    assert item.binding == "masked"
    assert [(s.tag, s.chars) for s in item.masked] == [(tag, len(TOKEN))]
    client = Client()
    client.force_login(operator)
    page = client.get("/confirmations/").content.decode()
    assert f"masked secret, {len(TOKEN)} characters" in page
    assert "1 masked secret" in page
    assert TOKEN not in page
    # Waiting: the run's own state holds the real proposal, nothing recorded does.
    assert _stored_in() <= EXECUTOR_ONLY
    assert ("runs_run", "pending_proposal") in _stored_in()

    services.confirmation_decide(
        confirmation_id=row.pk, approved=True, shown_hash=row.proposal_hash, by=operator
    )
    # The worker that resumes the run commits the command's intent and dies before the call.
    advance_until_worker_dies(run.run_id, tool="durable_guarded")
    (ledger,) = m.LedgerEntry.objects.filter(run_id=run.run_id)
    assert (ledger.status, ledger.arguments) == ("started", {"text": TEXT})
    assert plugin_tools.ARGUMENTS == []

    # The next worker re-issues the same command: the tool gets the real text, once.
    assert services.run_advance(run_id=run.run_id).status is Status.COMPLETED
    assert plugin_tools.ARGUMENTS == [("durable_guarded", {"text": TEXT})]
    assert plugin_tools.calls("durable_guarded") == [ledger.idempotency_token]
    assert _stored_in() <= EXECUTOR_ONLY
    events = json.dumps(list(m.TraceEvent.objects.filter(run_id=run.run_id).values("details")))
    assert TOKEN not in events

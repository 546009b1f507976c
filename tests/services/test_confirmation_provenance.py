"""Where a waiting write's arguments came from, on the confirmation card (issue 23 item 4): real
runs through the runner, the ORM store and the thread executor with the mail package
(``tests/plugins/mail.py``), read back by the queue's selector as the page shows them.

The write is ``send_email``: its recipient comes from the untrusted inbox (rule confirm: why it
waits), its subject from the user's goal, its body from a preference the user saved
(``signature``, through their own propose/confirm path), which the runtime now counts as an
origin of its own. The card reads what the runtime recorded (the trace), in a fixed number of
queries however many cards there are.

Personas: ``alice`` owns the runs and the preference; ``operator`` reads the queue.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agentconsole import wiring
from policy import selectors as policy_selectors
from policy import services as policy_services
from policy.domain.canonical import proposal_hash
from policy.models import Confirmation
from runs import models as m
from runs import selectors as run_selectors
from runs import services
from runs.domain.budgets import RunBudgets
from runs.domain.machine import Status
from tests.plugins import mail
from tests.support.mail_runs import ARGS, GOAL, SIGNATURE, mail_world, save_signature, waiting_send
from tests.support.personas import user_fixture
from tests.support.planner import tool_call

pytestmark = pytest.mark.django_db(transaction=True)
world = pytest.fixture(autouse=True)(mail_world)

alice = user_fixture("alice", "user")
operator = user_fixture("operator", "operator")


def queue(viewer: Any) -> Any:
    return policy_selectors.confirmation_queue(
        viewer=viewer,
        registry=wiring.registry(),
        observations=run_selectors.cited_observations,
        recorded=run_selectors.recorded_provenance,
    )


def test_the_card_says_where_each_argument_of_the_waiting_write_came_from(
    alice: Any, operator: Any
) -> None:
    save_signature(alice)
    row = waiting_send()
    (item,) = queue(operator).items
    assert item.run_id == row.pk
    prov = item.provenance
    assert prov.recorded
    assert (prov.why, prov.waits_for) == ("UNTRUSTED_PROVENANCE", ("to",))
    leaves = {leaf.path: leaf for leaf in prov.leaves}
    assert set(leaves) == {"to", "subject", "body"}

    to = leaves["to"]
    assert (to.untrusted, to.rule) == (True, "confirm")
    assert to.words == "← tool-1 (inbox_read): untrusted"
    (origin,) = to.origins
    assert mail.ATTACKER in origin.excerpt
    assert origin.excerpt.startswith("…")

    assert (leaves["subject"].untrusted, leaves["subject"].words) == (False, "← the user's goal")
    body = leaves["body"]
    assert (body.untrusted, body.rule) == (False, "")
    assert body.words == "← preference signature (saved by the user)"

    # The trace holds what the card read: keys and ids, never the preference's value.
    recorded = m.TraceEvent.objects.get(
        run_id=row.pk, event="proposal.provenance", proposal_id="send"
    )
    paths = {recorded.details[f"leaf_{i}"]: i for i in range(recorded.details["leaves"])}
    assert recorded.details[f"from_{paths['body']}"] == ["preference:signature"]
    assert SIGNATURE not in str(recorded.details)


def test_without_the_preference_the_body_is_the_planners_own(alice: Any, operator: Any) -> None:
    waiting_send()
    (item,) = queue(operator).items
    body = next(leaf for leaf in item.provenance.leaves if leaf.path == "body")
    assert (body.origins, body.words) == ((), "no source found (the planner wrote it)")


def test_the_page_shows_the_lines_and_marks_the_untrusted_one(
    alice: Any, operator: Any, client: Any
) -> None:
    save_signature(alice)
    waiting_send()
    client.force_login(operator)
    page = client.get("/confirmations/").content.decode()
    assert 'data-q-provenance="recorded"' in page
    assert "← tool-1 (inbox_read): untrusted" in page
    assert "⚠ untrusted-derived" in page
    assert 'data-q-rule="confirm"' in page
    assert "← the user&#x27;s goal" in page
    assert "← preference signature (saved by the user)" in page
    assert "Why it waits:" in page


def test_the_queue_reads_provenance_in_the_same_queries_for_one_card_and_for_three(
    alice: Any, operator: Any
) -> None:
    save_signature(alice)
    waiting_send()
    queue(operator)  # roles, the registry: warm
    with CaptureQueriesContext(connection) as one:
        assert len(queue(operator).items) == 1
    waiting_send()
    waiting_send()
    with CaptureQueriesContext(connection) as three:
        items = queue(operator).items
    assert len(items) == 3
    assert all(i.provenance.recorded for i in items)
    assert len(three) == len(one), [q["sql"] for q in three.captured_queries]


def test_a_proposal_id_used_again_shows_the_record_of_its_own_wait(
    alice: Any, operator: Any
) -> None:
    """The planner proposes "send" again after the first was declined, now with its own body:
    the second card reads the second wait's record, not the first one's."""
    save_signature(alice)
    again = tool_call("send", "send_email", {**ARGS, "body": "Cheers"}, sources=["user-1"])
    row = waiting_send(again)
    first = Confirmation.objects.get(pk=row.pending_confirmation_id)
    services.confirmation_decide(
        confirmation_id=first.pk,
        approved=False,
        shown_hash=first.proposal_hash,
        by=operator,
        reason="not to that address",
    )
    services.run_advance(run_id=row.pk)
    row.refresh_from_db()
    assert row.status == Status.WAITING_CONFIRMATION.value
    assert row.pending_confirmation_id != first.pk
    (item,) = queue(operator).items
    assert item.confirmation_id == row.pending_confirmation_id
    body = next(leaf for leaf in item.provenance.leaves if leaf.path == "body")
    assert body.words == "no source found (the planner wrote it)"


def test_a_confirmation_no_step_asked_for_is_shown_as_not_recorded(
    operator: Any, client: Any
) -> None:
    """A confirmation written without a run step (as a scenario file may): nothing to read."""
    state = services.run_create(
        subject="alice",
        goal=GOAL,
        budgets=RunBudgets(),
        grants=[],
        planner={"kind": "fixture", "outputs": [{"kind": "final", "answer": "done"}]},
    )
    proposal = {"kind": "tool", "proposal_id": "send", "tool_name": "send_email"}
    policy_services.confirmation_request(
        run_id=state.run_id,
        confirmation_id=f"{state.run_id}~c1",
        proposal_hash=proposal_hash("send_email", "1", ARGS),
        tool_name="send_email",
        tool_version="1",
        proposal={**proposal, "tool_version": "1", "arguments": ARGS},
        expires_at_step=9,
        cites_untrusted=False,
    )
    (item,) = queue(operator).items
    assert item.provenance.recorded is False
    client.force_login(operator)
    page = client.get("/confirmations/").content.decode()
    assert 'data-q-provenance="missing"' in page
    assert "No provenance was recorded for this proposal" in page

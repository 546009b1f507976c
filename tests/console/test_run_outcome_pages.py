"""The flag of a completed run whose write did not take effect (issue 21 item 2), wherever the
console shows a run's status: the runs list (with its filter), the run's page, and the queue card
of another write of the same run that waits for a person.

Personas (tests/support/personas.py): ``alice`` (a user) owns the runs; ``operator`` sees every
run and the confirmation queue.
"""

from __future__ import annotations

import copy
import re
import uuid
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from runs import models as m
from tests.api import api_kit as kit
from tests.support.personas import make_user, user_fixture

pytestmark = pytest.mark.django_db

alice = user_fixture("alice", "user")
operator = user_fixture("operator", "operator")

FLAG = 'data-outcome-flag="writes_not_applied"'


def _client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _rows(owner: Any, n: int, **fields: Any) -> list[str]:
    """``n`` rows as the list reads them, inserted directly (the list only reads runs; as in
    test_runs_pages.bulk_runs)."""
    rows = [
        m.Run(
            id=f"run_{uuid.uuid4().hex}", subject=owner.get_username(), goal=f"goal {i}",
            owner=owner, max_steps=5, max_tool_calls=5, max_repeated_proposal=2,
            deadline_ms=0, **{"status": "completed", **fields},
        )
        for i in range(n)
    ]  # fmt: skip
    m.Run.objects.bulk_create(rows)
    return [r.pk for r in rows]


def _listed(page: str) -> list[str]:
    return re.findall(r'data-run-row="([^"]+)"', page)


def test_the_list_flags_a_completed_run_with_a_refused_write(alice: Any) -> None:
    [refused] = _rows(alice, 1, writes_succeeded=1, writes_rejected=1)
    [clean] = _rows(alice, 1, writes_succeeded=2)
    [older] = _rows(alice, 1, **dict.fromkeys(m.WRITE_FIELDS))  # never counted
    page = _client(alice).get("/runs/").content.decode()
    row = page[page.index(f'data-run-row="{refused}"') :].split("</tr>", 1)[0]
    assert '<span class="badge badge-warn">completed</span>' in row
    assert FLAG in row
    assert "1 write not applied" in row
    assert "writes: 1 succeeded, 1 rejected" in row
    for other in (clean, older):
        row = page[page.index(f'data-run-row="{other}"') :].split("</tr>", 1)[0]
        assert '<span class="badge badge-ok">completed</span>' in row
        assert "data-outcome-flag" not in row


def test_the_list_filters_the_flagged_runs(alice: Any) -> None:
    refused = _rows(alice, 2, writes_failed=1)
    _rows(alice, 3, writes_succeeded=1)
    _rows(alice, 1, writes_rejected=1, status="failed")  # a failed run says so itself
    response = _client(alice).get("/runs/?outcome_flag=writes_not_applied")
    assert response.status_code == 200
    page = response.content.decode()
    assert set(_listed(page)) == set(refused)
    assert '<option value="writes_not_applied" selected>' in page
    assert "completed with a write not applied" in page
    bad = _client(alice).get("/runs/?outcome_flag=maybe")
    assert bad.status_code == 400


def test_the_filtered_list_costs_the_same_queries_for_10_and_100_flagged_runs(
    alice: Any, operator: Any
) -> None:
    client = _client(operator)

    def count() -> int:
        with CaptureQueriesContext(connection) as queries:
            assert client.get("/runs/?outcome_flag=writes_not_applied").status_code == 200
        return len(queries)

    _rows(alice, 10, writes_rejected=1)
    few = count()
    _rows(alice, 90, writes_rejected=1)
    assert count() == few


@pytest.mark.usefixtures("corpus")
def test_the_run_page_says_the_write_did_not_take_effect(alice: Any) -> None:
    data = copy.deepcopy(kit.load_fixture("scenarios/mem-stale-no-version.json"))
    run_id = kit.scenario_run(data, alice)["state"]["run_id"]
    page = _client(alice).get(f"/runs/{run_id}/").content.decode()
    badge = page[page.index('data-live-section="badge"') :].split("</span></p>", 1)[0]
    assert '<span class="badge badge-warn" data-run-status>completed</span>' in badge
    assert FLAG in badge
    assert "Completed, but 1 write did not take effect (writes: 1 succeeded, 1 rejected)" in page
    assert "<dd data-run-writes>1 succeeded, 1 rejected</dd>" in page
    # The trace's last line says it too (the live trace's script mirrors it).
    assert "Run stopped: FINAL_ANSWER_VALIDATED (completed), 1 write not applied" in page


def test_the_run_page_of_an_uncounted_run_says_so(alice: Any) -> None:
    [older] = _rows(alice, 1, **dict.fromkeys(m.WRITE_FIELDS))
    page = _client(alice).get(f"/runs/{older}/").content.decode()
    assert "not recorded (the run predates write counting)" in page
    assert "data-outcome-flag" not in page


def test_the_queue_card_of_a_later_write_warns_of_an_earlier_refused_one(operator: Any) -> None:
    """A run whose first write the gate refused, now waiting for a person on a second one: the
    operator sees on that card that the run already had a write not applied."""
    alice = make_user("alice", "user")
    data = copy.deepcopy(kit.load_fixture("scenarios/s15-missing-confirmation.json"))
    refused = {**data["planner"][0], "proposal_id": "p0"}
    refused["arguments"] = {"key": "auto_approve", "value": "true"}  # MEMORY_KEY_NOT_ALLOWED
    data["planner"] = [refused, *data["planner"]]
    state = kit.scenario_run(data, alice)["state"]
    assert state["status"] == "waiting_confirmation"
    assert state["writes"]["rejected"] == 1
    page = _client(operator).get("/confirmations/").content.decode()
    card = page[page.index(f'data-confirmation-run="{state["run_id"]}"') :]
    assert 'data-q-run-writes-not-applied="1"' in card
    assert "run: 1 write not applied" in card
    assert "<dd data-q-run-writes>1 rejected: an earlier write of this run" in card


def test_the_queue_card_of_a_run_with_no_refused_write_shows_nothing(operator: Any) -> None:
    waiting = kit.waiting_run(make_user("alice", "user"))
    page = _client(operator).get("/confirmations/").content.decode()
    assert f'data-confirmation-run="{waiting.run_id}"' in page
    assert "data-q-run-writes" not in page

"""The runs list's filters of issue 24 item 5: time range, tool used, stop reason, with the
outcome and the filters the list had; the page (/runs/), the API (/api/runs/) and the selector
they share (``runs.selectors.runs_filtered``).

Personas (tests/support/personas.py): ``alice`` (a user: her own runs only), ``bob`` (the
outsider: none of alice's runs, whatever the filter), ``operator`` (every run).
"""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from runs import models as m
from runs import selectors, services
from tests.api.api_kit import waiting_run
from tests.support.personas import make_user, user_fixture

pytestmark = pytest.mark.django_db

alice = user_fixture("alice", "user")
bob = user_fixture("bob", "user")


@pytest.fixture(autouse=True)
def no_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(services, "enqueue_advance", lambda run_id, **kw: None)


def client_for(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def runs_of(owner: Any, n: int = 1, *, at: datetime | None = None, **fields: Any) -> list[str]:
    """``n`` run rows as the list reads them (the list only reads runs: inserted directly)."""
    rows = [
        m.Run(
            id=f"run_{uuid.uuid4().hex}", subject=owner.get_username(), goal=f"goal {i}",
            owner=owner, max_steps=5, max_tool_calls=5, max_repeated_proposal=2, deadline_ms=0,
            **{"status": "completed", **fields},
        )
        for i in range(n)
    ]  # fmt: skip
    m.Run.objects.bulk_create(rows)
    ids = [r.pk for r in rows]
    if at is not None:
        m.Run.objects.filter(pk__in=ids).update(created_at=at)
    return ids


def called(run_id: str, tool: str) -> None:
    """A ledger entry of ``tool`` for the run (what the runner writes before calling it)."""
    m.LedgerEntry.objects.create(
        run_id=run_id, idempotency_token=uuid.uuid4().hex, proposal_id="p1", tool_name=tool,
        tool_version="1.0.0", arguments_hash="0" * 64, proposal_hash="0" * 64, arguments={},
        deadline_ms=0, step=1,
    )  # fmt: skip


def listed(response: Any) -> set[str]:
    assert response.status_code == 200, response.content.decode()[:500]
    return set(re.findall(r'data-run-row="([^"]+)"', response.content.decode()))


def api_listed(response: Any) -> set[str]:
    assert response.status_code == 200, response.content.decode()[:500]
    return {r["run_id"] for r in response.json()["results"]}


def day(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


# -- each filter, on the page and the API ----------------------------------------------------


def test_the_time_range_keeps_both_days_whole(alice: Any) -> None:
    (before,) = runs_of(alice, at=day("2026-03-31T23:59:59"))
    (first,) = runs_of(alice, at=day("2026-04-01T00:00:00"))
    (last,) = runs_of(alice, at=day("2026-04-03T23:59:59"))
    (after,) = runs_of(alice, at=day("2026-04-04T00:00:00"))
    page = client_for(alice).get("/runs/?created_from=2026-04-01&created_to=2026-04-03")
    assert listed(page) == {first, last}
    assert listed(client_for(alice).get("/runs/?created_from=2026-04-01")) == {first, last, after}
    assert listed(client_for(alice).get("/runs/?created_to=2026-03-31")) == {before}
    # The API takes instants: [created_after, created_before).
    api = client_for(alice).get(
        "/api/runs/?created_after=2026-04-01T00:00:00Z&created_before=2026-04-04T00:00:00Z"
    )
    assert api_listed(api) == {first, last}


def test_the_tool_filter_finds_runs_that_called_or_proposed_it(alice: Any) -> None:
    """A ledger entry (the tool was called) or a confirmation (it was proposed and a person
    was asked): both count; a run that used another tool does not."""
    searched, wrote, idle = runs_of(alice, 3)
    called(searched, "search_public")
    called(wrote, "write_artifact")
    asked = waiting_run(alice).run_id  # save_preference waits for a person; nothing ran
    page = client_for(alice).get("/runs/?tool=search_public")
    assert listed(page) == {searched}
    assert listed(client_for(alice).get("/runs/?tool=save_preference")) == {asked}
    assert api_listed(client_for(alice).get("/api/runs/?tool=write_artifact")) == {wrote}
    assert api_listed(client_for(alice).get("/api/runs/?tool=save_preference")) == {asked}
    assert idle in listed(client_for(alice).get("/runs/"))  # there, unfiltered


def test_a_run_that_called_a_tool_twice_is_listed_once(alice: Any) -> None:
    (run,) = runs_of(alice)
    called(run, "search_public")
    called(run, "search_public")
    page = client_for(alice).get("/runs/?tool=search_public").content.decode()
    assert page.count(f'data-run-row="{run}"') == 1


def test_the_stop_reason_filter(alice: Any) -> None:
    (steps,) = runs_of(alice, status="failed", stop_reason="MAX_STEPS_REACHED")
    (cancelled,) = runs_of(alice, status="cancelled", stop_reason="CANCELLED")
    runs_of(alice, stop_reason="FINAL_ANSWER_VALIDATED")
    assert listed(client_for(alice).get("/runs/?stop_reason=MAX_STEPS_REACHED")) == {steps}
    assert api_listed(client_for(alice).get("/api/runs/?stop_reason=CANCELLED")) == {cancelled}
    # A plugin planner's own code: the API takes any code, the page offers the runtime's.
    (own,) = runs_of(alice, status="failed", stop_reason="MY_PLANNER_GAVE_UP")
    assert api_listed(client_for(alice).get("/api/runs/?stop_reason=MY_PLANNER_GAVE_UP")) == {own}


def test_filters_combine_with_each_other_and_the_old_ones(alice: Any) -> None:
    at = day("2026-05-02T10:00:00")
    (hit,) = runs_of(alice, at=at, status="failed", stop_reason="MAX_STEPS_REACHED")
    (other_day,) = runs_of(alice, status="failed", stop_reason="MAX_STEPS_REACHED")
    (other_reason,) = runs_of(alice, at=at, status="failed", stop_reason="TOOL_FAILED")
    (other_goal,) = runs_of(alice, at=at, status="failed", stop_reason="MAX_STEPS_REACHED")
    m.Run.objects.filter(pk=hit).update(goal="find the needle")
    for run in (hit, other_day, other_reason, other_goal):
        called(run, "search_public")
    query = (
        "status=failed&q=needle&tool=search_public&stop_reason=MAX_STEPS_REACHED"
        "&created_from=2026-05-02&created_to=2026-05-02"
    )
    response = client_for(alice).get("/runs/?" + query)
    assert listed(response) == {hit}
    page = response.content.decode()
    # The counts say what each status would show under the same filters.
    assert re.search(r'data-status-count="failed">failed <span class="runs-count-n">1<', page)
    # The status links and the pager keep the new filters.
    link = re.search(r'href="\?status=completed([^"]*)"', page)
    assert link is not None
    for kept in ("tool=search_public", "stop_reason=MAX_STEPS_REACHED", "created_from=2026-05-02"):
        assert kept in link.group(1)


def test_the_outsider_finds_nothing_of_alices_whatever_the_filter(alice: Any, bob: Any) -> None:
    (run,) = runs_of(alice, status="failed", stop_reason="MAX_STEPS_REACHED")
    called(run, "search_public")
    query = "?tool=search_public&stop_reason=MAX_STEPS_REACHED"
    assert listed(client_for(bob).get("/runs/" + query)) == set()
    assert api_listed(client_for(bob).get("/api/runs/" + query)) == set()
    assert listed(client_for(make_user("operator", "operator")).get("/runs/" + query)) == {run}


# -- bad input: the form again, a 400, what was typed kept -----------------------------------


@pytest.mark.parametrize(
    ("query", "field", "kept"),
    [
        ("created_from=yesterday", "created_from", 'value="yesterday"'),
        ("created_to=2026-02-30", "created_to", 'value="2026-02-30"'),
        ("created_from=2026-05-03&created_to=2026-05-01", "created_to", 'value="2026-05-01"'),
        ("stop_reason=BECAUSE", "stop_reason", ""),
        ("tool=rm_rf", "tool", ""),
        ("created_from=99999-01-01", "created_from", 'value="99999-01-01"'),
    ],
)
def test_a_bad_filter_is_the_form_again_with_its_error_and_value(
    alice: Any, query: str, field: str, kept: str
) -> None:
    runs_of(alice)
    response = client_for(alice).get("/runs/?q=kept-text&" + query)
    assert response.status_code == 400
    page = response.content.decode()
    assert "FILTER_INVALID" in page
    assert re.search(rf'class="field has-error">\s*<label for="id_{field}"', page), page[:3000]
    assert 'value="kept-text"' in page
    if kept:
        assert kept in page
    assert "data-run-row" not in page  # nothing read under a filter that cannot apply
    assert "Nothing is listed until the filters are fixed." in page


def test_the_last_day_a_date_input_takes_is_no_500(alice: Any) -> None:
    (run,) = runs_of(alice)
    assert listed(client_for(alice).get("/runs/?created_to=9999-12-31")) == {run}


@pytest.mark.parametrize(
    "query",
    ["created_after=yesterday", "stop_reason=not a code", "tool=" + "t" * 129],
)
def test_a_bad_api_filter_is_a_400_with_its_code(alice: Any, query: str) -> None:
    response = client_for(alice).get("/api/runs/?" + query)
    assert response.status_code == 400
    assert response.json()["code"] == "VALIDATION_ERROR"


# -- cost ------------------------------------------------------------------------------------


def test_the_filtered_list_costs_the_same_for_10_and_100_matching_runs(alice: Any) -> None:
    """The tool filter is a subquery, not a query per run: the page and the API read the same
    number of times whatever the number of runs that used the tool."""
    client = client_for(alice)
    query = "tool=search_public&stop_reason=MAX_STEPS_REACHED&created_from=2000-01-01"

    def add(n: int) -> None:
        for run in runs_of(alice, n, status="failed", stop_reason="MAX_STEPS_REACHED"):
            called(run, "search_public")

    def count(path: str) -> int:
        with CaptureQueriesContext(connection) as queries:
            assert client.get(path).status_code == 200
        return len(queries)

    add(10)
    few = (count("/runs/?" + query), count("/api/runs/?" + query))
    add(90)
    assert (count("/runs/?" + query), count("/api/runs/?" + query)) == few


def test_the_selector_builds_one_statement(alice: Any) -> None:
    """``runs_filtered`` adds conditions and subqueries to the caller's query; it runs none."""
    with CaptureQueriesContext(connection) as queries:
        qs = selectors.runs_filtered(
            m.Run.objects.all(),
            created_from=day("2026-01-01T00:00:00"),
            created_before=day("2026-02-01T00:00:00"),
            tool="search_public",
            stop_reason="MAX_STEPS_REACHED",
        )
    assert len(queries) == 0
    sql = str(qs.query)
    assert sql.count("SELECT") == 3  # the runs, and the two subqueries of the tool filter
